// Rule 6: `true` is not a receipt.
use delivery::{OutboxRecord, relay};

#[relay]
async fn announce(record: OutboxRecord<serde_json::Value>) -> bool {
    let _ = record;
    true
}

fn main() {}
