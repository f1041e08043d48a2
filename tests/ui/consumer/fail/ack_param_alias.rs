// Rule 1 (acknowledgement handle parameter), reach: behind a type alias, caught by the type.
use delivery::{HandlerError, Json, consumer};

type Ack = delivery::memory::MemoryHandle;

#[consumer]
async fn record(Json(id): Json<String>, ack: Ack) -> Result<(), HandlerError> {
    let _ = (id, ack);
    Ok(())
}

fn main() {}
