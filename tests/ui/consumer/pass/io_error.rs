// Pass: any `Result<_, E>` with `E: Into<HandlerError>` — here `std::io::Error`.
use delivery::memory::MemoryBroker;
use delivery::{Consumer, Json, consumer};
use std::io::Write;

#[consumer]
async fn append_line(Json(line): Json<String>) -> Result<(), std::io::Error> {
    let mut sink = Vec::new();
    writeln!(sink, "{line}")?;
    Ok(())
}

fn main() {
    let _run = Consumer::new(MemoryBroker::new().consume("lines")).run(append_line);
}
