// Rule 4 (body reads the clock): `SystemTime::now()` stored with the record.
use delivery::{HandlerError, Json, State, consumer};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

#[derive(serde::Deserialize)]
struct OrderPlaced {
    order_id: String,
}

#[derive(Clone, Default)]
struct App {
    orders: Arc<Mutex<Vec<(String, SystemTime)>>>,
}

#[consumer]
async fn record_order(
    State(app): State<App>,
    Json(order): Json<OrderPlaced>,
) -> Result<(), HandlerError> {
    let received_at = SystemTime::now();
    app.orders
        .lock()
        .unwrap()
        .push((order.order_id, received_at));
    Ok(())
}

fn main() {}
