// Rule 4 (body reads the clock): the `time` crate's `OffsetDateTime::now_utc()` (local stand-in).
use delivery::{HandlerError, Json, consumer};

mod time {
    pub struct OffsetDateTime;
    impl OffsetDateTime {
        pub fn now_utc() -> Self {
            OffsetDateTime
        }
    }
}

#[consumer]
async fn record(Json(id): Json<String>) -> Result<(), HandlerError> {
    let created_at = time::OffsetDateTime::now_utc();
    let _ = (id, created_at);
    Ok(())
}

fn main() {}
