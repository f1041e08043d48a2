// The escape `allow_clock` must record why the clock read is safe: an empty reason is refused.
use delivery::{HandlerError, Json, consumer};
use std::time::Instant;

#[consumer(allow_clock = "")]
async fn record(Json(id): Json<String>) -> Result<(), HandlerError> {
    let started = Instant::now();
    let _ = (id, started.elapsed());
    Ok(())
}

fn main() {}
