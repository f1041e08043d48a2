// Pass: handlers gated with `#[cfg(..)]` below `#[consumer]` — the enabled one is a handler, the
// disabled one vanishes without leaving a half-expanded handler behind.
use delivery::memory::MemoryBroker;
use delivery::{Consumer, HandlerError, Json, consumer};

#[consumer]
#[cfg(not(test))]
async fn record(Json(id): Json<String>) -> Result<(), HandlerError> {
    let _ = id;
    Ok(())
}

#[consumer]
#[cfg(test)]
async fn record_for_tests_only(Json(id): Json<String>) -> Result<(), HandlerError> {
    let _ = id;
    Ok(())
}

fn main() {
    let _run = Consumer::new(MemoryBroker::new().consume("q")).run(record);
}
