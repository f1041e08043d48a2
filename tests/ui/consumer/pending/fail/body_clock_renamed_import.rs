// PENDING (miss). Should FAIL: the clock read through a renamed import, `use SystemTime as Wall;
// Wall::now()`. The body scan matches `Type::fn` pairs by name only. (Also missed: a `use
// chrono::Utc as Tz;` then `Tz::now()`.) Possible fix: also refuse `use` renames of the clock and
// minter types, or scan the module for `use .. as` of them — or at least document the limit.
use delivery::{HandlerError, Json, consumer};
use std::time::SystemTime as Wall;

#[consumer]
async fn record(Json(id): Json<String>) -> Result<(), HandlerError> {
    let received_at = Wall::now();
    let _ = (id, received_at);
    Ok(())
}

fn main() {}
