// Batch handlers: an item of several extractors, a per-unit outcome, any state, and an error
// through `?` (a retry of the batch, halved down to the unit that fails).
use std::time::Duration;

use delivery::{Batch, BatchOutcome, Consumer, HandlerError, Json, Stamp, State, consumer};

#[derive(serde::Deserialize)]
struct Order {
    order_id: String,
    amount_cents: i64,
}

#[derive(Clone, Default)]
struct Db;

#[consumer]
async fn apply_orders(
    orders: Batch<(Json<Order>, Stamp)>,
    State(db): State<Db>,
) -> Result<BatchOutcome, HandlerError> {
    let _ = db;
    let mut outcome = BatchOutcome::applied();
    for order in &orders {
        let (Json(placed), stamp) = order.value();
        if placed.amount_cents < 0 {
            outcome.fail(order.id(), HandlerError::reject("a negative amount"));
        }
        let _ = (&placed.order_id, stamp, order.delivery_count());
    }
    Ok(outcome)
}

#[consumer]
async fn count_any_state(events: Batch<Json<u32>>) -> Result<(), std::io::Error> {
    let total: u32 = events.iter().map(|e| **e).sum();
    let _ = total;
    Ok(())
}

#[consumer]
async fn outcome_only(events: Batch<Json<u32>>) -> BatchOutcome {
    let _ = events.len();
    BatchOutcome::applied()
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let broker = delivery::memory::MemoryBroker::new();
    broker.publish(
        "orders",
        delivery::Unit::new("m-1", r#"{"order_id":"o-1","amount_cents":5}"#)
            .with_stamp(Stamp(1)),
    );
    let report = Consumer::new(broker.consume("orders"))
        .state(Db)
        .shutdown_on(broker.idle("orders"))
        .batch(100, Duration::from_millis(5))
        .run(apply_orders)
        .await;
    assert_eq!(report.acked, 1);
    broker.publish("numbers", delivery::Unit::new("n-1", "7"));
    let report = Consumer::new(broker.consume("numbers"))
        .shutdown_on(broker.idle("numbers"))
        .batch(10, Duration::from_millis(5))
        .run(count_any_state)
        .await;
    assert_eq!(report.acked, 1);
    let _ = outcome_only;
}
