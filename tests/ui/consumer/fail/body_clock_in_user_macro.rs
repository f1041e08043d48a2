// Rule 4 (body reads the clock), reach: inside the tokens of a user's `macro_rules!` invocation.
use delivery::{HandlerError, Json, consumer};
use std::time::Instant;

macro_rules! audit {
    ($($field:expr),* $(,)?) => {
        vec![$(format!("{:?}", $field)),*]
    };
}

#[consumer]
async fn record(Json(id): Json<String>) -> Result<(), HandlerError> {
    let entry = audit!(id, Instant::now());
    drop(entry);
    Ok(())
}

fn main() {}
