// PENDING (false positive — decide). Should PASS: `Result<(), anyhow::Error>` can carry a failure,
// and anyhow is the most common application error type. It is refused because `anyhow::Error`
// does not implement `std::error::Error`, so `HandlerError: From<anyhow::Error>` does not hold:
//   error[E0277]: the trait bound `anyhow::Error: std::error::Error` is not satisfied
// Fix options: `impl From<anyhow::Error> for HandlerError` behind an `anyhow` feature (anyhow is
// only a dev-dependency today), or document `.map_err(|e| HandlerError::retry_msg(e))`.
use delivery::memory::MemoryBroker;
use delivery::{Consumer, Json, consumer};

#[consumer]
async fn record(Json(n): Json<String>) -> Result<(), anyhow::Error> {
    let parsed: u64 = n.parse()?;
    anyhow::ensure!(parsed > 0, "zero");
    Ok(())
}

fn main() {
    let _run = Consumer::new(MemoryBroker::new().consume("q")).run(record);
}
