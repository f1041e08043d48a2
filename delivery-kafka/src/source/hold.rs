//! The retry hold: units of the retry topic not due yet are held by the source until their backoff
//! has passed, at most `max_waiting` of them (the retry topic's partitions are paused at that
//! many, resumed at half as many).

use std::cmp::Reverse;
use std::sync::atomic::Ordering;

use rdkafka::consumer::Consumer;
use tokio::time::Instant;

use super::KafkaSource;
use super::state::Waiting;
use crate::settle::KafkaHandle;
use delivery_core::unit::Unit;

impl KafkaSource {
    /// A unit not yet due is held until it is (`None`); any other is handed out.
    pub(super) fn hold_or_hand_out(
        &mut self,
        unit: Unit,
        handle: KafkaHandle,
        due: Option<Instant>,
    ) -> Option<(Unit, KafkaHandle)> {
        match due {
            Some(due) if due > Instant::now() => {
                self.arrivals += 1;
                let arrival = self.arrivals;
                self.waiting.push(Reverse(Waiting {
                    due,
                    arrival,
                    unit,
                    handle,
                }));
                self.waiting_changed(true);
                None
            }
            _ => Some((unit, handle)),
        }
    }

    /// The earliest time a held unit is due: the waiting returns', and the first unit queued of
    /// each partition read alone with nothing of it handed out.
    pub(super) fn next_due(&self) -> Option<Instant> {
        let waiting = self.waiting.peek().map(|Reverse(first)| first.due);
        let alone = self
            .runs
            .iter()
            .filter_map(|(partition, run)| {
                let (_, first) = run.alone.as_ref()?.queue.first_key_value()?;
                (!self.shared.book.alone_out(*partition)).then_some(first.due)
            })
            .min();
        waiting.into_iter().chain(alone).min()
    }

    /// The number of units waiting changed (`arrived`: by one more): keeps the gauge current, and
    /// pauses the retry topic's partitions at `max_waiting` units, resumes them at half as many.
    ///
    /// An arrival at or past the limit pauses the current assignment again even if the source
    /// already holds it paused: that unit came from a partition the pause did not cover.
    pub(super) fn waiting_changed(&mut self, arrived: bool) {
        let held = self.waiting.len();
        self.waiting_gauge.set(held as f64);
        let paused = self
            .shared
            .consumer
            .context()
            .retry_paused
            .load(Ordering::Relaxed);
        if arrived && held >= self.max_waiting {
            self.pause_retry(true, held);
        } else if paused && held <= self.max_waiting / 2 {
            self.pause_retry(false, held);
        }
    }

    /// Pauses (or resumes) the retry topic's partitions currently assigned. librdkafka pauses
    /// synchronously: once this returns, what it had fetched of them and not handed out is
    /// discarded, and fetching resumes after the last unit handed out, so nothing is skipped.
    fn pause_retry(&self, pause: bool, held: usize) {
        let consumer = &self.shared.consumer;
        // Waits for librdkafka's threads to apply it: a short wait, not I/O with the broker.
        let done = consumer.assignment().and_then(|assigned| {
            let retry = self.shared.book.retry_partitions(&assigned);
            if retry.count() == 0 {
                return Ok(0);
            }
            if pause {
                consumer.pause(&retry)?;
            } else {
                consumer.resume(&retry)?;
            }
            Ok(retry.count())
        });
        match done {
            Ok(partitions) => {
                // Partitions assigned from now on follow suit (`Context::post_rebalance`).
                consumer
                    .context()
                    .retry_paused
                    .store(pause, Ordering::Relaxed);
                if pause {
                    tracing::info!(
                        held,
                        partitions,
                        "retry topic paused: the most returned units are held"
                    );
                } else {
                    tracing::info!(held, partitions, "retry topic resumed");
                }
            }
            // Tried again the next time the count changes.
            Err(error) => {
                tracing::warn!(%error, pause, "pausing or resuming the retry topic failed")
            }
        }
    }
}
