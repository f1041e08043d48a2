// PENDING (false positive). Should PASS: a function-only attribute below `#[consumer]`
// (`#[inline]` here; `#[tracing::instrument(skip_all)]` is the realistic one) is copied onto the
// generated `struct`, where it is an error.
use delivery::memory::MemoryBroker;
use delivery::{Consumer, HandlerError, Json, consumer};

#[consumer]
#[inline]
async fn record(Json(id): Json<String>) -> Result<(), HandlerError> {
    let _ = id;
    Ok(())
}

fn main() {
    let _run = Consumer::new(MemoryBroker::new().consume("q")).run(record);
}
