// Rule 3, the README's example: a handler that stamps each row with the time it was received.
use delivery::{HandlerError, Json, State, consumer};
use std::time::SystemTime;

#[derive(Clone)]
struct Db;
impl Db {
    async fn upsert_order(&self, _id: &str, _cents: u64, _at: SystemTime) -> std::io::Result<()> {
        Ok(())
    }
}

#[derive(serde::Deserialize)]
struct OrderPlaced {
    order_id: String,
    amount_cents: u64,
}

#[consumer]
async fn record_order(State(db): State<Db>, Json(order): Json<OrderPlaced>) -> Result<(), HandlerError> {
    let received_at = SystemTime::now();
    db.upsert_order(&order.order_id, order.amount_cents, received_at).await?;
    Ok(())
}

fn main() {}
