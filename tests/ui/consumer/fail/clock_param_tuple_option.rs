// Rule 3 (clock parameter), reach: std's `Instant` imported bare, in an `Option` inside a tuple
// state. A bare `Instant` may be anyone's, so it is judged by its type: each element of the tuple
// is probed against the `Clock` marker.
use delivery::{HandlerError, Json, State, consumer};
use std::time::Instant;

#[consumer]
async fn record(
    State((shard, started)): State<(u32, Option<Instant>)>,
    Json(id): Json<String>,
) -> Result<(), HandlerError> {
    let _ = (shard, started, id);
    Ok(())
}

fn main() {}
