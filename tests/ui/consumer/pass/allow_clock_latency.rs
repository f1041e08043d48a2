// Pass: the recorded escape — `#[consumer(allow_clock = "...")]` with `Instant::now()` for a
// latency measurement that writes nothing.
use delivery::memory::MemoryBroker;
use delivery::{Consumer, HandlerError, Json, State, consumer};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Clone, Default)]
struct App {
    names: Arc<Mutex<Vec<String>>>,
    slow: Arc<Mutex<u64>>,
}

#[consumer(allow_clock = "latency metric only; the time is never written")]
async fn record(State(app): State<App>, Json(name): Json<String>) -> Result<(), HandlerError> {
    let started = Instant::now();
    let mut names = app.names.lock().unwrap();
    if !names.contains(&name) {
        names.push(name);
    }
    if started.elapsed() > Duration::from_millis(50) {
        *app.slow.lock().unwrap() += 1;
    }
    Ok(())
}

fn main() {
    let _run = Consumer::new(MemoryBroker::new().consume("names"))
        .state(App::default())
        .run(record);
}
