// Rule 2 (minter parameter): a rand RNG, `rand::rngs::ThreadRng` (a local stand-in: the check is
// by the tokens of the type path).
use delivery::{HandlerError, Json, consumer};

mod rand {
    pub mod rngs {
        pub struct ThreadRng;
    }
}

#[consumer]
async fn pick_winner(
    Json(entries): Json<Vec<String>>,
    rng: rand::rngs::ThreadRng,
) -> Result<(), HandlerError> {
    let _ = (entries, rng);
    Ok(())
}

fn main() {}
