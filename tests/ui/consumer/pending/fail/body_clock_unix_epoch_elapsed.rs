// PENDING (miss). Should FAIL: `UNIX_EPOCH.elapsed()` reads the clock (it is `SystemTime::now()
// .duration_since(UNIX_EPOCH)`), the usual idiom for "seconds since the epoch". Not in
// CLOCK_CALLS; `.elapsed()` on `UNIX_EPOCH` / `SystemTime::UNIX_EPOCH` could be added.
use delivery::{HandlerError, Json, consumer};
use std::time::{SystemTime, UNIX_EPOCH};

#[consumer]
async fn record(Json(id): Json<String>) -> Result<(), HandlerError> {
    let received_secs = UNIX_EPOCH.elapsed().map_err(HandlerError::retry)?.as_secs();
    let also = SystemTime::UNIX_EPOCH
        .elapsed()
        .map_err(HandlerError::retry)?;
    let _ = (id, received_secs, also);
    Ok(())
}

fn main() {}
