// Pass: ordinary handler code the guard must accept — times and ids from the payload, `Duration`
// arithmetic, `UNIX_EPOCH` plus a payload offset, `Uuid::from_u128`, `Uuid::new_v5` from the unit,
// a time zone as a type parameter, `tokio::time::timeout`, a local named `random`.
use delivery::memory::MemoryBroker;
use delivery::{Consumer, HandlerError, Json, UnitId, consumer};
use std::marker::PhantomData;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use uuid::Uuid;

mod chrono {
    pub struct Utc;
    pub struct DateTime<Tz>(pub i64, pub std::marker::PhantomData<Tz>);
}
use chrono::{DateTime, Utc};

#[derive(serde::Deserialize)]
struct Placed {
    order: u128,
    placed_at_secs: u64,
    retry_after_ms: u64,
}

const ORDERS: Uuid = Uuid::from_u128(0x6ba7_b810_9dad_11d1_80b4_00c0_4fd4_30c8);

#[consumer]
async fn record(Json(placed): Json<Placed>, unit_id: UnitId) -> Result<(), HandlerError> {
    let order_id = Uuid::from_u128(placed.order);
    let line_id = Uuid::new_v5(&ORDERS, unit_id.as_str().as_bytes());
    let placed_at: SystemTime = UNIX_EPOCH + Duration::from_secs(placed.placed_at_secs);
    let at: DateTime<Utc> = DateTime(placed.placed_at_secs as i64, PhantomData);
    let backoff = Duration::from_millis(placed.retry_after_ms) * 2 + Duration::from_secs(1);
    let random = placed.order % 7;
    tokio::time::timeout(backoff, async {})
        .await
        .map_err(|_| HandlerError::retry("timed out"))?;
    let _ = (order_id, line_id, placed_at, at.0, random);
    Ok(())
}

fn main() {
    let _run = Consumer::new(MemoryBroker::new().consume("orders")).run(record);
}
