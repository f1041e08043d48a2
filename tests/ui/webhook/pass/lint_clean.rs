// Pass: the expansion is lint-clean — no warning, no `unused_qualifications`, no missing docs or
// Debug — under strict crate-level lints.
#![deny(warnings, unused_qualifications)]
#![deny(
    rust_2018_idioms,
    missing_docs,
    missing_debug_implementations,
    unreachable_pub
)]
#![deny(
    unused_results,
    unused_lifetimes,
    trivial_casts,
    trivial_numeric_casts,
    unsafe_code
)]
//! A lint-clean webhook receiver.

use axum::Router;
use axum::routing::post;
use delivery::{HandlerError, Json, State, UnitId, webhook};
use std::sync::{Arc, Mutex};

/// The event.
#[derive(Debug, serde::Deserialize)]
pub struct Event {
    r#type: String,
}

/// Shared state.
#[derive(Clone, Debug, Default)]
pub struct App {
    secret: String,
    seen: Arc<Mutex<Vec<String>>>,
}

/// Records an event, keyed by the delivery's id.
#[webhook(scheme = standard_webhooks, secret = |app: &App| app.secret.clone())]
pub async fn record(
    State(app): State<App>,
    id: UnitId,
    Json(event): Json<Event>,
) -> Result<(), HandlerError> {
    let mut seen = app
        .seen
        .lock()
        .map_err(|_| HandlerError::retry("state poisoned"))?;
    if !seen.contains(&id.to_string()) {
        seen.push(format!("{id}:{}", event.r#type));
    }
    Ok(())
}

/// From the environment, without state.
#[webhook(scheme = github, secret = env("GITHUB_WEBHOOK_SECRET"))]
pub async fn ping(id: UnitId) -> Result<(), HandlerError> {
    let _ = id;
    Ok(())
}

fn main() {
    let app = App {
        secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into(),
        seen: Arc::default(),
    };
    let router: Router = Router::new()
        .route("/record", post(record))
        .route("/ping", post(ping))
        .with_state(app);
    drop(router);
}
