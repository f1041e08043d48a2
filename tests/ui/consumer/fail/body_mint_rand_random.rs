// Rule 4 (body mints randomness): `rand::random()` (a local stand-in for the rand crate).
use delivery::{HandlerError, Json, consumer};

mod rand {
    pub fn random<T: Default>() -> T {
        T::default()
    }
}

#[consumer]
async fn record(Json(name): Json<String>) -> Result<(), HandlerError> {
    let token: u64 = rand::random();
    let _ = (token, name);
    Ok(())
}

fn main() {}
