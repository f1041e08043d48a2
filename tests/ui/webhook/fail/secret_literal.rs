// A secret written in the source is refused, and the error never repeats it.
use delivery::{HandlerError, Json, webhook};

#[webhook(
    scheme = stripe,
    secret
        = "whsec_do_not_commit_me"
)]
async fn stripe_events(Json(event): Json<serde_json::Value>) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {}
