// Rule 1 (clock parameter), reach: a type alias to `Arc<Instant>` inside `State`. The tokens show
// no clock; the type-level check sees through the alias.
use delivery::{HandlerError, State, consumer};
use std::sync::Arc;

type Now = Arc<std::time::Instant>;

#[consumer]
async fn handle(State(now): State<Now>) -> Result<(), HandlerError> {
    let _ = now;
    Ok(())
}

fn main() {}
