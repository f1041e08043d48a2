// Attribute arguments: a key given twice is refused on the second one.
use delivery::{HandlerError, Json, consumer};

#[consumer(allow_clock = "latency metric only", allow_clock = "and the log line")]
async fn record(Json(id): Json<String>) -> Result<(), HandlerError> {
    let _ = id;
    Ok(())
}

fn main() {}
