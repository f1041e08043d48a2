// A secret closure returns secrets: a number is not one.
use delivery::{HandlerError, State, webhook};

#[derive(Clone)]
struct App {
    secret_version: u32,
}

#[webhook(scheme = github, secret = |app: &App| app.secret_version)]
async fn push(State(app): State<App>) -> Result<(), HandlerError> {
    let _ = app;
    Ok(())
}

fn main() {}
