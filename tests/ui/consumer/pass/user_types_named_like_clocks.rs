// Pass: the user's own types whose names are those of clocks and minters elsewhere — a
// `billing::Local` extractor, a `geo::Instant` imported bare, a `ClockConfig` and an
// `IdGenerator` that derives ids from the unit, in the state. Parameters are refused by what a type
// is (the marker traits), not by how it is spelled.
use delivery::memory::MemoryBroker;
use delivery::{Consumer, extract::FromUnit, HandlerError, extract::Malformed, State, Unit, UnitId, consumer};
use geo::Instant;

mod billing {
    /// The billing locale of the unit, from its `x-locale` header.
    pub struct Local(pub String);
}

mod geo {
    /// A position fix carried by the unit, in its `x-fix` header.
    pub struct Instant(pub String);
}

fn header(unit: &Unit, name: &str) -> Result<String, Malformed> {
    unit.headers()
        .get_str(name)
        .map(str::to_owned)
        .ok_or_else(|| Malformed::new(format!("no {name}")))
}

impl<S> FromUnit<S> for billing::Local {
    fn from_unit(unit: &Unit, _: &S) -> Result<Self, Malformed> {
        header(unit, "x-locale").map(billing::Local)
    }
}

impl<S> FromUnit<S> for Instant {
    fn from_unit(unit: &Unit, _: &S) -> Result<Self, Malformed> {
        header(unit, "x-fix").map(Instant)
    }
}

#[derive(Clone, Default)]
struct ClockConfig {
    skew_tolerance_ms: u64,
}

/// Derives an order's id from the unit that carries it: the same on every delivery.
#[derive(Clone, Default)]
struct IdGenerator {
    prefix: String,
}

impl IdGenerator {
    fn derive(&self, unit_id: &UnitId) -> String {
        format!("{}-{}", self.prefix, unit_id.as_str())
    }
}

#[derive(Clone, Default)]
struct App {
    clock: ClockConfig,
    ids: IdGenerator,
}

#[consumer]
async fn record(
    State((app, ids)): State<(App, IdGenerator)>,
    locale: billing::Local,
    fix: Instant,
    unit_id: UnitId,
) -> Result<(), HandlerError> {
    let order_id = ids.derive(&unit_id);
    let _ = (app.clock.skew_tolerance_ms, app.ids.derive(&unit_id), order_id, locale.0, fix.0);
    Ok(())
}

fn main() {
    let _run = Consumer::new(MemoryBroker::new().consume("orders"))
        .state((App::default(), IdGenerator::default()))
        .run(record);
}
