// A batch handler runs with `.batch(max_size, max_wait).run(..)`, not `.run(..)`.
use delivery::{Batch, Consumer, HandlerError, Json, consumer};

#[consumer]
async fn apply(orders: Batch<Json<u32>>) -> Result<(), HandlerError> {
    let _ = orders;
    Ok(())
}

async fn run() {
    let broker = delivery::memory::MemoryBroker::new();
    Consumer::new(broker.consume("orders")).run(apply).await;
}

fn main() {
    let _ = run;
}
