use worlds_engine::prelude::*;

#[step]
async fn charge(ctx: WorkflowContext, cents: u64) -> Result<u64, StepError> {
    let _ = ctx;
    Ok(cents)
}

#[workflow]
async fn checkout(cents: u64, ctx: WorkflowContext) -> Result<u64, WorkflowError> {
    let _ = ctx;
    Ok(cents)
}

#[workflow]
async fn audit(#[resource] log: &String) -> Result<(), WorkflowError> {
    let _ = log;
    Ok(())
}

fn main() {}
