// A batch is written in one transaction of the handler's own: its units cannot each take theirs.
use std::time::Duration;

use delivery::queue::PgTx;
use delivery::{Batch, Consumer, HandlerError, Json, consumer};

#[consumer]
async fn apply(orders: Batch<(Json<u32>, PgTx)>) -> Result<(), HandlerError> {
    let _ = orders;
    Ok(())
}

async fn run() {
    let broker = delivery::memory::MemoryBroker::new();
    Consumer::new(broker.consume("orders"))
        .batch(100, Duration::from_millis(20))
        .run(apply)
        .await;
}

#[tokio::main]
async fn main() {
    run().await;
}
