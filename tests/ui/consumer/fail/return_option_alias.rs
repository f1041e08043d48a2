// Rule 5 (a return type that cannot carry a failure), reach: `Option<()>` behind a type alias,
// caught at the type level.
use delivery::{Json, consumer};

type Done = Option<()>;

#[consumer]
async fn handle(Json(n): Json<u64>) -> Done {
    let _ = n;
    Some(())
}

fn main() {}
