// Rule 4 (body reads the clock): jiff's `Timestamp::now()` (local stand-in).
use delivery::{HandlerError, Json, consumer};

mod jiff {
    pub struct Timestamp;
    impl Timestamp {
        pub fn now() -> Self {
            Timestamp
        }
    }
}

#[consumer]
async fn record(Json(id): Json<String>) -> Result<(), HandlerError> {
    let created_at = jiff::Timestamp::now();
    let _ = (id, created_at);
    Ok(())
}

fn main() {}
