// Rule 3 (minter parameter), reach: the other generators of rand 0.8, 0.9 and 0.10 (features
// `rand-0_8`, `rand-0_9`, `rand-0_10`), each behind an alias, in a tuple in the state: every one
// is refused by the `Minter` marker on it, none by its name.
use delivery::{HandlerError, Json, State, consumer};
use std::sync::{Arc, Mutex};

type Small08 = rand_0_8::rngs::SmallRng;
type Os08 = rand_0_8::rngs::OsRng;
type Core08 = Box<dyn rand_0_8::RngCore + Send>;
type Small09 = rand::rngs::SmallRng;
type Std10 = rand_0_10::rngs::StdRng;
type Small10 = rand_0_10::rngs::SmallRng;
type Xoshiro10 = rand_0_10::rngs::Xoshiro256PlusPlus;
type ChaCha10 = rand_0_10::rngs::ChaCha8Rng;
type Sys10 = rand_0_10::rngs::SysRng;
type Core10 = Box<dyn rand_0_10::Rng + Send>;

#[consumer]
async fn record(
    State(dice): State<
        Arc<Mutex<(Small08, Os08, Core08, Small09, Std10, Small10, Xoshiro10, ChaCha10, Sys10, Core10)>>,
    >,
    Json(id): Json<String>,
) -> Result<(), HandlerError> {
    let _ = (dice, id);
    Ok(())
}

fn main() {}
