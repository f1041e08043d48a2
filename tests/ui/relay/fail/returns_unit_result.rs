// Rule 6: a relay function that does not return the sink's receipt proves nothing.
use delivery::{HandlerError, outbox::OutboxRecord, relay};

#[derive(serde::Deserialize)]
struct OrderPlaced {
    order_id: String,
}

#[relay]
async fn announce(record: OutboxRecord<OrderPlaced>) -> Result<(), HandlerError> {
    let _ = &record.order_id;
    Ok(())
}

fn main() {}
