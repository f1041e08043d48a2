// Rule 3 (acknowledgement handle parameter): lapin's `Delivery` (it carries its `Acker`). Needs the
// `lapin` feature.
// PENDING: `lapin` is not nameable from a test crate (it is a dependency of delivery-core only);
// written against a re-export `delivery::lapin`. Move to `fail-lapin/` once it exists.
use delivery::lapin;
use delivery::{HandlerError, consumer};

#[consumer]
async fn record(delivery: lapin::message::Delivery) -> Result<(), HandlerError> {
    let _ = delivery.data;
    Ok(())
}

fn main() {}
