// A webhook without a secret cannot verify anything.
use delivery::{HandlerError, Json, webhook};

#[webhook(scheme = stripe)]
async fn stripe_events(Json(event): Json<serde_json::Value>) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {}
