// Rule 1 (acknowledgement handle parameter): lapin's `Delivery` (it carries its `Acker`). Needs the
// `lapin` feature.
use delivery::lapin;
use delivery::{HandlerError, consumer};

#[consumer]
async fn record(delivery: lapin::message::Delivery) -> Result<(), HandlerError> {
    let _ = delivery.data;
    Ok(())
}

fn main() {}
