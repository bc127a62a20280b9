#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| worlds_engine::fuzzing::duration(data));
