// Pass: a handler with no parameters (a "ping" queue whose unit is its own message).
use delivery::memory::MemoryBroker;
use delivery::{Consumer, HandlerError, consumer};

#[consumer]
async fn ping() -> Result<(), HandlerError> {
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let broker = MemoryBroker::new();
    broker.publish("pings", delivery::Unit::new("p-1", "{}"));
    let report = Consumer::new(broker.consume("pings"))
        .shutdown_on(broker.idle("pings"))
        .run(ping)
        .await;
    assert_eq!(report.acked, 1);
}
