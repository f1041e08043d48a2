// A webhook request is one unit: `Batch<T>` is for a #[consumer].
use delivery::{Batch, HandlerError, Json, webhook};

#[webhook(scheme = standard_webhooks, secret = env("WEBHOOK_SECRET"))]
async fn events(batch: Batch<Json<u32>>) -> Result<(), HandlerError> {
    let _ = batch;
    Ok(())
}

fn main() {}
