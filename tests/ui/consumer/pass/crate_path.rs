// Pass: `crate = path` — the runtime named through a path other than `::delivery`: the crate
// itself (`crate = delivery`), a re-export module (`crate = crate::rt`), and the string form.
use delivery::memory::MemoryBroker;
use delivery::{Consumer, HandlerError, Json, consumer};

mod rt {
    pub use delivery::*;
}

#[consumer(crate = delivery)]
async fn first(Json(id): Json<String>) -> Result<(), HandlerError> {
    let _ = id;
    Ok(())
}

#[consumer(crate = crate::rt)]
async fn second(Json(id): Json<String>) -> Result<(), HandlerError> {
    let _ = id;
    Ok(())
}

#[consumer(crate = "crate::rt")]
async fn third(Json(id): Json<String>) -> Result<(), rt::HandlerError> {
    let _ = id;
    Ok(())
}

fn main() {
    let broker = MemoryBroker::new();
    let _run = Consumer::new(broker.consume("a")).run(first);
    let _run = Consumer::new(broker.consume("b")).run(second);
    let _run = Consumer::new(broker.consume("c")).run(third);
}
