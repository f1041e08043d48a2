// The user's `#[allow(..)]` on the handler reaches the body (it goes on `handle`), so the lint it
// silences stays silent under `#![deny(warnings)]`.
#![deny(warnings)]
use delivery::memory::MemoryBroker;
use delivery::{Consumer, HandlerError, Json, consumer};

#[consumer]
#[allow(unused_variables)]
async fn record(Json(id): Json<String>) -> Result<(), HandlerError> {
    let unused = id.len();
    Ok(())
}

fn main() {
    let _run = Consumer::new(MemoryBroker::new().consume("q")).run(record);
}
