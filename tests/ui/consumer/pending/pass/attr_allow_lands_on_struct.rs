// PENDING (false positive under deny(warnings)). Should PASS: the user's `#[allow(..)]` on the
// handler is copied onto the generated unit struct only (consumer.rs `#(#attrs)*` before
// `struct`), not onto `handle`, which holds the body, so the lint it silences still fires there.
// Attributes other than docs should go on `handle` (or on both where valid).
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
