//! The broker state's side of the logs: a log declared on first use, and the settles and dead
//! letters that touch both a log and its queues.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::config::LogConfig;
use super::state::{Delivered, Log, Record, SettleError};
use crate::disposition::{DeadLetterReason, ReasonKind};
use crate::memory::queue::Entry;
use crate::memory::shared::State;
use crate::unit::DeliveryCount;

impl State {
    /// The log `topic` (declared with the default configuration on first use).
    pub(super) fn log(&mut self, topic: &str) -> &mut Log {
        if !self.logs.contains_key(topic) {
            let config = LogConfig::default();
            let name: Arc<str> = topic.into();
            // The queue under the log's name is where the operator's dead-letter view finds the
            // dead letter's name, and where a redrive (or a `publish`) puts units for the log.
            self.queues
                .entry(name.clone())
                .or_insert_with(|| crate::memory::queue::Queue::new(name.clone(), config.queue()));
            self.logs.insert(name.clone(), Log::new(name, config));
        }
        self.logs.get_mut(topic).expect("declared above")
    }

    /// Puts an intact copy of `delivered` in the topic's dead letter with `reason`; its offset
    /// stays unfinished until the runtime acknowledges it.
    pub(super) fn copy_log_to_dead_letter(
        &mut self,
        topic: &str,
        group: &str,
        member: u64,
        delivered: &Delivered,
        reason: &DeadLetterReason,
    ) -> Result<(), SettleError> {
        let record = self.owned_record(topic, group, member, delivered)?;
        self.push_dead(topic, record, delivered.count, reason.clone());
        Ok(())
    }

    /// Settles `delivered` and finishes its offset: acknowledged when `returned_after` is `None`;
    /// otherwise re-appended to the retry log with its count + 1, due after the wait (past the
    /// declared bound it is dead-lettered instead, as the broker's bound). Both happen under the
    /// lock before the offset is final, so the unit is never in neither place.
    pub(super) fn settle_log(
        &mut self,
        topic: &str,
        group: &str,
        member: u64,
        delivered: &Delivered,
        returned_after: Option<Duration>,
    ) -> Result<(), SettleError> {
        let record = self.owned_record(topic, group, member, delivered)?;
        if let Some(after) = returned_after {
            let log = self.log(topic);
            let bound = log.config.max_deliveries;
            if delivered.count.get() >= bound.get() {
                let reason = DeadLetterReason::new(
                    ReasonKind::Exhausted,
                    format!(
                        "returned after delivery {} of {bound}: the log's delivery bound",
                        delivered.count
                    ),
                );
                self.push_dead(topic, record, delivered.count, reason);
            } else {
                let (_, partition) = delivered.key;
                let due = (!after.is_zero()).then(|| Instant::now() + after);
                log.retry[partition as usize].push(Record {
                    unit: record.unit.with_delivery_count(delivered.count.next()),
                    key: record.key,
                    due,
                });
            }
        }
        self.log(topic)
            .finish(group, member, delivered)
            .map_err(SettleError::Offset)
    }

    /// The record `delivered` points at, if its partition is still `member`'s.
    fn owned_record(
        &mut self,
        topic: &str,
        group: &str,
        member: u64,
        delivered: &Delivered,
    ) -> Result<Record, SettleError> {
        let log = self.log(topic);
        if !log.owns(group, member, delivered) {
            return Err(SettleError::NotOwned);
        }
        let (lane, partition) = delivered.key;
        usize::try_from(delivered.offset)
            .ok()
            .and_then(|at| log.lane(lane).get(partition as usize)?.get(at))
            .cloned()
            .ok_or(SettleError::NotOwned)
    }

    /// Moves `record`, intact, to the topic's dead letter.
    fn push_dead(
        &mut self,
        topic: &str,
        record: Record,
        count: DeliveryCount,
        reason: DeadLetterReason,
    ) {
        let log = self.log(topic);
        let topic: Arc<str> = log.topic.clone();
        if let Some(key) = record.key {
            log.dead_keys.insert(record.unit.id().clone(), key);
        }
        let entry = Entry {
            unit: record.unit.with_delivery_count(count),
            deliveries: count.get(),
            dead: None,
        }
        .into_dead(topic.clone(), reason);
        let dlq = self.dead_letter_queue(&topic);
        dlq.push_ready(entry);
        crate::dead_letter::depth::record(dlq.name(), dlq.depth() as u64);
    }
}
