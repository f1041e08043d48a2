// A batch handler that cannot report a failure would acknowledge a failed batch (rule 1).
use delivery::{Batch, Json, consumer};

#[consumer]
async fn apply(orders: Batch<Json<u32>>) -> Option<()> {
    let _ = orders;
    Some(())
}

fn main() {}
