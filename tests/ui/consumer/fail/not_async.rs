// The attribute goes on an `async fn`: a plain `fn` is refused on its `fn` token.
use delivery::{HandlerError, Json, consumer};

#[consumer]
fn record(Json(id): Json<String>) -> Result<(), HandlerError> {
    let _ = id;
    Ok(())
}

fn main() {}
