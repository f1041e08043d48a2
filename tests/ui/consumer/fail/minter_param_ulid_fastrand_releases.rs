// Rule 3 (minter parameter), reach: ulid 1's and 2's `Generator` and fastrand 1's `Rng` (features
// `ulid-1`, `ulid-2`, `fastrand-1`; ulid 3 and fastrand 2 are `minter_param_ulid_fastrand`),
// behind aliases, in a tuple in the state: refused by the `Minter` marker, not by their names.
use delivery::{HandlerError, Json, State, consumer};
use std::sync::{Arc, Mutex};

type Ids1 = ulid_1::Generator;
type Ids2 = ulid_2::Generator;
type Dice1 = fastrand_1::Rng;

#[consumer]
async fn record(
    State(state): State<Arc<Mutex<(Ids1, Ids2, Dice1)>>>,
    Json(id): Json<String>,
) -> Result<(), HandlerError> {
    let _ = (state, id);
    Ok(())
}

fn main() {}
