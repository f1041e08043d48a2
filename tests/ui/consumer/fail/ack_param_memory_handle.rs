// Rule 1 (acknowledgement handle parameter): the in-memory broker's own delivery handle.
use delivery::{HandlerError, Json, consumer};

#[consumer]
async fn record(
    Json(id): Json<String>,
    handle: delivery::memory::MemoryHandle,
) -> Result<(), HandlerError> {
    let _ = (id, handle);
    Ok(())
}

fn main() {}
