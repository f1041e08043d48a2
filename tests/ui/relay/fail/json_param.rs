// A relay function takes the outbox record, not a consumer's `Json<T>`.
use delivery::testing::MemorySink;
use delivery::{HandlerError, Json, Receipt, State, relay};

#[relay]
async fn announce(Json(order): Json<serde_json::Value>, State(sink): State<MemorySink>) -> Result<Receipt, HandlerError> {
    let _ = order;
    Err(HandlerError::reject("unreachable"))
}

fn main() {}
