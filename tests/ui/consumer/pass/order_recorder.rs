// Pass: the canonical handler — `State<App>` + `Json<T>`, keyed by the order's own id so a
// redelivery changes nothing. Runs it on the in-memory broker, and calls `handle` directly.
use delivery::memory::MemoryBroker;
use delivery::{Consumer, HandlerError, Json, State, Unit, consumer};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

#[derive(serde::Deserialize)]
struct OrderPlaced {
    order_id: String,
    amount_cents: u64,
}

#[derive(Clone, Default)]
struct App {
    totals: Arc<Mutex<HashMap<String, u64>>>,
}

#[consumer]
async fn record_order(
    State(app): State<App>,
    Json(order): Json<OrderPlaced>,
) -> Result<(), HandlerError> {
    app.totals
        .lock()
        .unwrap()
        .insert(order.order_id, order.amount_cents);
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let broker = MemoryBroker::new();
    let payload = r#"{"order_id":"o-1","amount_cents":1250}"#;
    broker.publish("orders", Unit::new("m-1", payload));
    broker.publish("orders", Unit::new("m-1", payload));
    let app = App::default();
    let report = Consumer::new(broker.consume("orders"))
        .state(app.clone())
        .shutdown_on(broker.idle("orders"))
        .run(record_order)
        .await;
    assert_eq!(report.acked, 2);
    assert_eq!(app.totals.lock().unwrap()["o-1"], 1250);

    let order = OrderPlaced {
        order_id: "o-2".into(),
        amount_cents: 5,
    };
    record_order::handle(State(app.clone()), Json(order))
        .await
        .unwrap();
    assert_eq!(app.totals.lock().unwrap().len(), 2);
}
