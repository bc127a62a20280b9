use worlds_engine::prelude::*;

#[step]
fn charge(cents: u64) -> Result<u64, StepError> {
    Ok(cents)
}

fn main() {}
