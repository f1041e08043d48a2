// `Result<(), Box<dyn Error + Send + Sync>>` carries a failure: the unit is returned for
// redelivery.
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
