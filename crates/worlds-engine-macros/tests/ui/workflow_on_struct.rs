use worlds_engine::prelude::*;

#[workflow]
struct Checkout {
    cents: u64,
}

fn main() {}
