// Rule 5 (a return type that cannot carry a failure): no return type at all.
use delivery::{Json, consumer};

#[derive(serde::Deserialize)]
struct OrderPlaced {
    order_id: String,
}

#[consumer]
async fn record_order(Json(order): Json<OrderPlaced>) {
    let _ = order.order_id;
}

fn main() {}
