// Pass: a custom error type — `?` on it means retry, `.map_err(HandlerError::reject)` sends the
// unit to the dead letter.
use delivery::memory::MemoryBroker;
use delivery::{Consumer, HandlerError, Json, consumer};
use std::fmt;

#[derive(Debug)]
enum StockError {
    UnknownSku(String),
    WarehouseDown,
}

impl fmt::Display for StockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StockError::UnknownSku(sku) => write!(f, "unknown sku {sku}"),
            StockError::WarehouseDown => f.write_str("warehouse unavailable"),
        }
    }
}

impl std::error::Error for StockError {}

#[derive(serde::Deserialize)]
struct Reserve {
    sku: String,
    quantity: u32,
}

/// A permanent failure: the request can never succeed.
fn validate(request: &Reserve) -> Result<(), StockError> {
    if request.sku.starts_with('X') {
        return Err(StockError::UnknownSku(request.sku.clone()));
    }
    Ok(())
}

/// A transient failure when the warehouse is down.
fn available(sku: &str) -> Result<u32, StockError> {
    if sku.is_empty() {
        Err(StockError::WarehouseDown)
    } else {
        Ok(7)
    }
}

#[consumer]
async fn reserve(Json(request): Json<Reserve>) -> Result<(), HandlerError> {
    validate(&request).map_err(HandlerError::reject)?; // dead letter, no redelivery
    let in_stock = available(&request.sku)?; // `?`: retry after a backoff
    if in_stock < request.quantity {
        return Err(HandlerError::reject("not enough stock"));
    }
    Ok(())
}

fn main() {
    let _run = Consumer::new(MemoryBroker::new().consume("stock")).run(reserve);
}
