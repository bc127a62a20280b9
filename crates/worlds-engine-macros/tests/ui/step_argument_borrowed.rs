use worlds_engine::prelude::*;

#[step]
async fn greet(name: &str) -> Result<String, StepError> {
    Ok(format!("hello, {name}"))
}

fn main() {}
