// Rule 3 (minter parameter), reach: ulid's `Generator` and fastrand's `Rng` behind aliases, in the
// state and in a tuple. Nothing in the tokens says "rng" or "generator"; the `Minter` marker on
// them (features `ulid`, `fastrand`) does.
use delivery::{HandlerError, Json, State, consumer};
use std::sync::{Arc, Mutex};

type Ids = ulid::Generator;
type Dice = fastrand::Rng;

#[consumer]
async fn record(
    State(state): State<Arc<Mutex<(Ids, Dice)>>>,
    Json(id): Json<String>,
) -> Result<(), HandlerError> {
    let _ = (state, id);
    Ok(())
}

fn main() {}
