use worlds_engine::prelude::*;

#[step(retries = 3)]
async fn charge(cents: u64) -> Result<u64, StepError> {
    Ok(cents)
}

#[workflow(retry = api)]
async fn checkout(cents: u64) -> Result<u64, WorkflowError> {
    Ok(charge(cents).await?)
}

fn main() {}
