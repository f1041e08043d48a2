// Rule 3: a deadline made from a clock read by hand, `Instant::now() + d` for `sleep_until`, is
// refused with the way that writes nothing: `delivery::Stopwatch::deadline`.
use delivery::{HandlerError, Json, consumer};
use std::time::Duration;
use tokio::time::Instant;

#[consumer]
async fn record(Json(id): Json<String>) -> Result<(), HandlerError> {
    tokio::time::sleep_until(Instant::now() + Duration::from_millis(10)).await;
    let _ = id;
    Ok(())
}

fn main() {}
