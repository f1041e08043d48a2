// `allow_clock = ".."` is the recorded exception for a handler's clock: it covers a clock taken
// from the state (the testable way to time a latency metric) as well as a read in the body.
use delivery::{HandlerError, Json, State, consumer};
use std::time::SystemTime;

#[consumer(allow_clock = "latency metric only")]
async fn record(
    State(started): State<SystemTime>,
    Json(id): Json<String>,
) -> Result<(), HandlerError> {
    let _ = (started, id);
    Ok(())
}

fn main() {}
