// Pass: the time comes from the payload — a `SystemTime` field decoded by serde and a `u64`
// epoch field turned into a `SystemTime` with `UNIX_EPOCH` — never from the clock.
use delivery::memory::MemoryBroker;
use delivery::{Consumer, HandlerError, Json, State, consumer};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

#[derive(serde::Deserialize)]
struct Shipped {
    parcel: String,
    shipped_at: SystemTime,
    promised_at_ms: u64,
}

#[derive(Clone, Default)]
struct App {
    late: Arc<Mutex<Vec<String>>>,
}

#[consumer]
async fn track(State(app): State<App>, Json(event): Json<Shipped>) -> Result<(), HandlerError> {
    let promised = SystemTime::UNIX_EPOCH + Duration::from_millis(event.promised_at_ms);
    if event.shipped_at > promised {
        app.late.lock().unwrap().push(event.parcel);
    }
    Ok(())
}

fn main() {
    let _run = Consumer::new(MemoryBroker::new().consume("parcels"))
        .state(App::default())
        .run(track);
}
