// Rule 3 (minter parameter), reach: rand's `StdRng` behind an alias inside `State<Arc<Mutex<..>>>`.
// Nothing in the tokens says "rng"; the `Minter` marker on rand's generators (feature `rand`) does.
use delivery::{HandlerError, Json, State, consumer};
use std::sync::{Arc, Mutex};

type Dice = rand::rngs::StdRng;

#[consumer]
async fn record(
    State(dice): State<Arc<Mutex<Dice>>>,
    Json(id): Json<String>,
) -> Result<(), HandlerError> {
    let _ = (dice, id);
    Ok(())
}

fn main() {}
