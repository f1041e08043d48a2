// The shape every relay function has: the record in, the sink's receipt out.
use delivery::testing::MemorySink;
use delivery::outbox::{FromRecord, Record, Relay};
use delivery::{HandlerError, outbox::OutboxRecord, Receipt, State, relay};

#[derive(serde::Deserialize)]
struct OrderPlaced {
    order_id: String,
}

#[relay]
async fn announce(
    record: OutboxRecord<OrderPlaced>,
    State(sink): State<MemorySink>,
) -> Result<Receipt, HandlerError> {
    let _ = &record.order_id;
    sink.send(&record).await
}

fn assert_relay<R: Relay<S>, S>(_: R) {}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    assert_relay::<_, MemorySink>(announce);
    let sink = MemorySink::new();
    let stored = Record::new("order-1", "orders.events", None, r#"{"order_id":"o-1"}"#, 0);
    let record = OutboxRecord::<OrderPlaced>::from_record(&stored, &()).unwrap();
    let receipt = announce::handle(record, State(sink.clone())).await.unwrap();
    assert_eq!(receipt.record().as_str(), "order-1");
    assert_eq!(sink.accepted().len(), 1);
}
