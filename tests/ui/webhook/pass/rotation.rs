// Pass: several secrets accepted at once while one is rotated — a list of sources, and a state
// closure returning a list or an optional one.
use axum::Router;
use axum::routing::post;
use delivery::webhook::Secret;
use delivery::{HandlerError, State, UnitId, webhook};

#[derive(Clone)]
struct App {
    current: String,
    previous: Option<String>,
    all: Vec<Secret>,
}

#[webhook(scheme = slack, secret = [env("SLACK_SIGNING_SECRET"), env("SLACK_SIGNING_SECRET_PREVIOUS")])]
async fn slack_from_env(id: UnitId) -> Result<(), HandlerError> {
    let _ = id;
    Ok(())
}

#[webhook(
    scheme = github,
    secret = [|app: &App| app.current.clone(), |app: &App| app.previous.clone()]
)]
async fn github_from_state(State(app): State<App>) -> Result<(), HandlerError> {
    let _ = app;
    Ok(())
}

#[webhook(scheme = shopify, secret = |app: &App| app.all.clone())]
async fn shopify_list(State(app): State<App>) -> Result<(), HandlerError> {
    let _ = app;
    Ok(())
}

fn main() {
    let app = App {
        current: "new".into(),
        previous: Some("old".into()),
        all: vec![Secret::from("a"), Secret::from("b")],
    };
    let _router: Router = Router::new()
        .route("/slack", post(slack_from_env))
        .route(
            "/github",
            delivery::webhook::route(github_from_state, &app).unwrap(),
        )
        .route(
            "/shopify",
            delivery::webhook::route(shopify_list, &app).unwrap(),
        )
        .with_state(app);
}
