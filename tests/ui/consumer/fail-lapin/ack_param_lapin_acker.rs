// Rule 1 (acknowledgement handle parameter): lapin's `Acker` (`lapin::Acker` in lapin 4; the
// `acker` module is private there). Needs the `lapin` feature.
use delivery::lapin;
use delivery::{HandlerError, Json, consumer};

#[consumer]
async fn record(Json(id): Json<String>, acker: lapin::Acker) -> Result<(), HandlerError> {
    let _ = (id, acker);
    Ok(())
}

fn main() {}
