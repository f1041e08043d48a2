// Rule 2 (minter parameter), reach: a user type declared a minter with `impl delivery::marker::Minter`,
// taken through `State`.
use delivery::{HandlerError, Json, State, consumer};

#[derive(Clone, Default)]
struct OrderNumbers;

impl delivery::marker::Minter for OrderNumbers {}

#[consumer]
async fn record(
    State(numbers): State<OrderNumbers>,
    Json(id): Json<String>,
) -> Result<(), HandlerError> {
    let _ = (numbers, id);
    Ok(())
}

fn main() {}
