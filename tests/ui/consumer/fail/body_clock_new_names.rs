// Rule 3 (body reads the clock): clocks the first list did not know, `time::UtcDateTime::now()`,
// `chrono::Local::now()` imported bare, `std::time::UNIX_EPOCH.elapsed()`, and a clock type
// renamed inside the body (local stand-ins with the crates' paths, but for std).
use delivery::{HandlerError, Json, consumer};
use chrono::Local;

mod time {
    pub struct UtcDateTime;
    impl UtcDateTime {
        pub fn now() -> Self {
            UtcDateTime
        }
    }
}

mod chrono {
    pub struct Local;
    impl Local {
        pub fn now() -> i64 {
            0
        }
    }
}

#[consumer]
async fn record(Json(name): Json<String>) -> Result<(), HandlerError> {
    let utc = time::UtcDateTime::now();
    let local = Local::now();
    let since = std::time::UNIX_EPOCH.elapsed();
    let at = {
        use time::UtcDateTime as At;
        At::now()
    };
    let _ = (utc, local, since, at, name);
    Ok(())
}

fn main() {}
