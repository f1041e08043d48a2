// Rule 6 (and 3): a relay attempt must send what was written, not stamp it with its own time.
use delivery::testing::MemorySink;
use delivery::{HandlerError, outbox::OutboxRecord, Receipt, State, relay};

#[relay]
async fn announce(
    record: OutboxRecord<serde_json::Value>,
    State(sink): State<MemorySink>,
) -> Result<Receipt, HandlerError> {
    let sent_at = std::time::SystemTime::now();
    let _ = sent_at;
    sink.send(&record).await
}

fn main() {}
