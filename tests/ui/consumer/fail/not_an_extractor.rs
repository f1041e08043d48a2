// A parameter must be an extractor: a bare `String` is not resolved from the unit or the state.
use delivery::{HandlerError, UnitId, consumer};

#[consumer]
async fn record(id: UnitId, customer: String) -> Result<(), HandlerError> {
    let _ = (id, customer);
    Ok(())
}

fn main() {}
