// Rule 4 (body mints randomness): `rand::rng()` (rand 0.9's thread RNG; a local stand-in).
use delivery::{HandlerError, Json, consumer};

mod rand {
    pub struct ThreadRng;
    pub fn rng() -> ThreadRng {
        ThreadRng
    }
}

#[consumer]
async fn record(Json(entries): Json<Vec<String>>) -> Result<(), HandlerError> {
    let rng = rand::rng();
    let _ = (rng, entries);
    Ok(())
}

fn main() {}
