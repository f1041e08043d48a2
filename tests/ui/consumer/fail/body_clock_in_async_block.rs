// Rule 4 (body reads the clock), reach: inside an `async` block awaited by the handler.
use delivery::{HandlerError, Json, consumer};
use std::time::SystemTime;

#[consumer]
async fn record(Json(id): Json<String>) -> Result<(), HandlerError> {
    let write = async move {
        let at = SystemTime::now();
        (id, at)
    };
    let _ = write.await;
    Ok(())
}

fn main() {}
