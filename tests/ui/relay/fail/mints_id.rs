// Rule 6: every attempt sends under the record's own id; minting one per attempt breaks dedup.
use delivery::testing::MemorySink;
use delivery::{HandlerError, outbox::OutboxRecord, Receipt, State, relay};

#[relay]
async fn announce(
    record: OutboxRecord<serde_json::Value>,
    State(sink): State<MemorySink>,
) -> Result<Receipt, HandlerError> {
    let message_id = uuid::Uuid::new_v4();
    let _ = message_id;
    sink.send(&record).await
}

fn main() {}
