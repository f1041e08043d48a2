// Rule 4 (body mints randomness): `thread_rng()` imported bare (a local stand-in for rand 0.8).
use delivery::{HandlerError, Json, consumer};

mod rand {
    pub struct ThreadRng;
    pub fn thread_rng() -> ThreadRng {
        ThreadRng
    }
}

use rand::thread_rng;

#[consumer]
async fn record(Json(entries): Json<Vec<String>>) -> Result<(), HandlerError> {
    let rng = thread_rng();
    let _ = (rng, entries);
    Ok(())
}

fn main() {}
