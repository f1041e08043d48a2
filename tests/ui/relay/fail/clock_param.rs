// A clock is never a parameter of a relay function either.
use delivery::testing::MemorySink;
use delivery::{HandlerError, outbox::OutboxRecord, Receipt, State, relay};

#[relay]
async fn announce(
    record: OutboxRecord<serde_json::Value>,
    now: std::time::Instant,
    State(sink): State<MemorySink>,
) -> Result<Receipt, HandlerError> {
    let _ = now;
    sink.send(&record).await
}

fn main() {}
