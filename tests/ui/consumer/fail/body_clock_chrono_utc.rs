// Rule 4 (body reads the clock): chrono's `Utc::now()` (a local stand-in with the same path).
use delivery::{HandlerError, Json, consumer};

mod chrono {
    pub struct Utc;
    impl Utc {
        pub fn now() -> i64 {
            0
        }
    }
}

#[consumer]
async fn record(Json(id): Json<String>) -> Result<(), HandlerError> {
    let created_at = chrono::Utc::now();
    let _ = (id, created_at);
    Ok(())
}

fn main() {}
