// PENDING (confusing, not wrong). Should FAIL with BOTH errors: a user-marked clock in `State`
// (a type-level error) and `Uuid::new_v4()` in the body (a token-level error). Today only the
// token-level error is reported: any token-level error skips the expansion that carries the
// type-level probes, so the clock parameter shows up only after the mint is fixed. Could emit the
// probes (`const _: () = { fn __delivery_checks() { .. } };`) also on the error path.
use delivery::{HandlerError, Json, State, consumer};
use uuid::Uuid;

#[derive(Clone, Default)]
struct WallClock;

impl delivery::Clock for WallClock {}

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
