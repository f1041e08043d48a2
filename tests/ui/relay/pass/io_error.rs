// `?` on an ordinary error before the send: a retry.
use delivery::testing::MemorySink;
use delivery::{HandlerError, outbox::OutboxRecord, Receipt, State, relay};

#[derive(serde::Deserialize)]
struct Invoice {
    customer: String,
}

#[relay]
async fn forward(record: OutboxRecord<Invoice>, State(sink): State<MemorySink>) -> Result<Receipt, HandlerError> {
    let customer: u64 = record.customer.parse()?;
    if customer == 0 {
        return Err(HandlerError::reject("customer 0 does not exist"));
    }
    sink.send(&record).await
}

fn main() {
    let _ = forward;
}
