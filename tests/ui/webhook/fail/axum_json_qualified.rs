// Rule 5: `axum::Json` parses the body before it is verified.
use delivery::{HandlerError, webhook};

#[derive(serde::Deserialize)]
struct Event {
    id: String,
}

#[webhook(scheme = github, secret = env("GITHUB_WEBHOOK_SECRET"))]
async fn push(axum::Json(event): axum::Json<Event>) -> Result<(), HandlerError> {
    let _ = event.id;
    Ok(())
}

fn main() {}
