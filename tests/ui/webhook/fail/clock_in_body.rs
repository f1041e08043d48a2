// #[consumer]'s checks apply: a webhook handler that stores the time of receipt writes a
// different value on every delivery (rule 3).
use delivery::{HandlerError, Json, State, UnitId, webhook};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

#[derive(Clone, Default)]
struct App {
    received: Arc<Mutex<Vec<(String, SystemTime)>>>,
}

#[webhook(scheme = stripe, secret = env("STRIPE_WEBHOOK_SECRET"))]
async fn stripe_events(
    State(app): State<App>,
    id: UnitId,
    Json(event): Json<serde_json::Value>,
) -> Result<(), HandlerError> {
    let _ = event;
    app.received
        .lock()
        .unwrap()
        .push((id.to_string(), SystemTime::now()));
    Ok(())
}

fn main() {}
