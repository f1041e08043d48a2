// Rule 1 (clock parameter), reach: the shared state itself is a clock, `State<SystemTime>`.
use delivery::{HandlerError, Json, State, consumer};
use std::time::SystemTime;

#[consumer]
async fn record(State(now): State<SystemTime>, Json(id): Json<String>) -> Result<(), HandlerError> {
    let _ = (now, id);
    Ok(())
}

fn main() {}
