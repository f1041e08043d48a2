// A secret taken from the state names the state's type when the handler takes none.
use delivery::{HandlerError, Json, webhook};

#[webhook(scheme = github, secret = |app| app.github_secret.clone())]
async fn push(Json(event): Json<serde_json::Value>) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {}
