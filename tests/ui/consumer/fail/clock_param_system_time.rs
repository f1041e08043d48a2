// Rule 1 (clock parameter): `std::time::SystemTime` taken directly.
use delivery::{HandlerError, Json, consumer};
use std::time::SystemTime;

#[derive(serde::Deserialize)]
struct OrderPlaced {
    order_id: String,
}

#[consumer]
async fn record_order(
    Json(order): Json<OrderPlaced>,
    received_at: SystemTime,
) -> Result<(), HandlerError> {
    let _ = (order.order_id, received_at);
    Ok(())
}

fn main() {}
