// Rule 4 (body reads the clock), reach: inside the arguments of `format!`.
use delivery::{HandlerError, Json, consumer};
use std::time::SystemTime;

#[consumer]
async fn record(Json(id): Json<String>) -> Result<(), HandlerError> {
    let line = format!("{id} received at {:?}", SystemTime::now());
    drop(line);
    Ok(())
}

fn main() {}
