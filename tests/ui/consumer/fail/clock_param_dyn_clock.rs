// Rule 1 (clock parameter), reach: any `Clock` trait object, here `Arc<dyn Clock>` in the state.
use delivery::{marker::Clock, HandlerError, Json, State, consumer};
use std::sync::Arc;

#[consumer]
async fn record(
    State(clock): State<Arc<dyn Clock + Send + Sync>>,
    Json(id): Json<String>,
) -> Result<(), HandlerError> {
    let _ = (clock, id);
    Ok(())
}

fn main() {}
