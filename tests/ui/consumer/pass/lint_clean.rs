// Pass: the expansion is lint-clean — no warning, no `unused_qualifications`, no missing docs or
// Debug — under strict crate-level lints, with realistic usage.
#![deny(warnings, unused_qualifications)]
#![deny(
    rust_2018_idioms,
    missing_docs,
    missing_debug_implementations,
    unreachable_pub
)]
#![deny(
    unused_results,
    unused_lifetimes,
    trivial_casts,
    trivial_numeric_casts,
    unsafe_code
)]
//! A lint-clean consumer.

use delivery::memory::MemoryBroker;
use delivery::{Consumer, DeliveryCount, HandlerError, Json, State, UnitId, consumer};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The order event.
#[derive(Debug, serde::Deserialize)]
pub struct OrderPlaced {
    order_id: String,
    amount_cents: u64,
}

/// Shared state.
#[derive(Clone, Debug, Default)]
pub struct App {
    totals: Arc<Mutex<HashMap<String, u64>>>,
}

/// Records an order, keyed by its own id.
#[consumer]
pub async fn record_order(
    State(app): State<App>,
    unit_id: UnitId,
    count: DeliveryCount,
    Json(order): Json<OrderPlaced>,
) -> Result<(), HandlerError> {
    if order.amount_cents == 0 {
        return Err(HandlerError::reject(format!("{unit_id}: zero amount")));
    }
    let mut totals = app
        .totals
        .lock()
        .map_err(|_| HandlerError::retry("state poisoned"))?;
    let previous = totals.insert(order.order_id, order.amount_cents);
    debug_assert!(previous.is_none() || count.is_redelivery());
    Ok(())
}

/// With the recorded escape and a custom error type.
#[consumer(allow_clock = "latency metric only")]
pub async fn measure(Json(n): Json<u64>) -> Result<u64, std::num::TryFromIntError> {
    let started = std::time::Instant::now();
    let small = u32::try_from(n)?;
    let _elapsed = started.elapsed();
    Ok(u64::from(small))
}

/// Without parameters.
#[consumer]
pub async fn ping() -> Result<(), HandlerError> {
    Ok(())
}

fn main() {
    let broker = MemoryBroker::new();
    let app = App::default();
    let _run = Consumer::new(broker.consume("orders"))
        .state(app)
        .run(record_order);
    let _run = Consumer::new(broker.consume("numbers")).run(measure);
    let _run = Consumer::new(broker.consume("pings")).run(ping);
}
