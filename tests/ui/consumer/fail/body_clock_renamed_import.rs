// Rule 3: a clock read through a type renamed by a `use` inside the body. (A rename at module
// level is out of a token scan's sight; it is a documented limit of `#[consumer]`.)
use delivery::{HandlerError, Json, consumer};

#[consumer]
async fn record(Json(id): Json<String>) -> Result<(), HandlerError> {
    use std::time::SystemTime as Wall;
    let received_at = Wall::now();
    let _ = (id, received_at);
    Ok(())
}

fn main() {}
