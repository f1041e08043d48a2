// Rule 5: `Bytes` reads the body the generated handler must read first, to verify it.
use axum::body::Bytes;
use delivery::{HandlerError, webhook};

#[webhook(scheme = shopify, secret = env("SHOPIFY_WEBHOOK_SECRET"))]
async fn orders_create(body: Bytes) -> Result<(), HandlerError> {
    let _ = body.len();
    Ok(())
}

fn main() {}
