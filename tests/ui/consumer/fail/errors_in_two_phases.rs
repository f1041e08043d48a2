// Both kinds of error at once: a user-marked clock in `State` (found by type) and `Uuid::new_v4()`
// in the body (found by tokens) are reported together.
use delivery::{HandlerError, Json, State, consumer};
use uuid::Uuid;

#[derive(Clone, Default)]
struct WallClock;

impl delivery::marker::Clock for WallClock {}

#[consumer]
async fn record(
    State(clock): State<WallClock>,
    Json(name): Json<String>,
) -> Result<(), HandlerError> {
    let customer_id = Uuid::new_v4();
    let _ = (clock, name, customer_id);
    Ok(())
}

fn main() {}
