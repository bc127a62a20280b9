use worlds_engine::prelude::*;

struct Card {
    number: String,
}

#[step]
async fn charge(card: Card, cents: u64) -> Result<u64, StepError> {
    let _ = card.number;
    Ok(cents)
}

fn main() {}
