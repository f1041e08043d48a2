use delivery::{consumer, Json};

#[consumer]
async fn handle(Json(n): Json<u64>) {
    let _ = n;
}

fn main() {}
