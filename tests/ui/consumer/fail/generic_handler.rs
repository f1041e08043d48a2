// A handler cannot be generic: it must name the concrete types it takes.
use delivery::{HandlerError, Json, consumer};
use serde::de::DeserializeOwned;

#[consumer]
async fn record<T: DeserializeOwned + Send>(Json(value): Json<T>) -> Result<(), HandlerError> {
    drop(value);
    Ok(())
}

fn main() {}
