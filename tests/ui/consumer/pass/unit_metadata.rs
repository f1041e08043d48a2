// Pass: read-only unit metadata as parameters — `UnitId`, `DeliveryCount`, `Headers`,
// `Option<Stamp>`, and the whole read-only `Unit` — with no shared state (the handler runs under
// any state).
use delivery::memory::MemoryBroker;
use delivery::{Consumer, DeliveryCount, HandlerError, Headers, Stamp, Unit, UnitId, consumer};

#[consumer]
async fn audit(
    id: UnitId,
    count: DeliveryCount,
    headers: Headers,
    stamp: Option<Stamp>,
) -> Result<(), HandlerError> {
    let tenant = headers.get_str("tenant").unwrap_or("default");
    if count.is_redelivery() {
        println!("{id} (tenant {tenant}) delivered {count} times, stamp {stamp:?}");
    }
    Ok(())
}

#[consumer]
async fn archive(unit: Unit) -> Result<(), HandlerError> {
    let _ = (
        unit.id(),
        unit.payload().len(),
        unit.delivery_count(),
        unit.stamp(),
        unit.headers().len(),
    );
    Ok(())
}

fn main() {
    let _run = Consumer::new(MemoryBroker::new().consume("audit")).run(audit);
    let _run = Consumer::new(MemoryBroker::new().consume("audit"))
        .state(42_u32)
        .run(audit);
    let _run = Consumer::new(MemoryBroker::new().consume("archive")).run(archive);
}
