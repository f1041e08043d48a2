use delivery::{consumer, Json};

type Done = Option<()>;

#[consumer]
async fn handle(Json(n): Json<u64>) -> Done {
    let _ = n;
    Some(())
}

fn main() {}
