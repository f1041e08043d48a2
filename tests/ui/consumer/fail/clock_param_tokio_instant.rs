// Rule 1 (clock parameter): tokio's clock, `tokio::time::Instant`, in the state.
use delivery::{HandlerError, Json, State, consumer};

#[consumer]
async fn record(
    State(now): State<tokio::time::Instant>,
    Json(id): Json<String>,
) -> Result<(), HandlerError> {
    let _ = (now, id);
    Ok(())
}

fn main() {}
