// PENDING (miss). Should FAIL: a clock in `State` behind an alias to `Arc<Mutex<Instant>>`. The
// token check knows `Mutex`/`RwLock`/`RefCell`/`Cell` as wrappers (`State<Arc<Mutex<Instant>>>`
// written out is refused), but the type-level marker `reach!` in marker.rs covers only
// `&`, `&mut`, `Box`, `Arc`, `Rc`, `State`, `Option`, so behind an alias it compiles.
use delivery::{HandlerError, Json, State, consumer};
use std::sync::{Arc, Mutex};
use std::time::Instant;

type LastSeen = Arc<Mutex<Instant>>;

#[consumer]
async fn record(
    State(last_seen): State<LastSeen>,
    Json(id): Json<String>,
) -> Result<(), HandlerError> {
    let _ = (last_seen, id);
    Ok(())
}

fn main() {}
