// Rule 3: rand's free functions other than `random` (`random_range` here) mint randomness.
use delivery::{HandlerError, Json, consumer};

mod rand {
    pub fn random_range(range: std::ops::RangeInclusive<u32>) -> u32 {
        *range.start()
    }
}

#[consumer]
async fn roll(Json(player): Json<String>) -> Result<(), HandlerError> {
    let dice = rand::random_range(1..=6);
    let _ = (player, dice);
    Ok(())
}

fn main() {}
