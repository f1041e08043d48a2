// Rule 2 (minter parameter), reach: a type alias to `Arc` of a user-marked minter, in `State`.
use delivery::{HandlerError, Json, State, consumer};
use std::sync::Arc;

struct OrderNumbers;

impl delivery::marker::Minter for OrderNumbers {}

type Numbers = Arc<OrderNumbers>;

#[consumer]
async fn record(
    State(numbers): State<Numbers>,
    Json(id): Json<String>,
) -> Result<(), HandlerError> {
    let _ = (numbers, id);
    Ok(())
}

fn main() {}
