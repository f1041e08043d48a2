use delivery::{consumer, HandlerError, State};
use std::sync::Arc;

type Now = Arc<std::time::Instant>;

#[consumer]
async fn handle(State(now): State<Now>) -> Result<(), HandlerError> {
    let _ = now;
    Ok(())
}

fn main() {}
