// Rule 5: axum's `Json`, imported under its own name, parses the body before it is verified. The
// tokens cannot tell it from `delivery::Json`; its type does.
use axum::Json;
use delivery::{HandlerError, webhook};

#[derive(serde::Deserialize)]
struct Event {
    id: String,
}

#[webhook(scheme = stripe, secret = env("STRIPE_WEBHOOK_SECRET"))]
async fn stripe_events(Json(event): Json<Event>) -> Result<(), HandlerError> {
    let _ = event.id;
    Ok(())
}

fn main() {}
