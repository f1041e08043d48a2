// Rule 5: axum's `Form` parses the body before it is verified (Slack sends forms).
use axum::Form;
use delivery::{HandlerError, webhook};

#[derive(serde::Deserialize)]
struct SlashCommand {
    command: String,
}

#[webhook(scheme = slack, secret = env("SLACK_SIGNING_SECRET"))]
async fn command(Form(cmd): Form<SlashCommand>) -> Result<(), HandlerError> {
    let _ = cmd.command;
    Ok(())
}

fn main() {}
