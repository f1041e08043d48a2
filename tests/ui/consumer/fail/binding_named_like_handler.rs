// A parameter binding named like the handler would match the unit struct the attribute generates
// under that name: refused with an explanation instead of rustc's type mismatch.
use delivery::{HandlerError, Json, consumer};

#[derive(serde::Deserialize)]
struct Push {
    after: String,
}

#[consumer]
async fn push(Json(push): Json<Push>) -> Result<(), HandlerError> {
    let _ = push.after;
    Ok(())
}

fn main() {}
