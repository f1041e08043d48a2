// Rule 3 (minter parameter), reach: rand 0.8's `StdRng` in the state, behind an alias (the name
// a service gives its rand 0.8 dependency is its own: here `rand_0_8`). Nothing in the tokens
// says "rng"; the `Minter` marker on rand 0.8's generators (feature `rand-0_8`) does.
use delivery::{HandlerError, Json, State, consumer};

type Dice = rand_0_8::rngs::StdRng;

#[consumer]
async fn record(State(dice): State<Dice>, Json(id): Json<String>) -> Result<(), HandlerError> {
    let _ = (dice, id);
    Ok(())
}

fn main() {}
