// A batch handler takes `Batch<T>` and its state only: each unit's id, count and stamp are on
// its item.
use delivery::{Batch, DeliveryCount, HandlerError, Json, consumer};

#[consumer]
async fn apply(orders: Batch<Json<u32>>, count: DeliveryCount) -> Result<(), HandlerError> {
    let _ = (orders, count);
    Ok(())
}

fn main() {}
