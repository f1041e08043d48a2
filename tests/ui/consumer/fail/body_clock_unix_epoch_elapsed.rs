// Rule 3: `UNIX_EPOCH.elapsed()` reads the clock (`SystemTime::now()` since the epoch).
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
