// Attribute arguments: an unknown key is refused with the list of known ones (redelivery is the
// consumer's setting, not the handler's).
use delivery::{HandlerError, Json, consumer};

#[consumer(retries = 3)]
async fn record(Json(id): Json<String>) -> Result<(), HandlerError> {
    let _ = id;
    Ok(())
}

fn main() {}
