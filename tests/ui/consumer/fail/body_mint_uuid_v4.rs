// Rule 4 (body mints an id): `Uuid::new_v4()` (the real uuid crate).
use delivery::{HandlerError, Json, consumer};
use uuid::Uuid;

#[consumer]
async fn record(Json(name): Json<String>) -> Result<(), HandlerError> {
    let customer_id = Uuid::new_v4();
    let _ = (customer_id, name);
    Ok(())
}

fn main() {}
