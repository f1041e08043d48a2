// Pass: the return type through a type alias, `io::Result<()>`.
use delivery::memory::MemoryBroker;
use delivery::{Consumer, Json, consumer};
use std::io;

#[consumer]
async fn store(Json(bytes): Json<Vec<u8>>) -> io::Result<()> {
    if bytes.is_empty() {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "empty document"));
    }
    Ok(())
}

fn main() {
    let _run = Consumer::new(MemoryBroker::new().consume("documents")).run(store);
}
