// Rule 5: `String` reads the body the generated handler must read first, to verify it.
use delivery::{HandlerError, webhook};

#[webhook(scheme = github, secret = env("GITHUB_WEBHOOK_SECRET"))]
async fn push(body: String) -> Result<(), HandlerError> {
    let _ = body.len();
    Ok(())
}

fn main() {}
