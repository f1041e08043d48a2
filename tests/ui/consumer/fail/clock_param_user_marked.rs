// Rule 1 (clock parameter), reach: a user type declared a clock with `impl delivery::marker::Clock`,
// taken through `State`. Nothing in the tokens says "clock"; the marker trait does.
use delivery::{HandlerError, Json, State, consumer};

#[derive(Clone, Default)]
struct WallClock;

impl delivery::marker::Clock for WallClock {}

#[consumer]
async fn record(
    State(clock): State<WallClock>,
    Json(id): Json<String>,
) -> Result<(), HandlerError> {
    let _ = (clock, id);
    Ok(())
}

fn main() {}
