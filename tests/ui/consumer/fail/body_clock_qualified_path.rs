// Rule 3: a clock read through a qualified path, `<SystemTime>::now()`.
use delivery::{HandlerError, Json, consumer};
use std::time::SystemTime;

#[consumer]
async fn record(Json(id): Json<String>) -> Result<(), HandlerError> {
    let received_at = <SystemTime>::now();
    let _ = (id, received_at);
    Ok(())
}

fn main() {}
