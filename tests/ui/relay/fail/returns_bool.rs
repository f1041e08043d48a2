// Rule 6: `true` is not a receipt.
use delivery::{outbox::OutboxRecord, relay};

#[relay]
async fn announce(record: OutboxRecord<serde_json::Value>) -> bool {
    let _ = record;
    true
}

fn main() {}
