// All errors of one handler are reported together, each on its tokens: a clock read, an id mint
// and a return type that cannot fail.
use delivery::{Json, consumer};
use std::time::SystemTime;
use uuid::Uuid;

#[consumer]
async fn record(Json(name): Json<String>) {
    let created_at = SystemTime::now();
    let customer_id = Uuid::new_v4();
    let _ = (name, created_at, customer_id);
}

fn main() {}
