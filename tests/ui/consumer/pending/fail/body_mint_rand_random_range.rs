// PENDING (miss). Should FAIL: rand 0.9's free functions other than `random`/`rng` —
// `rand::random_range`, `rand::random_bool`, `rand::random_iter`, `rand::fill` — and most of
// fastrand's (`fastrand::usize`, `fastrand::i64`, `fastrand::bool`, `fastrand::alphanumeric`, ...;
// only `u64`/`u32` are listed). Local stand-in for rand; the check is by tokens.
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
