// `Result<(), anyhow::Error>` carries a failure: an `anyhow::Error` returns the unit for redelivery
// (it converts through `Box<dyn Error + Send + Sync>`).
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
