// Rule 1 (clock parameter), reach: behind a reference.
use delivery::{HandlerError, Json, consumer};

#[consumer]
async fn record(Json(id): Json<String>, now: &std::time::Instant) -> Result<(), HandlerError> {
    let _ = (id, now);
    Ok(())
}

fn main() {}
