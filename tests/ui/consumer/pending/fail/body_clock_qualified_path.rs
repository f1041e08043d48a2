// PENDING (miss). Should FAIL: the clock read through a qualified path, `<SystemTime>::now()`
// (tokens `< SystemTime > :: now`: the scan only matches `Ident :: Ident`). Also
// `<std::time::Instant>::now()`.
use delivery::{HandlerError, Json, consumer};
use std::time::SystemTime;

#[consumer]
async fn record(Json(id): Json<String>) -> Result<(), HandlerError> {
    let received_at = <SystemTime>::now();
    let _ = (id, received_at);
    Ok(())
}

fn main() {}
