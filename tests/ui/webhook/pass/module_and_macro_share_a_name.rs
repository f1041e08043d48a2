// Pass: `delivery::webhook` is both the module (verifier, errors, `route`) and the attribute; each
// resolves where it is used.
use delivery::HandlerError;
use delivery::webhook::{Scheme, Verifier, WebhookConfigError};

#[delivery::webhook(scheme = github, secret = env("GITHUB_WEBHOOK_SECRET"))]
async fn ping() -> Result<(), HandlerError> {
    Ok(())
}

fn main() {
    let verifier = Verifier::new(Scheme::GitHub, "secret");
    assert!(verifier.check().is_ok());
    let built: Result<Verifier, WebhookConfigError> = ping::verifier(&());
    let _ = built;
    let _ = delivery::webhook::route(ping, &());
}
