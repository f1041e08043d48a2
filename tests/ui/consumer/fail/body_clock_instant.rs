// Rule 4 (body reads the clock): `Instant::now()` without `allow_clock`.
use delivery::{HandlerError, Json, consumer};
use std::time::Instant;

#[consumer]
async fn record(Json(id): Json<String>) -> Result<(), HandlerError> {
    let started = Instant::now();
    let _ = (id, started);
    Ok(())
}

fn main() {}
