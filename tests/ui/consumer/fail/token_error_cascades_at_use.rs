// A refused handler gets one error, the rule's: the place that runs it raises no second,
// misleading "not a consumer handler" error.
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
