// Rule 1 (clock parameter), reach: `State<Box<SystemTime>>`.
use delivery::{HandlerError, Json, State, consumer};
use std::time::SystemTime;

#[consumer]
async fn record(
    State(now): State<Box<SystemTime>>,
    Json(id): Json<String>,
) -> Result<(), HandlerError> {
    let _ = (now, id);
    Ok(())
}

fn main() {}
