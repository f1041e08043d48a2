//! What a consumer's run reports beside its counters: the handler duration, units in flight, and
//! its health (the metrics' names are in [`observe`](crate::observe)).

use std::time::Duration;

use metrics::{Gauge, Histogram};
use tokio::time::Instant;

use crate::health::{Health, InFlight};
use crate::observe::{HANDLER_DURATION, IN_FLIGHT, describe};

fn handler_duration(source: &str) -> Histogram {
    metrics::histogram!(HANDLER_DURATION, "source" => source.to_owned())
}

fn in_flight(source: &str) -> Gauge {
    metrics::gauge!(IN_FLIGHT, "source" => source.to_owned())
}

/// What a consumer's run reports beside its counters: the handler duration, units in flight, and
/// its [`Health`]. Registered once per run (which describes every metric again).
#[derive(Clone)]
pub(crate) struct ConsumerObserver {
    health: Health,
    duration: Histogram,
    in_flight: Gauge,
}

impl ConsumerObserver {
    pub(crate) fn new(source: &str, health: &Health) -> Self {
        describe();
        // The first read calibrates quanta's clock against the OS's, once per process (10-20 ms,
        // 200 ms at most): here, as the run starts, rather than on its first unit.
        let _ = quanta::Instant::now();
        ConsumerObserver {
            health: health.clone(),
            duration: handler_duration(source),
            in_flight: in_flight(source),
        }
    }

    /// A unit arrived: the receive succeeded, and the unit is in flight until the returned guard
    /// is dropped (once it is settled). `stamp_health`: whether the arrival's time goes into the
    /// [`Health`] now (the loops stamp after any wait, and otherwise once every few units: see
    /// `consumer::run`'s `Pace`).
    ///
    /// The handler's duration is timed with `quanta`'s clock (a TSC read where the CPU has an
    /// invariant one, about 10 ns here against 23 ns for `std::time::Instant`): two reads per
    /// unit, whether or not a recorder takes the histogram, since the `metrics` facade cannot
    /// tell a no-op handle from a real one.
    #[inline]
    pub(crate) fn received(&self, stamp_health: bool) -> Flight<'_> {
        if stamp_health {
            self.health.succeeded(Instant::now());
        }
        self.in_flight.increment(1.0);
        Flight {
            observer: self,
            at: quanta::Instant::now(),
            _health: self.health.in_flight(),
        }
    }

    /// A receive failed; the next one starts after `retry_in`.
    #[cold]
    pub(crate) fn receive_failed(&self, error: &dyn std::fmt::Display, retry_in: Duration) {
        self.health.failed(error, Some(retry_in));
    }

    /// A unit was moved to the dead letter.
    #[cold]
    pub(crate) fn dead_lettered(&self) {
        self.health.dead_lettered();
    }
}

/// A unit in flight: received at `at`, until dropped.
pub(crate) struct Flight<'a> {
    observer: &'a ConsumerObserver,
    at: quanta::Instant,
    _health: InFlight<'a>,
}

impl Flight<'_> {
    /// The handler ended: its duration, from the unit's receipt, goes into the histogram.
    #[inline]
    pub(crate) fn handled(&self) {
        self.observer
            .duration
            .record(self.at.elapsed().as_secs_f64());
    }
}

impl Drop for Flight<'_> {
    #[inline]
    fn drop(&mut self) {
        self.observer.in_flight.decrement(1.0);
    }
}

#[cfg(test)]
mod tests {
    use metrics::Unit;

    use super::*;

    #[test]
    fn describe_gives_every_metric_its_unit_and_help() {
        let recorder = metrics_util::debugging::DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            describe();
            let observer =
                ConsumerObserver::new("q", &Health::new(crate::health::Component::Consumer, "q"));
            let flight = observer.received(true);
            flight.handled();
        });
        let snapshot = snapshotter.snapshot().into_vec();
        let (_, unit, help, _) = snapshot
            .iter()
            .find(|(key, ..)| key.key().name() == HANDLER_DURATION)
            .expect("the histogram was recorded");
        assert_eq!(*unit, Some(Unit::Seconds));
        assert!(help.as_ref().is_some_and(|h| h.contains("handler")));
    }
}
