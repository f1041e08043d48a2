// PENDING (confusing message). Should FAIL with ONE error, the rule's. When a token-level check
// refuses the handler, the expansion keeps the plain `async fn` and drops the handler struct, so
// every place that runs the handler gets a second, misleading error:
//   error[E0277]: `fn(Json<String>) -> impl Future<..> {record}` is not a consumer handler for
//   state `()` ... note: annotate an `async fn` with `#[delivery::consumer]`
// although it is annotated. Could also emit, on the error path, the unit struct with a `Handler`
// impl for any state whose body is `unreachable!()` (as serde_derive emits a dummy impl).
use delivery::memory::MemoryBroker;
use delivery::{Consumer, HandlerError, Json, consumer};
use std::time::SystemTime;

#[consumer]
async fn record(Json(id): Json<String>) -> Result<(), HandlerError> {
    let received_at = SystemTime::now();
    let _ = (id, received_at);
    Ok(())
}

fn main() {
    let _run = Consumer::new(MemoryBroker::new().consume("q")).run(record);
}
