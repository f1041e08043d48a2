// The handler's state must be reachable from the router's: here it is not.
use delivery::{HandlerError, State, webhook};

#[derive(Clone)]
struct App;

#[derive(Clone)]
struct Other;

#[webhook(scheme = github, secret = env("GITHUB_WEBHOOK_SECRET"))]
async fn push(State(app): State<App>) -> Result<(), HandlerError> {
    let _ = app;
    Ok(())
}

fn main() {
    let _ = delivery::webhook::route(push, &Other);
}
