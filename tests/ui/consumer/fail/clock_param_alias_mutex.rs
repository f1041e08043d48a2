// Rule 3: a clock in `State` behind an alias to `Arc<Mutex<Instant>>` (the type-level check
// reaches through `Mutex`).
use delivery::{HandlerError, Json, State, consumer};
use std::sync::{Arc, Mutex};
use std::time::Instant;

type LastSeen = Arc<Mutex<Instant>>;

#[consumer]
async fn record(
    State(last_seen): State<LastSeen>,
    Json(id): Json<String>,
) -> Result<(), HandlerError> {
    let _ = (last_seen, id);
    Ok(())
}

fn main() {}
