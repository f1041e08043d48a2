//! The commit book: where Kafka offsets are committed, and the only place (rule 1: never past a
//! unit whose disposition is not final) — and the consumer's context, whose revocation commits
//! through it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use delivery_core::offset::{OffsetError, Watermarks};
use delivery_core::transport::TransportError;

use crate::lock::lock;
use crate::partition::{Log, Partition};

/// The commit book: the watermark of every assigned partition, and which assignment each belongs
/// to. Offsets are committed only here (`commit_owed`), never past a unit that is not final.
pub(super) struct Book {
    pub(super) state: Mutex<BookState>,
    /// One commit at a time, so a revocation's commit and the periodic one do not cross.
    pub(super) committing: Mutex<()>,
    pub(super) topic: Arc<str>,
    pub(super) retry_topic: Arc<str>,
    /// The crash-loop count's records, and the producer that writes them.
    pub(super) attempts: crate::attempts::Attempts,
    pub(super) producer: rdkafka::producer::FutureProducer,
    /// Woken when a unit handed out alone (`BookState::alone`) is final.
    pub(super) alone_done: tokio::sync::Notify,
}

#[derive(Default)]
pub(super) struct BookState {
    pub(super) watermarks: Watermarks<Partition>,
    /// The current assignment of each partition with a watermark. A handle of an earlier
    /// assignment (revoked since) finishes nothing: its unit is the new owner's.
    pub(super) generations: HashMap<Partition, u64>,
    pub(super) next_generation: u64,
    /// The unit handed out alone of each partition read one unit at a time after a crash (see
    /// the module docs): the next is handed out once it is final.
    pub(super) alone: HashMap<Partition, u64>,
}

/// What a revocation leaves to do: the runs to record as ended cleanly, and the offsets to
/// commit.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Revoked {
    pub(super) clean: Vec<Partition>,
    pub(super) owed: Vec<(Partition, u64)>,
}

impl BookState {
    /// Forgets `partitions` (revoked): their generations, watermarks and units handed out alone.
    /// Only those with no unit pending end cleanly.
    pub(super) fn revoke(&mut self, partitions: impl IntoIterator<Item = Partition>) -> Revoked {
        let mut revoked = Revoked::default();
        for partition in partitions {
            // A revocation is no crash, but a unit still running may yet kill its consumer: the
            // run ends cleanly only with nothing pending, else the last delivery recorded stays
            // and the next owner counts the unit again (a slow poison unit under rebalances
            // still reaches the bound).
            let nothing_pending = self
                .watermarks
                .get(&partition)
                .is_none_or(|watermark| watermark.pending() == 0);
            if self.generations.remove(&partition).is_some() && nothing_pending {
                revoked.clean.push(partition);
            }
            self.alone.remove(&partition);
            if let Some(offset) = self.watermarks.revoke(&partition) {
                revoked.owed.push((partition, offset));
            }
        }
        revoked
    }
}

impl Book {
    pub(super) fn log(&self, topic: &str) -> Option<Log> {
        if topic == &*self.topic {
            Some(Log::Source)
        } else if topic == &*self.retry_topic {
            Some(Log::Retry)
        } else {
            None
        }
    }

    pub(super) fn topic(&self, log: Log) -> &str {
        match log {
            Log::Source => &self.topic,
            Log::Retry => &self.retry_topic,
        }
    }

    /// A unit at `offset` of `partition` was received: its generation, or `None` if the
    /// partition already had this offset (a re-fetch): then the earlier delivery holds the
    /// watermark and this one finishes nothing.
    pub(super) fn track(&self, partition: Partition, offset: u64) -> Option<u64> {
        let mut state = lock(&self.state);
        match state.watermarks.track(partition, offset) {
            Ok(()) => {}
            Err(error) => {
                tracing::warn!(?partition, offset, %error, "a unit read again without a revocation; handled, not tracked");
                return None;
            }
        }
        let next = state.next_generation;
        let generation = *state.generations.entry(partition).or_insert(next);
        if generation == next {
            state.next_generation += 1;
        }
        Some(generation)
    }

    pub(super) fn is_current(&self, partition: Partition, generation: u64) -> bool {
        lock(&self.state).generations.get(&partition) == Some(&generation)
    }

    /// The retry topic's partitions in `list`.
    pub(super) fn retry_partitions(&self, list: &TopicPartitionList) -> TopicPartitionList {
        let mut retry = TopicPartitionList::new();
        for element in list.elements_for_topic(&self.retry_topic) {
            retry.add_partition(&self.retry_topic, element.partition());
        }
        retry
    }

    /// The disposition of the unit at `offset` is final.
    pub(super) fn finish(&self, partition: Partition, offset: u64, generation: u64) {
        let mut state = lock(&self.state);
        if state.generations.get(&partition) != Some(&generation) {
            tracing::debug!(
                ?partition,
                offset,
                "settled after its partition was revoked; the new owner reads it again"
            );
            return;
        }
        if let Err(error) = state.watermarks.finish(&partition, offset) {
            // Only a bug could get here (each handle finishes once); never commit on a guess.
            debug_assert!(
                matches!(error, OffsetError::NotAssigned { .. }),
                "watermark refused a finish: {error}"
            );
            tracing::error!(?partition, offset, %error, "the watermark refused a finished unit");
        }
        if state.alone.get(&partition) == Some(&offset) {
            state.alone.remove(&partition);
            drop(state);
            self.alone_done.notify_one();
        }
    }

    /// Records that the runs of `partitions` ended cleanly, for those still assigned with every
    /// unit they tracked final (call after committing).
    pub(super) fn end_cleanly(&self, partitions: impl IntoIterator<Item = Partition>) {
        let clean: Vec<Partition> = {
            let state = lock(&self.state);
            partitions
                .into_iter()
                .filter(|partition| {
                    state.generations.contains_key(partition)
                        && state
                            .watermarks
                            .get(partition)
                            .is_none_or(|w| w.pending() == 0 && w.uncommitted().is_none())
                })
                .collect()
        };
        self.attempts.ended_cleanly(&self.producer, &clean);
    }

    /// Whether a unit of `partition` is handed out alone and not final yet.
    pub(super) fn alone_out(&self, partition: Partition) -> bool {
        lock(&self.state).alone.contains_key(&partition)
    }

    /// The unit at `offset` of `partition` is handed out alone.
    pub(super) fn hand_out_alone(&self, partition: Partition, offset: u64) {
        lock(&self.state).alone.insert(partition, offset);
    }

    /// Commits, synchronously, `partition`'s watermark if it advanced since its last commit.
    pub(super) fn commit_owed_of<C: Consumer<Context>>(
        &self,
        consumer: &C,
        partition: Partition,
    ) -> Result<(), TransportError> {
        let _one = lock(&self.committing);
        let owed: Vec<(Partition, u64)> = lock(&self.state)
            .watermarks
            .uncommitted()
            .into_iter()
            .filter(|(p, _)| *p == partition)
            .collect();
        self.commit(consumer, &owed)?;
        let mut state = lock(&self.state);
        for (partition, offset) in owed {
            state.watermarks.committed(&partition, offset);
        }
        Ok(())
    }

    /// Commits, synchronously, every partition whose watermark advanced since its last commit.
    pub(super) fn commit_owed<C: Consumer<Context>>(
        &self,
        consumer: &C,
    ) -> Result<(), TransportError> {
        let _one = lock(&self.committing);
        let owed = lock(&self.state).watermarks.uncommitted();
        self.commit(consumer, &owed)?;
        let mut state = lock(&self.state);
        for (partition, offset) in owed {
            state.watermarks.committed(&partition, offset);
        }
        Ok(())
    }

    pub(super) fn commit<C: Consumer<Context>>(
        &self,
        consumer: &C,
        owed: &[(Partition, u64)],
    ) -> Result<(), TransportError> {
        if owed.is_empty() {
            return Ok(());
        }
        let mut list = TopicPartitionList::with_capacity(owed.len());
        for &((log, partition), offset) in owed {
            let offset = Offset::Offset(i64::try_from(offset).unwrap_or(i64::MAX));
            list.add_partition_offset(self.topic(log), partition, offset)
                .map_err(|e| crate::error::RDKAFKA.error("listing offsets to commit", e))?;
        }
        consumer
            .commit(&list, CommitMode::Sync)
            .map_err(|e| crate::error::RDKAFKA.error("committing offsets", e))
    }

    /// A rebalance takes `list` away: commit what is final for each partition, then forget it.
    pub(super) fn revoke<C: Consumer<Context>>(&self, consumer: &C, list: &TopicPartitionList) {
        let _one = lock(&self.committing);
        let partitions: Vec<Partition> = list
            .elements()
            .iter()
            .filter_map(|element| Some((self.log(element.topic())?, element.partition())))
            .collect();
        let Revoked { clean, owed } = lock(&self.state).revoke(partitions);
        // Whether or not its commit went through: the new owner reads again what was not final.
        self.attempts.ended_cleanly(&self.producer, &clean);
        match self.commit(consumer, &owed) {
            Ok(()) => {
                tracing::info!(
                    revoked = list.count(),
                    committed = owed.len(),
                    "partitions revoked"
                )
            }
            // The new owner starts from the last commit: units are read again, never skipped.
            Err(error) => tracing::warn!(%error, "committing revoked partitions failed"),
        }
    }
}

/// The consumer's context: commits on revocation, and keeps newly assigned retry-topic partitions
/// paused or running as the source wants them.
///
/// Its callbacks run inside the consumer's poll, so within [`KafkaSource::receive`](crate::source::KafkaSource) (or when the
/// consumer is dropped), never concurrently with the source's own pausing and resuming.
pub(crate) struct Context {
    pub(crate) book: Arc<Book>,
    /// The source holds its retry-topic partitions paused (it holds `max_waiting` units).
    pub(crate) retry_paused: AtomicBool,
    /// Partitions were revoked since the source last looked: units it holds of them are stale.
    pub(crate) revoked: AtomicBool,
    /// The keeper holds every assigned partition paused (see [`crate::keeper`]).
    pub(super) held: AtomicBool,
}

impl ClientContext for Context {}

impl ConsumerContext for Context {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Revoke(list) => {
                self.book.revoke(consumer, list);
                self.revoked.store(true, Ordering::Relaxed);
            }
            Rebalance::Assign(list) => {
                tracing::info!(assigned = list.count(), "partitions assigned")
            }
            Rebalance::Error(error) => tracing::warn!(%error, "rebalance failed"),
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let Rebalance::Assign(list) = rebalance else {
            return;
        };
        // Assigned while the keeper holds every partition paused: paused before it is fetched,
        // and resumed with the rest when the source takes the poll back.
        if self.held.load(Ordering::Relaxed) {
            if let Err(error) = consumer.pause(list) {
                tracing::warn!(%error, "pausing newly assigned partitions failed");
            }
            return;
        }
        // A partition assigned while the source holds back the retry topic is paused before it is
        // fetched. Every other one is resumed: librdkafka keeps an application's pause on a
        // partition across its revocation and a later assignment (the keeper's, the retry
        // topic's, a partition read alone), and nothing else would lift it.
        let paused = self.retry_paused.load(Ordering::Relaxed);
        let retry = self.book.retry_partitions(list);
        if paused
            && retry.count() > 0
            && let Err(error) = consumer.pause(&retry)
        {
            tracing::warn!(%error, "pausing newly assigned retry partitions failed");
        }
        let mut running = rdkafka::TopicPartitionList::new();
        for element in list.elements() {
            if !(paused && element.topic() == &*self.book.retry_topic) {
                running.add_partition(element.topic(), element.partition());
            }
        }
        if let Err(error) = consumer.resume(&running) {
            tracing::warn!(%error, "resuming newly assigned partitions failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A revocation while a unit of a partition is still running is no clean end for that
    /// partition: the unit may yet kill the process, and a clean end would reset its crash-loop
    /// count (a slow poison unit under rebalances would loop forever). A partition whose units
    /// are all final ends cleanly.
    #[test]
    fn a_revocation_ends_cleanly_only_the_partitions_with_nothing_pending() {
        let running = (Log::Source, 0);
        let settled = (Log::Source, 1);
        let retry_running = (Log::Retry, 0);
        let mut state = BookState::default();
        for partition in [running, settled, retry_running] {
            state.watermarks.track(partition, 7).unwrap();
            state.generations.insert(partition, 1);
        }
        state.watermarks.track(running, 8).unwrap();
        state.watermarks.finish(&running, 7).unwrap(); // 8 still runs
        state.watermarks.finish(&settled, 7).unwrap();
        state.alone.insert(retry_running, 7); // handed out alone after a crash, still running

        let revoked = state.revoke([running, settled, retry_running]);

        assert_eq!(
            revoked.clean,
            [settled],
            "only the partition with nothing pending ends cleanly"
        );
        assert_eq!(revoked.owed, [(running, 8), (settled, 8)]);
        assert!(state.generations.is_empty() && state.alone.is_empty());
        assert!(state.watermarks.get(&running).is_none());
    }
}
