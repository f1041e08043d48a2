// Rule 4 (body mints an id): `Ulid::new()` (a local stand-in for the ulid crate).
use delivery::{HandlerError, Json, consumer};

mod ulid {
    pub struct Ulid(pub u128);
    impl Ulid {
        pub fn new() -> Self {
            Ulid(0)
        }
    }
}

use ulid::Ulid;

#[consumer]
async fn record(Json(name): Json<String>) -> Result<(), HandlerError> {
    let id = Ulid::new();
    let _ = (id.0, name);
    Ok(())
}

fn main() {}
