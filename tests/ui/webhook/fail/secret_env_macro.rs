// `env!` would read the secret at compile time and put it in the binary.
use delivery::{HandlerError, Json, webhook};

#[webhook(scheme = github, secret = env!("GITHUB_WEBHOOK_SECRET"))]
async fn push(Json(event): Json<serde_json::Value>) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {}
