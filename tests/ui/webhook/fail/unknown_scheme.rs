// An unknown scheme is refused on its token, listing the valid ones.
use delivery::{HandlerError, Json, webhook};

#[webhook(scheme = paypal, secret = env("PAYPAL_WEBHOOK_SECRET"))]
async fn events(Json(event): Json<serde_json::Value>) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {}
