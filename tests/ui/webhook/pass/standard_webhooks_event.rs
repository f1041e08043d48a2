// Pass: a Standard Webhooks receiver whose secret is in the state, with a shorter timestamp
// tolerance, an anyhow error, and the unit's headers.
use axum::Router;
use delivery::{Headers, Json, State, UnitId, webhook};
use serde::Deserialize;

#[derive(Clone)]
struct App {
    webhook_secret: String,
    orders: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

#[derive(Deserialize)]
struct Event {
    r#type: String,
    data: serde_json::Value,
}

#[webhook(
    scheme = standard_webhooks,
    secret = |app: &App| app.webhook_secret.clone(),
    tolerance_secs = 120,
)]
async fn order_events(
    State(app): State<App>,
    webhook_id: UnitId,
    headers: Headers,
    Json(event): Json<Event>,
) -> anyhow::Result<()> {
    let order = event
        .data
        .get("order_id")
        .and_then(|v| v.as_str())
        .unwrap_or_default();
    anyhow::ensure!(!order.is_empty(), "no order id in {webhook_id}");
    let _attempt = headers.get_str("webhook-timestamp");
    app.orders
        .lock()
        .unwrap()
        .push(format!("{}:{order}", event.r#type));
    Ok(())
}

fn main() -> Result<(), delivery::webhook::WebhookConfigError> {
    let app = App {
        webhook_secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into(),
        orders: Default::default(),
    };
    let _router: Router = Router::new()
        .route("/webhooks", delivery::webhook::route(order_events, &app)?)
        .with_state(app);
    Ok(())
}
