// The scheme is written in snake_case; the error says which one was meant.
use delivery::{HandlerError, Json, webhook};

#[webhook(scheme = StandardWebhooks, secret = env("WEBHOOK_SECRET"))]
async fn events(Json(event): Json<serde_json::Value>) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {}
