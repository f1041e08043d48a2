// An unknown argument is refused on its key, listing the valid ones.
use delivery::{HandlerError, webhook};

#[webhook(scheme = github, secret = env("GITHUB_WEBHOOK_SECRET"), path = "/hooks")]
async fn push() -> Result<(), HandlerError> {
    Ok(())
}

fn main() {}
