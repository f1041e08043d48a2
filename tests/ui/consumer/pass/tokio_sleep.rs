// Pass: waiting is not reading the clock — `tokio::time::sleep(..).await` and
// `tokio::time::timeout` in the body.
use delivery::memory::MemoryBroker;
use delivery::{Consumer, DeliveryCount, HandlerError, Json, consumer};
use std::time::Duration;

#[consumer]
async fn call_partner(
    Json(request): Json<String>,
    count: DeliveryCount,
) -> Result<(), HandlerError> {
    // Be gentle with a partner API that rate-limits bursts.
    tokio::time::sleep(Duration::from_millis(10 * u64::from(count.get()))).await;
    let reply = tokio::time::timeout(Duration::from_secs(5), async { request.len() })
        .await
        .map_err(HandlerError::retry)?;
    let _ = reply;
    Ok(())
}

fn main() {
    let _run = Consumer::new(MemoryBroker::new().consume("partner")).run(call_partner);
}
