// `allow_clock` is an escape for clock reads only: minting an id in the same handler is still
// refused (and the allowed `Instant::now()` is not).
use delivery::{HandlerError, Json, consumer};
use std::time::Instant;
use uuid::Uuid;

#[consumer(allow_clock = "latency metric only; writes nothing")]
async fn record(Json(name): Json<String>) -> Result<(), HandlerError> {
    let started = Instant::now();
    let customer_id = Uuid::new_v4();
    let _ = (name, customer_id, started.elapsed());
    Ok(())
}

fn main() {}
