// Rule 4 (body reads the clock), reach: inside a closure.
use delivery::{HandlerError, Json, consumer};

#[consumer]
async fn stamp_all(Json(ids): Json<Vec<String>>) -> Result<(), HandlerError> {
    let stamped: Vec<_> = ids
        .iter()
        .map(|id| (id.clone(), std::time::SystemTime::now()))
        .collect();
    drop(stamped);
    Ok(())
}

fn main() {}
