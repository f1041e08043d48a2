// Rule 6: no return value at all.
use delivery::{outbox::OutboxRecord, relay};

#[relay]
async fn announce(record: OutboxRecord<serde_json::Value>) {
    let _ = record;
}

fn main() {}
