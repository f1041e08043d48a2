// Rule 3 (body mints randomness): free functions imported bare at module level, `use
// rand::random;` then `random()`, and `thread_rng()` (a local stand-in for the rand crate). The
// attribute cannot see a module-level `use`, so a bare call is refused by its name.
use delivery::{HandlerError, Json, consumer};
use rand::{random, thread_rng};

mod rand {
    pub struct ThreadRng;
    pub fn random<T: Default>() -> T {
        T::default()
    }
    pub fn thread_rng() -> ThreadRng {
        ThreadRng
    }
}

#[consumer]
async fn record(Json(name): Json<String>) -> Result<(), HandlerError> {
    let token: u64 = random();
    let rng = thread_rng();
    let _ = (token, rng, name);
    Ok(())
}

fn main() {}
