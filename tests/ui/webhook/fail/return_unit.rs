// #[consumer]'s checks apply: a handler that cannot fail would answer 2xx to a failure (rule 1).
use delivery::{Json, webhook};

#[webhook(scheme = github, secret = env("GITHUB_WEBHOOK_SECRET"))]
async fn push(Json(event): Json<serde_json::Value>) {
    let _ = event;
}

fn main() {}
