// Rule 5: the whole `Request` carries the body, unverified.
use axum::extract::Request;
use delivery::{HandlerError, webhook};

#[webhook(scheme = standard_webhooks, secret = env("WEBHOOK_SECRET"))]
async fn events(request: Request) -> Result<(), HandlerError> {
    let _ = request.uri();
    Ok(())
}

fn main() {}
