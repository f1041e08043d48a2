// Rule 1 (clock parameter), reach: `State<Arc<Instant>>`.
use delivery::{HandlerError, Json, State, consumer};
use std::sync::Arc;
use std::time::Instant;

#[consumer]
async fn record(
    State(started): State<Arc<Instant>>,
    Json(id): Json<String>,
) -> Result<(), HandlerError> {
    let _ = (started, id);
    Ok(())
}

fn main() {}
