// Rule 5 (a return type that cannot carry a failure): a bare `bool` ("applied or not").
use delivery::{Json, consumer};

#[derive(serde::Deserialize)]
struct OrderPlaced {
    order_id: String,
}

#[consumer]
async fn record_order(Json(order): Json<OrderPlaced>) -> bool {
    !order.order_id.is_empty()
}

fn main() {}
