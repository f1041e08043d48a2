// One `Batch<T>` per handler.
use delivery::{Batch, HandlerError, Json, consumer};

#[consumer]
async fn apply(orders: Batch<Json<u32>>, again: Batch<Json<u32>>) -> Result<(), HandlerError> {
    let _ = (orders, again);
    Ok(())
}

fn main() {}
