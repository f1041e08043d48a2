// Rule 3 (body mints randomness): generators made in the body and used through a method chain,
// `ulid::Generator::new().generate()`, `ThreadRng::default()`, `StdRng::from_entropy()`
// (local stand-ins with the crates' paths).
use delivery::{HandlerError, Json, consumer};

mod ulid {
    pub struct Generator;
    impl Generator {
        pub fn new() -> Self {
            Generator
        }
        pub fn generate(&mut self) -> u128 {
            0
        }
    }
}

mod rngs {
    #[derive(Default)]
    pub struct ThreadRng;
    pub struct StdRng;
    impl StdRng {
        pub fn from_entropy() -> Self {
            StdRng
        }
    }
}
use rngs::{StdRng, ThreadRng};

#[consumer]
async fn record(Json(name): Json<String>) -> Result<(), HandlerError> {
    let id = ulid::Generator::new().generate();
    let thread = ThreadRng::default();
    let seeded = StdRng::from_entropy();
    let _ = (id, thread, seeded, name);
    Ok(())
}

fn main() {}
