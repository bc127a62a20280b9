use worlds_engine::prelude::*;

#[activity(timeout = "30 seconds")]
async fn charge(cents: u64) -> Result<u64, StepError> {
    Ok(cents)
}

#[step(timeout = 30)]
async fn refund(cents: u64) -> Result<u64, StepError> {
    Ok(cents)
}

#[step(retry = sometimes)]
async fn notify(cents: u64) -> Result<u64, StepError> {
    Ok(cents)
}

#[workflow(failure_strategy = retry_forever)]
async fn checkout(cents: u64) -> Result<u64, WorkflowError> {
    Ok(cents)
}

fn main() {}
