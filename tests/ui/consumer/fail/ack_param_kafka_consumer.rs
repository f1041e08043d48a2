// Rule 1 (acknowledgement handle parameter): rdkafka's consumer commits offsets, and an offset
// confirms every unit before it.
use delivery::kafka::client::consumer::StreamConsumer;
use delivery::{HandlerError, Json, State, consumer};
use std::sync::Arc;

#[consumer]
async fn record(
    Json(id): Json<String>,
    State(kafka): State<Arc<StreamConsumer>>,
) -> Result<(), HandlerError> {
    let _ = (id, kafka);
    Ok(())
}

fn main() {}
