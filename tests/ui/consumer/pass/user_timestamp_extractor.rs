// A user's own extractor named `Timestamp`, read from a header, is deterministic and allowed: a
// bare `Timestamp` is not taken for jiff's (and `Timestamp::now()` in a body is still refused).
use delivery::memory::MemoryBroker;
use delivery::{Consumer, extract::FromUnit, HandlerError, Json, extract::Malformed, Unit, consumer};

/// The producer's event time, from the `x-event-time` header (epoch millis).
struct Timestamp(u64);

impl<S> FromUnit<S> for Timestamp {
    fn from_unit(unit: &Unit, _: &S) -> Result<Self, Malformed> {
        let text = unit
            .headers()
            .get_str("x-event-time")
            .ok_or_else(|| Malformed::new("no x-event-time"))?;
        text.parse()
            .map(Timestamp)
            .map_err(|e| Malformed::new(format!("bad x-event-time: {e}")))
    }
}

#[consumer]
async fn record(at: Timestamp, Json(id): Json<String>) -> Result<(), HandlerError> {
    let _ = (at.0, id);
    Ok(())
}

fn main() {
    let _run = Consumer::new(MemoryBroker::new().consume("q")).run(record);
}
