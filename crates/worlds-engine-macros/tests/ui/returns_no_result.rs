use worlds_engine::prelude::*;

#[step]
async fn charge(cents: u64) -> u64 {
    cents
}

#[step]
async fn refund(cents: u64) {
    let _ = cents;
}

#[workflow]
async fn checkout(cents: u64) -> (u64, u64) {
    (cents, cents)
}

fn main() {}
