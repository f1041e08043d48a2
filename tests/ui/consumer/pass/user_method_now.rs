// Pass: a user's own method named `now` on a value that is not a clock (`schedule.now()`), and a
// local variable called `now` taken from the payload.
use delivery::memory::MemoryBroker;
use delivery::{Consumer, HandlerError, Json, State, consumer};

#[derive(Clone, Default)]
struct Schedule {
    slots: Vec<u32>,
}

impl Schedule {
    /// The slot in effect at `tick`, as the schedule defines it.
    fn now(&self, tick: u32) -> Option<u32> {
        self.slots
            .iter()
            .copied()
            .take_while(|slot| *slot <= tick)
            .last()
    }
}

#[derive(serde::Deserialize)]
struct Tick {
    at: u32,
}

#[consumer]
async fn on_tick(
    State(schedule): State<Schedule>,
    Json(tick): Json<Tick>,
) -> Result<(), HandlerError> {
    let now = tick.at;
    let slot = schedule
        .now(now)
        .ok_or_else(|| HandlerError::reject(format!("no slot at {now}")))?;
    let _ = slot;
    Ok(())
}

fn main() {
    let _run = Consumer::new(MemoryBroker::new().consume("ticks"))
        .state(Schedule::default())
        .run(on_tick);
}
