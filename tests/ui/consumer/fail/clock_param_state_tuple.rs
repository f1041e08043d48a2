// Rule 3: a clock inside a tuple state, `State<(u32, SystemTime)>`.
use delivery::{HandlerError, Json, State, consumer};
use std::time::SystemTime;

#[consumer]
async fn record(
    State((shard, started)): State<(u32, SystemTime)>,
    Json(id): Json<String>,
) -> Result<(), HandlerError> {
    let _ = (shard, started, id);
    Ok(())
}

fn main() {}
