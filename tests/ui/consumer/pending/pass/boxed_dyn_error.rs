// PENDING (false positive + confusing message). Should PASS: `Result<(), Box<dyn Error + Send +
// Sync>>` (the usual `BoxError`) carries a failure, but `Box<dyn Error>` does not implement
// `Error`, so `HandlerError: From<BoxError>` does not hold, and rustc explains it as
//   error[E0277]: the size for values of type `dyn std::error::Error + Send + Sync` cannot be
//   known at compilation time
// pointing at `Result`. (A direct impl for `BoxError` may run into coherence with the blanket
// `From<E: Error>`; at the least the message should say `BoxError` does not convert.)
use delivery::memory::MemoryBroker;
use delivery::{Consumer, Json, consumer};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[consumer]
async fn record(Json(n): Json<String>) -> Result<(), BoxError> {
    let parsed: u64 = n.parse()?;
    let _ = parsed;
    Ok(())
}

fn main() {
    let _run = Consumer::new(MemoryBroker::new().consume("q")).run(record);
}
