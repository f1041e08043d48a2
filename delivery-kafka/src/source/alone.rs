//! The crash-loop count's side of the source: each partition's run starts by recording its first
//! unit's delivery in the attempts topic, and after a run that did not finish that unit the
//! partition is read one unit at a time for a while.

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use rdkafka::consumer::Consumer;
use tokio::time::Instant;

use super::KafkaSource;
use super::state::{ALONE_AFTER_A_CRASH, Alone, Placing, Run, Waiting};
use crate::attempts::Attempt;
use crate::book::Book;
use crate::keeper_task;
use crate::partition::{Log, Partition, Tracked};
use crate::settle::KafkaHandle;
use delivery_core::transport::{Retry, TransportError};
use delivery_core::unit::{DeliveryCount, Unit};

/// The crash-loop count (see the [module docs](super)): each partition's run starts by recording
/// its first unit's delivery, and after a run that did not finish that unit its partition is read
/// one unit at a time for a while.
impl KafkaSource {
    /// Runs `step` (a broker call the crash-loop count needs before a unit is handed out) until it
    /// succeeds, pausing longer each time; `None` once the unit at `at` is no longer current (its
    /// partition revoked meanwhile).
    async fn until_done<T, F: Future<Output = Result<T, TransportError>>>(
        book: &Book,
        at: Tracked,
        what: &'static str,
        mut step: impl FnMut() -> F,
    ) -> Option<T> {
        let mut retry = Retry::reconnect();
        loop {
            match step().await {
                Ok(done) => return Some(done),
                Err(error) => {
                    if !book.is_current(at.partition, at.generation) {
                        return None;
                    }
                    let pause = retry.failed();
                    tracing::warn!(%error, what, retry_in_ms = pause.as_millis() as u64,
                        "recording a delivery failed; the partition waits until it succeeds");
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }

    /// Where the unit just admitted (`self.placing`) goes: `Some` to hand out (or hold until due)
    /// as usual, `None` when it was queued to be handed out alone, or its partition was revoked
    /// meanwhile. Cancel safe: the unit stays in `self.placing` until its broker calls are done,
    /// and a cancelled call is done again by the next.
    ///
    /// The first unit of a partition's run reads the partition's last recorded delivery. If it is
    /// not a clean end, an earlier run died (or lost the partition) with a unit unfinished —
    /// maybe this one, maybe one after it: the partition is read alone from here. Otherwise this
    /// delivery is recorded as the first, confirmed, before anything of the partition is handed
    /// out.
    pub(super) async fn place(&mut self) -> Option<(Unit, KafkaHandle, Option<Instant>)> {
        let at = self.placing.as_ref()?.handle.at;
        let Some(at) = at else {
            return self
                .placing
                .take()
                .map(|placing| (placing.unit, placing.handle, placing.due));
        };
        let partition = at.partition;
        let known = self
            .runs
            .get(&partition)
            .is_some_and(|run| run.generation == at.generation);
        if !known {
            let shared = self.shared.clone();
            let book = &shared.book;
            let read = self.placing.as_ref()?.last;
            let last = match read {
                Some(last) => last,
                None => {
                    let read =
                        Self::until_done(book, at, "reading the last delivery recorded", || {
                            let shared = shared.clone();
                            async move {
                                tokio::task::spawn_blocking(move || {
                                    shared.book.attempts.last(partition)
                                })
                                .await
                                .map_err(|e| {
                                    crate::error::RDKAFKA.error("reading the attempts topic", e)
                                })?
                            }
                        })
                        .await;
                    let Some(last) = read else {
                        self.placing = None;
                        return None;
                    };
                    self.placing.as_mut()?.last = Some(last);
                    last
                }
            };
            // A run that ended cleanly records so (attempts 0); any other record is a run that
            // died with a unit unfinished: maybe this one, maybe one after it.
            let unfinished = last.filter(|last| last.attempts > 0);
            let alone = match unfinished {
                Some(last) => {
                    tracing::warn!(
                        ?partition,
                        offset = at.offset,
                        attempts = last.attempts,
                        "an earlier consumer of this partition died with a unit unfinished: the partition is read one unit at a time for a while"
                    );
                    Some(Alone {
                        left: ALONE_AFTER_A_CRASH,
                        queue: BTreeMap::new(),
                        last: Some(last),
                        paused: false,
                    })
                }
                None => {
                    let first = Attempt {
                        offset: at.offset,
                        attempts: 1,
                    };
                    let recorded = Self::until_done(book, at, "recording a delivery", || {
                        book.attempts.record(&shared.producer, partition, first)
                    })
                    .await;
                    if recorded.is_none() {
                        self.placing = None;
                        return None;
                    }
                    None
                }
            };
            self.runs.insert(
                partition,
                Run {
                    generation: at.generation,
                    alone,
                },
            );
        }
        let Placing {
            unit, handle, due, ..
        } = self.placing.take()?;
        let Some(alone) = self
            .runs
            .get_mut(&partition)
            .and_then(|run| run.alone.as_mut())
        else {
            return Some((unit, handle, due));
        };
        self.arrivals += 1;
        let over = alone.queue.len() > alone.left;
        alone.queue.insert(
            at.offset,
            Waiting {
                due: due.unwrap_or_else(Instant::now),
                arrival: self.arrivals,
                unit,
                handle,
            },
        );
        if over {
            // More than the units left to hand out alone: the rest wait in the broker.
            alone.paused = true;
            self.pause_partition(partition, true);
        }
        None
    }

    /// Pauses (or resumes) one partition of the consumer's assignment.
    fn pause_partition(&self, (log, partition): Partition, pause: bool) {
        let mut list = rdkafka::TopicPartitionList::new();
        list.add_partition(self.shared.book.topic(log), partition);
        let consumer = &self.shared.consumer;
        let done = if pause {
            consumer.pause(&list)
        } else {
            consumer.resume(&list)
        };
        if let Err(error) = done {
            tracing::warn!(%error, pause, ?log, partition, "pausing or resuming a partition read alone failed");
        }
    }

    /// Takes the partitions back from the keeper, if it held them paused: resumes them all but
    /// those the source holds paused itself (the retry topic at its limit, a partition read alone
    /// with more queued than it hands out).
    pub(super) fn resume_held(&self) {
        let retry_paused = self
            .shared
            .consumer
            .context()
            .retry_paused
            .load(Ordering::Relaxed);
        let book = &self.shared.book;
        keeper_task::resume_held(&self.shared, |topic, partition| {
            let Some(log) = book.log(topic) else {
                return false;
            };
            (log == Log::Retry && retry_paused)
                || self
                    .runs
                    .get(&(log, partition))
                    .and_then(|run| run.alone.as_ref())
                    .is_some_and(|alone| alone.paused)
        });
    }

    /// The next unit to hand out alone, if one is due and nothing else of its partition is out:
    /// its partition's offset is committed up to it, and its delivery recorded, first. A
    /// partition done being read alone hands its queue to the usual path.
    pub(super) async fn next_alone(&mut self) -> Option<(Unit, KafkaHandle)> {
        if self.runs.values().all(|run| run.alone.is_none()) {
            return None;
        }
        let shared = self.shared.clone();
        let book = &shared.book;
        let done: Vec<Partition> = self
            .runs
            .iter()
            .filter(|(partition, run)| {
                run.alone.as_ref().is_some_and(|alone| alone.left == 0)
                    && !book.alone_out(**partition)
            })
            .map(|(partition, _)| *partition)
            .collect();
        for partition in done {
            let Some(alone) = self
                .runs
                .get_mut(&partition)
                .and_then(|run| run.alone.take())
            else {
                continue;
            };
            tracing::info!(?partition, "partition read concurrently again");
            for (_, waiting) in alone.queue {
                self.waiting.push(Reverse(waiting));
            }
            self.waiting_changed(false);
            if alone.paused {
                self.pause_partition(partition, false);
            }
        }
        let now = Instant::now();
        let ready = self.runs.iter().find_map(|(partition, run)| {
            let (_, first) = run.alone.as_ref()?.queue.first_key_value()?;
            (first.due <= now && !book.alone_out(*partition)).then_some(*partition)
        })?;
        // Cancel safe: the unit stays queued until its broker calls are done; a cancelled call
        // does them again (the same commit, the same record).
        let alone = self.runs.get(&ready)?.alone.as_ref()?;
        let (&offset, first) = alone.queue.first_key_value()?;
        let at = first.handle.at?;
        let attempt = Attempt {
            offset,
            attempts: match alone.last {
                Some(last) if last.offset == offset => last.attempts.saturating_add(1),
                _ => 1,
            },
        };
        let book = &shared.book;
        // Everything before it is final: commit up to it, so the record names the committed
        // position, where the next run starts if this one dies.
        let committed = Self::until_done(
            book,
            at,
            "committing before a unit handed out alone",
            || {
                let shared = shared.clone();
                async move {
                    tokio::task::spawn_blocking(move || {
                        shared.book.commit_owed_of(&shared.consumer, ready)
                    })
                    .await
                    .map_err(|e| crate::error::RDKAFKA.error("committing offsets", e))?
                }
            },
        )
        .await;
        let recorded = match committed {
            Some(()) => {
                Self::until_done(book, at, "recording a delivery", || {
                    book.attempts.record(&shared.producer, ready, attempt)
                })
                .await
            }
            None => None,
        };
        let alone = self.runs.get_mut(&ready)?.alone.as_mut()?;
        let (_, Waiting { unit, handle, .. }) = alone.queue.pop_first()?;
        // Revoked meanwhile: the new owner reads it again.
        if recorded.is_none() || !handle.is_current() {
            return None;
        }
        book.hand_out_alone(ready, offset);
        alone.last = Some(attempt);
        alone.left = alone.left.saturating_sub(1);
        if alone.paused && alone.queue.len() <= alone.left {
            alone.paused = false;
            self.pause_partition(ready, false);
        }
        // Each run that handed it out and never finished it was a delivery.
        let count = unit
            .delivery_count()
            .get()
            .saturating_add(attempt.attempts - 1);
        Some((unit.with_delivery_count(DeliveryCount::new(count)), handle))
    }
}
