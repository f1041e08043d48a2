// Rule 3 (acknowledgement handle parameter): lapin's `Acker` (`lapin::Acker` in lapin 4; the
// `acker` module is private there). Needs the `lapin` feature.
// PENDING: `lapin` is not nameable from a test crate (it is a dependency of delivery-core only);
// written against a re-export `delivery::lapin`. Move to `fail-lapin/` once it exists.
use delivery::lapin;
use delivery::{HandlerError, Json, consumer};

#[consumer]
async fn record(Json(id): Json<String>, acker: lapin::Acker) -> Result<(), HandlerError> {
    let _ = (id, acker);
    Ok(())
}

fn main() {}
