// A parameter must be an extractor, with a concrete state (`State<App>`): a bare `u64` is refused
// on its type, for that state.
use delivery::{HandlerError, State, consumer};

#[derive(Clone, Default)]
struct App;

#[consumer]
async fn record(State(app): State<App>, amount_cents: u64) -> Result<(), HandlerError> {
    let _ = (app, amount_cents);
    Ok(())
}

fn main() {}
