//! [`Stopwatch`]: the clock a handler may read, for what writes nothing — a latency metric, a
//! deadline. `#[consumer]` refuses every other clock read in a handler (rule 3) but knows this one,
//! so a handler that times itself needs no `allow_clock`, and the rest of its body stays checked.

use std::time::Duration;

/// A monotonic stopwatch started in a handler. It hands out no time and no duration, only what
/// cannot be written as a value: a deadline to wait until, whether a limit was exceeded, and a
/// sample recorded into a metrics histogram.
///
/// It reads tokio's clock, so a test under `tokio::time::pause` controls it.
///
/// ```
/// use std::time::Duration;
/// use delivery::{HandlerError, Json, Stopwatch, consumer};
///
/// #[consumer]
/// async fn record(Json(id): Json<String>) -> Result<(), HandlerError> {
///     let watch = Stopwatch::start();
///     // Wait for a dependency at most two seconds from the start, then retry the unit later.
///     tokio::time::timeout_at(watch.deadline(Duration::from_secs(2)), async { /* the effect */ })
///         .await
///         .map_err(|_| HandlerError::retry("the store did not answer in 2 s"))?;
///     watch.record(&metrics::histogram!("record_seconds"));
///     let _ = id;
///     Ok(())
/// }
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Stopwatch {
    started: tokio::time::Instant,
}

impl Stopwatch {
    /// Starts the stopwatch now.
    #[must_use]
    pub fn start() -> Self {
        Stopwatch {
            started: tokio::time::Instant::now(),
        }
    }

    /// The instant `after` the start, for `tokio::time::sleep_until` or `tokio::time::timeout_at`.
    /// A `tokio::time::Instant` has no epoch: it cannot be written as a time.
    #[must_use]
    pub fn deadline(&self, after: Duration) -> tokio::time::Instant {
        self.started + after
    }

    /// Whether more than `limit` has passed since the start (to count slow units, or to give up
    /// waiting). What the handler writes must not depend on it.
    #[must_use]
    pub fn exceeds(&self, limit: Duration) -> bool {
        self.started.elapsed() > limit
    }

    /// Records the time since the start, in seconds, into `histogram`.
    pub fn record(&self, histogram: &metrics::Histogram) {
        histogram.record(self.started.elapsed().as_secs_f64());
    }
}
