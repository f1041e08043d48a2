// The record's id is a parameter, and an id derived from it deterministically (UUIDv5) is allowed;
// the sink's own error (`HandlerError`, retry or reject as the receiver answered) passes through.
use delivery::testing::MemorySink;
use delivery::{HandlerError, outbox::OutboxRecord, Receipt, outbox::RecordId, State, relay};

#[derive(Clone)]
struct App {
    sink: MemorySink,
}

const NAMESPACE: uuid::Uuid = uuid::Uuid::from_u128(0x6ba7b810_9dad_11d1_80b4_00c04fd430c8);

#[relay]
async fn announce(
    id: RecordId,
    record: OutboxRecord<serde_json::Value>,
    State(app): State<App>,
) -> Result<Receipt, HandlerError> {
    let derived = uuid::Uuid::new_v5(&NAMESPACE, id.as_str().as_bytes());
    if derived.is_nil() {
        return Err(HandlerError::reject("a v5 uuid is never nil"));
    }
    app.sink.send(&record).await
}

fn main() {
    let _ = announce;
}
