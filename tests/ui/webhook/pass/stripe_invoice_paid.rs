// Pass: a realistic Stripe receiver — the secret from the environment, the app's state, the event's
// id as the unit's id, the payload decoded only once verified — routed with the startup check and
// with plain `post`.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::routing::post;
use delivery::{HandlerError, Json, State, UnitId, webhook};
use serde::Deserialize;

#[derive(Clone, Default)]
struct App {
    paid: Arc<Mutex<HashMap<String, u64>>>,
}

#[derive(Deserialize)]
struct Event {
    r#type: String,
    data: EventData,
}

#[derive(Deserialize)]
struct EventData {
    object: Invoice,
}

#[derive(Deserialize)]
struct Invoice {
    id: String,
    amount_paid: u64,
}

#[webhook(scheme = stripe, secret = env("STRIPE_WEBHOOK_SECRET"))]
async fn stripe_events(
    State(app): State<App>,
    event_id: UnitId,
    Json(event): Json<Event>,
) -> Result<(), HandlerError> {
    match event.r#type.as_str() {
        "invoice.paid" => {
            let invoice = event.data.object;
            if invoice.amount_paid == 0 {
                return Err(HandlerError::reject(format!(
                    "{event_id}: nothing was paid"
                )));
            }
            let mut paid = app
                .paid
                .lock()
                .map_err(|_| HandlerError::retry("poisoned"))?;
            paid.entry(invoice.id).or_insert(invoice.amount_paid);
            Ok(())
        }
        _ => Ok(()),
    }
}

fn main() {
    let app = App::default();
    // Fails now when STRIPE_WEBHOOK_SECRET is not set, naming it.
    if let Ok(route) = delivery::webhook::route(stripe_events, &app) {
        let _router: Router = Router::new()
            .route("/webhooks/stripe", route)
            .with_state(app.clone());
    }
    let _router: Router = Router::new()
        .route("/webhooks/stripe", post(stripe_events))
        .with_state(app);
}
