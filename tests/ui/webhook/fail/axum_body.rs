// Rule 5: `axum::body::Body` is the unread, unverified body.
use delivery::{HandlerError, webhook};

#[webhook(scheme = standard_webhooks, secret = env("WEBHOOK_SECRET"))]
async fn events(body: axum::body::Body) -> Result<(), HandlerError> {
    let _ = body;
    Ok(())
}

fn main() {}
