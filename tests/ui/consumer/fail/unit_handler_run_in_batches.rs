// A handler of one unit at a time is not a batch handler.
use delivery::{Consumer, HandlerError, Json, consumer};
use std::time::Duration;

#[consumer]
async fn apply(Json(order): Json<u32>) -> Result<(), HandlerError> {
    let _ = order;
    Ok(())
}

async fn run() {
    let broker = delivery::memory::MemoryBroker::new();
    Consumer::new(broker.consume("orders"))
        .batch(100, Duration::from_millis(20))
        .run(apply)
        .await;
}

fn main() {
    let _ = run;
}
