#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| worlds_engine::fuzzing::event_json(data));
