// A function-only attribute on the handler (`#[inline]`; `#[tracing::instrument]` in practice)
// goes on `handle`, not on the generated struct.
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
