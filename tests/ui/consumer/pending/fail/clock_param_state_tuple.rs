// PENDING (miss, beyond the listed reach — decide). A clock inside a tuple state,
// `State<(u32, SystemTime)>`, compiles: neither the token check (`Type::Tuple` is not descended)
// nor the marker traits (no tuple impls) look inside tuples (or arrays, slices).
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
