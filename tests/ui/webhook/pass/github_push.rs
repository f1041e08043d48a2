// Pass: a GitHub receiver with no state — the delivery id, the headers, the verified payload —
// tuned with `max_body`, on a router without state.
use axum::Router;
use axum::routing::post;
use delivery::{HandlerError, Headers, Json, UnitId, webhook};
use serde::Deserialize;

#[derive(Deserialize)]
struct Push {
    r#ref: String,
    after: String,
}

#[webhook(scheme = github, secret = env("GITHUB_WEBHOOK_SECRET"), max_body = 262_144)]
async fn push(
    delivery_id: UnitId,
    headers: Headers,
    Json(event): Json<Push>,
) -> Result<(), std::io::Error> {
    if headers.get_str("x-github-event") != Some("push") {
        return Ok(());
    }
    println!("{delivery_id}: {} is now {}", event.r#ref, event.after);
    Ok(())
}

fn main() {
    let _router: Router = Router::new().route("/webhooks/github", post(push));
    let _ = push::verifier(&());
    let _ = delivery::webhook::route(push, &());
}
