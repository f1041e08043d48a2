//! The broker's side of one log: its partitions and retry partitions, and each consumer group's
//! committed offsets and members. Everything here runs under the broker's lock.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::config::{LogConfig, LogPosition};
use super::partitioner::partition_for;
use crate::offset::{OffsetError, Watermark, Watermarks};
use crate::unit::{DeliveryCount, Unit, UnitId};

/// The topic itself, or the retry log beside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Lane {
    Main,
    Retry,
}

/// One partition of one lane: what a watermark and a committed offset belong to.
pub(super) type Key = (Lane, u32);

/// A record of the log. The log keeps no delivery count: the count in `unit` is the one the
/// record carries (1 when appended, `n + 1` when re-appended to the retry log after delivery `n`).
#[derive(Clone, Debug)]
pub(super) struct Record {
    pub(super) unit: Unit,
    /// The explicit key it was appended under; `None`: the unit id.
    pub(super) key: Option<Bytes>,
    /// Not delivered before this (retry records only).
    pub(super) due: Option<Instant>,
}

/// A unit handed to a member: what its handle needs to settle it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Delivered {
    pub(super) key: Key,
    pub(super) offset: u64,
    /// The assignment it was delivered under: a revoked or rewound partition gets a new one.
    pub(super) epoch: u64,
    pub(super) count: DeliveryCount,
}

/// What a member's next receive finds.
pub(super) enum Next {
    Deliver(Unit, Delivered),
    /// Nothing deliverable; a retry record becomes due at the instant given, if any.
    Wait(Option<Instant>),
    /// The member's watermark refused the offset: a bug, reported rather than panicked on.
    Broken(OffsetError),
}

/// Why a settle did not happen.
pub(super) enum SettleError {
    /// The member left the group, or the partition was reassigned or rewound since the delivery.
    NotOwned,
    Offset(OffsetError),
}

pub(crate) struct Log {
    pub(super) topic: Arc<str>,
    pub(super) config: LogConfig,
    main: Vec<Vec<Record>>,
    pub(super) retry: Vec<Vec<Record>>,
    groups: HashMap<Arc<str>, Group>,
    /// Explicit keys of dead-lettered units, so a redrive appends under the same key.
    pub(super) dead_keys: HashMap<UnitId, Bytes>,
    changed: Arc<Notify>,
    next_epoch: u64,
}

#[derive(Default)]
struct Group {
    offsets: BTreeMap<Key, GroupOffset>,
    members: BTreeMap<u64, Member>,
}

/// A group's offset of one partition, as the broker keeps it.
#[derive(Default)]
struct GroupOffset {
    /// The next offset to read (Kafka's convention); `None` until the group first commits.
    committed: Option<u64>,
    /// How often each offset at or past the committed one has been handed to a member of the
    /// group: the metadata a group keeps beside its offset, so a unit delivered again after a
    /// consumer went away (a crash, a rebalance) counts that delivery. Dropped once committed.
    handed_out: BTreeMap<u64, u32>,
}

impl GroupOffset {
    fn start(&self) -> u64 {
        self.committed.unwrap_or(0)
    }

    fn commit(&mut self, offset: u64) {
        if self.committed.is_some_and(|done| done >= offset) {
            return;
        }
        self.committed = Some(offset);
        self.handed_out = self.handed_out.split_off(&offset);
    }
}

/// A consumer in a group: its partitions and, per partition, its commit watermark.
#[derive(Default)]
struct Member {
    watermarks: Watermarks<Key>,
    assigned: BTreeMap<Key, Assignment>,
    /// Where the round over its partitions resumes, so none starves the others.
    cursor: usize,
}

#[derive(Clone, Copy)]
struct Assignment {
    /// The next offset to deliver.
    next: u64,
    epoch: u64,
}

/// Commits what `member`'s watermark of `key` owes to the group's offset.
fn commit(offsets: &mut BTreeMap<Key, GroupOffset>, member: &mut Member, key: Key) {
    if let Some(offset) = member.watermarks.get(&key).and_then(Watermark::uncommitted) {
        offsets.entry(key).or_default().commit(offset);
        member.watermarks.committed(&key, offset);
    }
}

impl Log {
    pub(super) fn new(topic: Arc<str>, config: LogConfig) -> Self {
        let partitions = config.partitions.get() as usize;
        Log {
            topic,
            main: vec![Vec::new(); partitions],
            retry: vec![Vec::new(); partitions],
            config,
            groups: HashMap::new(),
            dead_keys: HashMap::new(),
            changed: Arc::new(Notify::new()),
            next_epoch: 0,
        }
    }

    pub(super) fn config(&self) -> &LogConfig {
        &self.config
    }

    pub(super) fn changed(&self) -> Arc<Notify> {
        self.changed.clone()
    }

    pub(super) fn lane(&self, lane: Lane) -> &Vec<Vec<Record>> {
        match lane {
            Lane::Main => &self.main,
            Lane::Retry => &self.retry,
        }
    }

    fn epoch(&mut self) -> u64 {
        self.next_epoch += 1;
        self.next_epoch
    }

    /// Appends `unit` afresh (a redrive, a `publish`), under the key it had when it was
    /// dead-lettered.
    pub(in crate::memory) fn put(&mut self, unit: Unit) {
        let key = self.dead_keys.remove(unit.id());
        self.append(key, unit);
    }

    /// Appends `unit` to the partition of `key` (the unit id without one), on its first delivery.
    pub(super) fn append(&mut self, key: Option<Bytes>, unit: Unit) -> LogPosition {
        let partition = {
            let bytes = key.as_deref().unwrap_or(unit.id().as_str().as_bytes());
            partition_for(bytes, self.config.partitions.get())
        };
        let records = &mut self.main[partition as usize];
        let offset = records.len() as u64;
        // The offset is the stamp (rule 4), unless the unit carries one already: its
        // producer's, or its first append's, kept through a dead letter and a redrive.
        let unit = match unit.stamp() {
            Some(_) => unit,
            None => unit.with_stamp(crate::unit::Stamp(offset)),
        };
        records.push(Record {
            unit: unit.with_delivery_count(DeliveryCount::FIRST),
            key,
            due: None,
        });
        self.changed.notify_waiters();
        LogPosition { partition, offset }
    }

    /// The offset the next unit appended to `partition` gets.
    pub(super) fn end_offset(&self, partition: u32) -> Option<u64> {
        self.main.get(partition as usize).map(|r| r.len() as u64)
    }

    pub(super) fn committed(&self, group: &str, key: Key) -> Option<u64> {
        self.groups.get(group)?.offsets.get(&key)?.committed
    }

    /// Whether `group` has committed every unit of the log and of its retry log.
    pub(super) fn caught_up(&self, group: &str) -> bool {
        [Lane::Main, Lane::Retry].into_iter().all(|lane| {
            self.lane(lane).iter().enumerate().all(|(p, records)| {
                let committed = self.committed(group, (lane, p as u32)).unwrap_or(0);
                committed >= records.len() as u64
            })
        })
    }

    /// The partitions `member` of `group` reads.
    pub(super) fn assignment(&self, group: &str, member: u64) -> Vec<u32> {
        let Some(member) = self.groups.get(group).and_then(|g| g.members.get(&member)) else {
            return Vec::new();
        };
        let partitions: BTreeSet<u32> = member.assigned.keys().map(|&(_, p)| p).collect();
        partitions.into_iter().collect()
    }

    /// `member` joins `group`: the group's partitions are split again.
    pub(super) fn join(&mut self, group: &Arc<str>, member: u64) {
        self.groups
            .entry(group.clone())
            .or_default()
            .members
            .insert(member, Member::default());
        self.rebalance(group);
    }

    /// `member` leaves `group` (its source was dropped): what its watermarks passed is committed,
    /// its units in flight are not, and its partitions go to the other members, which read them
    /// from the committed offset.
    pub(super) fn leave(&mut self, group: &str, member: u64) {
        let Some(g) = self.groups.get_mut(group) else {
            return;
        };
        let Some(mut gone) = g.members.remove(&member) else {
            return;
        };
        let keys: Vec<Key> = gone.assigned.keys().copied().collect();
        for key in keys {
            commit(&mut g.offsets, &mut gone, key);
            gone.watermarks.revoke(&key);
        }
        self.rebalance(group);
    }

    /// Splits the partitions among the members: partition `p` goes to the `p mod n`th member in
    /// joining order, with its retry partition. Revocations first, so a new owner starts from an
    /// offset that includes what the previous one finished.
    fn rebalance(&mut self, group: &str) {
        let partitions = self.config.partitions.get();
        let Some(g) = self.groups.get_mut(group) else {
            return;
        };
        let members: Vec<u64> = g.members.keys().copied().collect();
        let owner = |p: u32| members[p as usize % members.len()];
        let mut changed = BTreeSet::new();
        for (&id, member) in g.members.iter_mut() {
            let revoked: Vec<Key> = member
                .assigned
                .keys()
                .copied()
                .filter(|&(_, p)| owner(p) != id)
                .collect();
            for key in revoked {
                commit(&mut g.offsets, member, key);
                member.watermarks.revoke(&key);
                member.assigned.remove(&key);
                changed.insert(id);
            }
        }
        for (&id, member) in g.members.iter_mut() {
            for p in (0..partitions).filter(|&p| owner(p) == id) {
                for lane in [Lane::Main, Lane::Retry] {
                    let key = (lane, p);
                    if member.assigned.contains_key(&key) {
                        continue;
                    }
                    self.next_epoch += 1;
                    let next = g.offsets.get(&key).map_or(0, GroupOffset::start);
                    member.assigned.insert(
                        key,
                        Assignment {
                            next,
                            epoch: self.next_epoch,
                        },
                    );
                    changed.insert(id);
                }
            }
        }
        for id in changed {
            let partitions: BTreeSet<u32> = g.members[&id].assigned.keys().map(|k| k.1).collect();
            tracing::info!(topic = &*self.topic, group, member = id, partitions = ?partitions,
                "partitions assigned");
        }
        self.changed.notify_waiters();
    }

    /// The next unit for `member`: the record at its position in the first of its partitions (in
    /// turn) that has one, a retry record only once it is due. Partitions deliver in offset
    /// order, so a retry record not yet due holds the records behind it, as a Kafka consumer
    /// pausing a retry topic's partition does.
    pub(super) fn next(&mut self, group: &str, member: u64, now: Instant) -> Next {
        let Log {
            main,
            retry,
            groups,
            ..
        } = self;
        let Some(g) = groups.get_mut(group) else {
            return Next::Wait(None);
        };
        let Some(m) = g.members.get_mut(&member) else {
            return Next::Wait(None);
        };
        let keys: Vec<(Key, Assignment)> = m.assigned.iter().map(|(k, a)| (*k, *a)).collect();
        let mut due_next: Option<Instant> = None;
        for i in 0..keys.len() {
            let turn = (m.cursor + i) % keys.len();
            let ((lane, partition), assignment) = keys[turn];
            let records = match lane {
                Lane::Main => &main[partition as usize],
                Lane::Retry => &retry[partition as usize],
            };
            let Some(record) = usize::try_from(assignment.next)
                .ok()
                .and_then(|at| records.get(at))
            else {
                continue;
            };
            if let Some(due) = record.due
                && due > now
            {
                due_next = Some(due_next.map_or(due, |d| d.min(due)));
                continue;
            }
            let key = (lane, partition);
            if let Err(error) = m.watermarks.track(key, assignment.next) {
                return Next::Broken(error);
            }
            m.cursor = (turn + 1) % keys.len();
            if let Some(a) = m.assigned.get_mut(&key) {
                a.next += 1;
            }
            let times = g
                .offsets
                .entry(key)
                .or_default()
                .handed_out
                .entry(assignment.next)
                .or_default();
            *times = times.saturating_add(1);
            let carried = record.unit.delivery_count().get();
            let count = DeliveryCount::new(carried.saturating_add(*times - 1));
            let unit = record.unit.clone().with_delivery_count(count);
            return Next::Deliver(
                unit,
                Delivered {
                    key,
                    offset: assignment.next,
                    epoch: assignment.epoch,
                    count,
                },
            );
        }
        Next::Wait(due_next)
    }

    /// Whether `member` still owns the partition of `delivered` under the same assignment.
    pub(super) fn owns(&self, group: &str, member: u64, delivered: &Delivered) -> bool {
        self.groups
            .get(group)
            .and_then(|g| g.members.get(&member))
            .and_then(|m| m.assigned.get(&delivered.key))
            .is_some_and(|a| a.epoch == delivered.epoch)
    }

    /// The disposition of `delivered` is final: finish it in the member's watermark and commit
    /// what the watermark passed.
    pub(super) fn finish(
        &mut self,
        group: &str,
        member: u64,
        delivered: &Delivered,
    ) -> Result<(), OffsetError> {
        let Some(g) = self.groups.get_mut(group) else {
            return Ok(());
        };
        let Some(m) = g.members.get_mut(&member) else {
            return Ok(());
        };
        m.watermarks.finish(&delivered.key, delivered.offset)?;
        commit(&mut g.offsets, m, delivered.key);
        self.changed.notify_waiters();
        Ok(())
    }

    /// A handle of `member` was dropped unsettled: nothing is committed past its unit. The member
    /// reads the partition again from the committed offset (a seek back, as a Kafka consumer
    /// does after a failure), under a new assignment, so the unit is delivered again.
    pub(super) fn rewind(&mut self, group: &str, member: u64, delivered: &Delivered) {
        if !self.owns(group, member, delivered) {
            return;
        }
        let epoch = self.epoch();
        let Some(g) = self.groups.get_mut(group) else {
            return;
        };
        let Some(m) = g.members.get_mut(&member) else {
            return;
        };
        commit(&mut g.offsets, m, delivered.key);
        m.watermarks.revoke(&delivered.key);
        let next = g.offsets.get(&delivered.key).map_or(0, GroupOffset::start);
        m.assigned.insert(delivered.key, Assignment { next, epoch });
        self.changed.notify_waiters();
    }
}
