// Rule 4 (body mints an id): `Uuid::now_v7()` reads the clock and randomness (the real uuid crate).
use delivery::{HandlerError, Json, consumer};

#[consumer]
async fn record(Json(name): Json<String>) -> Result<(), HandlerError> {
    let customer_id = uuid::Uuid::now_v7();
    let _ = (customer_id, name);
    Ok(())
}

fn main() {}
