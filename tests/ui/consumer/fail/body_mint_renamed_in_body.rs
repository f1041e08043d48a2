// Rule 3 (body mints randomness): a minter renamed by a `use ... as` inside the body, a free
// function (`rand::random as pick`) and a type (`uuid::Uuid as Id`), and a crate renamed whole.
// rand is a local stand-in: the check is by the paths the body's own imports resolve to.
use delivery::{HandlerError, Json, consumer};

mod rand {
    pub fn random<T: Default>() -> T {
        T::default()
    }
}

#[consumer]
async fn record(Json(name): Json<String>) -> Result<(), HandlerError> {
    use rand::random as pick;
    use uuid::Uuid as Id;
    use rand as dice;
    let token: u64 = pick();
    let id = Id::now_v7();
    let roll: u8 = dice::random();
    let _ = (token, id, roll, name);
    Ok(())
}

fn main() {}
