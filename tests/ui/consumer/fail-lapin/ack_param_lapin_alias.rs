// Rule 1 (acknowledgement handle parameter), reach: lapin's `Acker` behind a type alias and an
// `Option`, caught by the type. Needs the `lapin` feature.
use delivery::lapin;
use delivery::{HandlerError, Json, consumer};

type Ack = Option<lapin::Acker>;

#[consumer]
async fn record(Json(id): Json<String>, ack: Ack) -> Result<(), HandlerError> {
    let _ = (id, ack);
    Ok(())
}

fn main() {}
