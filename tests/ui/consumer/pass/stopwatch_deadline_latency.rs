// Pass: deadlines and latency without `allow_clock` — `delivery::Stopwatch` (a deadline for
// `timeout_at` and `sleep_until`, a latency sample, a slow-unit count) and `tokio::time::timeout`,
// which reads no clock in the handler. The rest of the body stays checked.
use delivery::memory::MemoryBroker;
use delivery::{Consumer, HandlerError, Json, State, Stopwatch, consumer};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Clone, Default)]
struct App {
    names: Arc<Mutex<Vec<String>>>,
    slow: Arc<Mutex<u64>>,
}

#[consumer]
async fn record(State(app): State<App>, Json(name): Json<String>) -> Result<(), HandlerError> {
    let watch = Stopwatch::start();
    tokio::time::timeout(Duration::from_secs(2), async {
        let mut names = app.names.lock().unwrap();
        if !names.contains(&name) {
            names.push(name.clone());
        }
    })
    .await
    .map_err(|_| HandlerError::retry("the store did not answer in 2 s"))?;
    tokio::time::timeout_at(watch.deadline(Duration::from_secs(3)), async {})
        .await
        .map_err(|_| HandlerError::retry("past the deadline"))?;
    tokio::time::sleep_until(watch.deadline(Duration::from_millis(1))).await;
    if watch.exceeds(Duration::from_millis(50)) {
        *app.slow.lock().unwrap() += 1;
    }
    watch.record(&metrics::histogram!("record_seconds"));
    Ok(())
}

fn main() {
    let _run = Consumer::new(MemoryBroker::new().consume("names"))
        .state(App::default())
        .run(record);
}
