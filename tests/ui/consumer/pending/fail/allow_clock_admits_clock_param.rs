// PENDING (miss? — decide). `allow_clock = ".."` is the recorded escape for a clock *read* in the
// body that writes nothing (DESIGN.md), but it also switches off the clock *parameter* check
// (token and type level), so a handler taking `State<SystemTime>` compiles. Rule 1 of the
// contract has no escape; if that is intended, document it on `allow_clock`.
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
