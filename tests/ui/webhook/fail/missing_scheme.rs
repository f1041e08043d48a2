// A webhook without a scheme does not know how the provider signs.
use delivery::{HandlerError, Json, webhook};

#[webhook(secret = env("WEBHOOK_SECRET"))]
async fn events(Json(event): Json<serde_json::Value>) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {}
