//! The commit watermark of a stream read by offset (a Kafka partition): which offset may be
//! committed while units of one partition are handled concurrently.
//!
//! An offset commit confirms every unit before it, so it is rule 1's acknowledgement for all of
//! them at once: **no offset is committed past a unit whose disposition is not final.** A unit's
//! disposition is final once it is acknowledged, or once it has been moved to the dead letter or
//! the retry destination and the broker has confirmed that write (rule 2). Until then it holds its
//! partition's watermark, however many units after it have finished; other partitions keep
//! flowing, each with its own [`Watermark`].
//!
//! Offsets follow Kafka's convention: the offset committed is the *next one to read*, one past the
//! last unit whose disposition is final, so a consumer restarted from it receives every unit that
//! was not final again (and the idempotent handler makes the ones it already applied harmless,
//! rule 3).
//!
//! The same rule holds for any acknowledgement that confirms every unit before it: RabbitMQ's
//! coalesced acks (`basic.ack` with `multiple`) keep one [`Watermark`] over each channel's
//! delivery tags.
//!
//! Transport-agnostic: nothing here talks to a broker. [`Watermarks`] keeps one watermark per
//! partition, forgets a partition on [`revoke`](Watermarks::revoke), and hands out what to commit
//! for all partitions in one batch with [`uncommitted`](Watermarks::uncommitted).
//!
//! ```
//! use delivery_core::offset::Watermark;
//!
//! let mut watermark = Watermark::new();
//! for offset in [10, 11, 12] {
//!     watermark.track(offset)?; // received, handled concurrently
//! }
//! watermark.finish(12)?; // acked first, but 10 and 11 are not final yet
//! assert_eq!(watermark.committable(), None);
//! watermark.finish(10)?;
//! assert_eq!(watermark.committable(), Some(11)); // 11 holds the watermark
//! watermark.finish(11)?;
//! assert_eq!(watermark.committable(), Some(13)); // past every unit: the next offset to read
//! # Ok::<(), delivery_core::offset::OffsetError>(())
//! ```

use std::collections::{BTreeMap, VecDeque};

/// Why a [`Watermark`] refused an offset. The offsets come from outside (the broker, the
/// runtime), so a wrong one is reported, never a panic.
///
/// ```
/// use delivery_core::offset::{OffsetError, Watermark};
///
/// let mut watermark = Watermark::new();
/// watermark.track(7)?;
/// assert_eq!(watermark.finish(8), Err(OffsetError::NotTracked { offset: 8 }));
/// watermark.finish(7)?;
/// assert_eq!(watermark.finish(7), Err(OffsetError::NotTracked { offset: 7 }));
/// assert_eq!(watermark.track(7), Err(OffsetError::NotIncreasing { offset: 7, last: 7 }));
/// # Ok::<(), OffsetError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OffsetError {
    /// [`track`](Watermark::track) was given an offset at or below the last one tracked: a
    /// partition delivers its units in increasing offset order, so this is a new assignment that
    /// needs a new watermark (after [`Watermarks::revoke`]), not more of the same one.
    #[error("offset {offset} tracked after offset {last}: offsets of a partition must increase")]
    NotIncreasing {
        /// The offset refused.
        offset: u64,
        /// The last offset tracked.
        last: u64,
    },
    /// [`finish`](Watermark::finish) was given an offset that is not in flight: never tracked (a
    /// gap), or already final and passed by the watermark.
    #[error("offset {offset} is not in flight")]
    NotTracked {
        /// The offset refused.
        offset: u64,
    },
    /// [`finish`](Watermark::finish) was given an offset whose disposition is already final but
    /// that an earlier unit still holds behind the watermark: finished twice. (Behind a unit
    /// held long, final units are kept as one run: an offset inside such a run that was never
    /// tracked is refused this way too.)
    #[error("the disposition of offset {offset} is already final")]
    AlreadyFinal {
        /// The offset refused.
        offset: u64,
    },
    /// [`Watermarks::finish`] named a partition with no watermark: never assigned, or revoked
    /// since (its units are delivered again to the partition's new owner; do not commit them).
    #[error("offset {offset} belongs to a partition not assigned (or revoked)")]
    NotAssigned {
        /// The offset refused.
        offset: u64,
    },
}

/// Final entries a [`Watermark`] holds beyond three per unit not final before it collapses them.
const COMPACT_SLACK: usize = 64;

/// The state of one entry of a [`Watermark`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    /// A tracked unit whose disposition is not final.
    Open,
    /// A tracked unit whose disposition is final, held behind one that is not.
    Final,
    /// Final, and standing for every offset since the entry before it: the final units
    /// collapsed into it (see [`Watermark::compact`]).
    Run,
}

/// The commit watermark of one partition: the offsets of units in flight, and the offset that
/// may be committed — one past the contiguous run of units whose disposition is final.
///
/// Only tracked offsets hold the watermark: a gap between two tracked offsets (a compacted topic,
/// a transaction marker) is not a unit and is passed over. [`track`](Self::track) and the advance
/// of the watermark are amortized O(1), [`finish`](Self::finish) is O(log n) in the units in
/// flight. Memory follows the units that are not final, not the units that finished behind them:
/// a run of final units held behind one that is not (a hung handler, a unit failing slowly) is
/// kept as one entry, so a million units finished behind one stuck unit hold a few entries, not
/// a million.
///
/// ```
/// use delivery_core::offset::Watermark;
///
/// let mut watermark = Watermark::new();
/// watermark.track(4)?;
/// watermark.track(9)?; // 5..=8 compacted away: not units, they hold nothing
/// watermark.finish(4)?;
/// watermark.finish(9)?;
/// assert_eq!(watermark.committable(), Some(10));
/// assert_eq!(watermark.pending(), 0);
/// # Ok::<(), delivery_core::offset::OffsetError>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct Watermark {
    /// Tracked offsets not yet passed by the watermark, increasing, each with its state. The
    /// front is never final (it would have been passed). Each unit not final is one entry; the
    /// final ones between two of them are collapsed into one [`Entry::Run`] once they pile up
    /// (see [`COMPACT_SLACK`]).
    in_flight: VecDeque<(u64, Entry)>,
    /// Tracked units whose disposition is not final: the entries [`Entry::Open`].
    pending: usize,
    /// The last offset tracked, so offsets only increase.
    last_tracked: Option<u64>,
    /// One past the last unit the watermark passed (Kafka's convention).
    committable: Option<u64>,
    /// What the broker confirmed as committed, so a batch holds only what advanced since.
    committed: Option<u64>,
}

impl Watermark {
    /// An empty watermark: nothing tracked, nothing to commit.
    ///
    /// ```
    /// use delivery_core::offset::Watermark;
    ///
    /// let watermark = Watermark::new();
    /// assert_eq!(watermark.committable(), None);
    /// assert_eq!(watermark.pending(), 0);
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// A unit at `offset` was received. Offsets must increase, gaps allowed; an offset at or
    /// below the last one tracked is refused with [`OffsetError::NotIncreasing`].
    ///
    /// ```
    /// use delivery_core::offset::Watermark;
    ///
    /// let mut watermark = Watermark::new();
    /// watermark.track(3)?;
    /// assert_eq!(watermark.pending(), 1);
    /// assert!(watermark.track(2).is_err());
    /// # Ok::<(), delivery_core::offset::OffsetError>(())
    /// ```
    pub fn track(&mut self, offset: u64) -> Result<(), OffsetError> {
        if let Some(last) = self.last_tracked
            && offset <= last
        {
            return Err(OffsetError::NotIncreasing { offset, last });
        }
        self.last_tracked = Some(offset);
        self.in_flight.push_back((offset, Entry::Open));
        self.pending += 1;
        Ok(())
    }

    /// The disposition of the unit at `offset` is final: acked, or moved to the dead letter or
    /// the retry destination with the broker's confirmation. Never call it for a unit merely
    /// failed — a failed unit holds the watermark until it is moved (rule 1).
    ///
    /// An offset not in flight is refused with [`OffsetError::NotTracked`], one finished twice
    /// with [`OffsetError::AlreadyFinal`] (or `NotTracked` once the watermark passed it).
    ///
    /// ```
    /// use delivery_core::offset::Watermark;
    ///
    /// let mut watermark = Watermark::new();
    /// watermark.track(0)?;
    /// watermark.finish(0)?;
    /// assert_eq!(watermark.committable(), Some(1));
    /// # Ok::<(), delivery_core::offset::OffsetError>(())
    /// ```
    pub fn finish(&mut self, offset: u64) -> Result<(), OffsetError> {
        let at = match self
            .in_flight
            .binary_search_by_key(&offset, |&(tracked, _)| tracked)
        {
            Ok(at) => at,
            // Between two entries: inside the run of final units the later one stands for, or a
            // gap (or below the front: passed already).
            Err(at) => {
                return Err(match self.in_flight.get(at) {
                    Some((_, Entry::Run)) => OffsetError::AlreadyFinal { offset },
                    _ => OffsetError::NotTracked { offset },
                });
            }
        };
        let entry = &mut self.in_flight[at].1;
        if *entry != Entry::Open {
            return Err(OffsetError::AlreadyFinal { offset });
        }
        *entry = Entry::Final;
        self.pending -= 1;
        if at == 0 {
            // Pass the contiguous run of final units; each is popped once (amortized O(1)).
            while let Some(&(passed, Entry::Final | Entry::Run)) = self.in_flight.front() {
                self.in_flight.pop_front();
                self.committable = Some(passed.saturating_add(1)); // Kafka offsets stay below i64::MAX
            }
        } else if self.in_flight.len() > 4 * self.pending + COMPACT_SLACK {
            self.compact();
        }
        Ok(())
    }

    /// Collapses each run of final entries into its last one, an [`Entry::Run`]: afterwards every
    /// final entry is followed by one not final (or is the last), so at most as many final
    /// entries are held as units not final. It runs once the final entries outnumber three times
    /// the units not final (and [`COMPACT_SLACK`]): its O(entries) cost is paid by the finishes
    /// since the last one, amortized O(1) each. Offsets it drops are refused as
    /// [`AlreadyFinal`](OffsetError::AlreadyFinal) by the run that stands for them.
    #[cold]
    fn compact(&mut self) {
        let entries = &mut self.in_flight;
        let mut kept = 0;
        let mut absorbed = false;
        for read in 0..entries.len() {
            let (offset, entry) = entries[read];
            let next_final = entries
                .get(read + 1)
                .is_some_and(|&(_, next)| next != Entry::Open);
            if entry != Entry::Open && next_final {
                absorbed = true;
                continue;
            }
            entries[kept] = (offset, if absorbed { Entry::Run } else { entry });
            absorbed = false;
            kept += 1;
        }
        entries.truncate(kept);
        // Give back what a pile of finished entries grew.
        if entries.capacity() > 4 * kept + 2 * COMPACT_SLACK {
            entries.shrink_to(2 * kept + COMPACT_SLACK);
        }
    }

    /// The offset that may be committed, in Kafka's convention: one past the last unit of the
    /// contiguous run whose disposition is final. `None` until the first tracked unit is final.
    /// It never passes a tracked unit that is not final, and it never goes back.
    ///
    /// ```
    /// use delivery_core::offset::Watermark;
    ///
    /// let mut watermark = Watermark::new();
    /// for offset in 0..3 {
    ///     watermark.track(offset)?;
    /// }
    /// watermark.finish(0)?;
    /// watermark.finish(2)?; // offset 1 failed: it holds the watermark
    /// assert_eq!(watermark.committable(), Some(1));
    /// watermark.finish(1)?; // dead-lettered, confirmed
    /// assert_eq!(watermark.committable(), Some(3));
    /// # Ok::<(), delivery_core::offset::OffsetError>(())
    /// ```
    pub fn committable(&self) -> Option<u64> {
        self.committable
    }

    /// How many tracked units have no final disposition yet.
    ///
    /// ```
    /// use delivery_core::offset::Watermark;
    ///
    /// let mut watermark = Watermark::new();
    /// watermark.track(1)?;
    /// watermark.track(2)?;
    /// watermark.finish(2)?;
    /// assert_eq!(watermark.pending(), 1);
    /// # Ok::<(), delivery_core::offset::OffsetError>(())
    /// ```
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// How many entries the watermark has room for in memory, its footprint in entries of 16
    /// bytes (not part of the API: for the tests that bound it).
    #[doc(hidden)]
    pub fn held(&self) -> usize {
        self.in_flight.capacity()
    }

    /// The committable offset if it advanced past the last one marked
    /// [`committed`](Self::committed): what a batched commit still owes for this partition.
    ///
    /// ```
    /// use delivery_core::offset::Watermark;
    ///
    /// let mut watermark = Watermark::new();
    /// watermark.track(0)?;
    /// watermark.finish(0)?;
    /// assert_eq!(watermark.uncommitted(), Some(1));
    /// watermark.committed(1);
    /// assert_eq!(watermark.uncommitted(), None);
    /// # Ok::<(), delivery_core::offset::OffsetError>(())
    /// ```
    pub fn uncommitted(&self) -> Option<u64> {
        match (self.committable, self.committed) {
            (Some(next), Some(done)) if next <= done => None,
            (next, _) => next,
        }
    }

    /// The broker confirmed a commit of `offset`. Call it only after the commit succeeded: a
    /// failed commit leaves the offset [`uncommitted`](Self::uncommitted), so the next batch
    /// carries it again. An offset below one already marked is ignored (commits only advance).
    ///
    /// ```
    /// use delivery_core::offset::Watermark;
    ///
    /// let mut watermark = Watermark::new();
    /// watermark.track(5)?;
    /// watermark.finish(5)?;
    /// watermark.committed(6);
    /// watermark.committed(2); // a late confirmation of an older commit
    /// assert_eq!(watermark.uncommitted(), None);
    /// # Ok::<(), delivery_core::offset::OffsetError>(())
    /// ```
    pub fn committed(&mut self, offset: u64) {
        self.committed = Some(self.committed.map_or(offset, |done| done.max(offset)));
    }
}

/// One [`Watermark`] per partition, keyed by `P`: a partition number, or `(topic, partition)`
/// when one consumer reads several topics (a source topic and its retry topic).
///
/// A failed unit holds only its own partition. Commits are batched: [`uncommitted`](Self::uncommitted)
/// lists every partition whose watermark advanced since its last confirmed commit, and
/// [`committed`](Self::committed) records the broker's confirmation.
///
/// ```
/// use delivery_core::offset::Watermarks;
///
/// let mut watermarks = Watermarks::new();
/// watermarks.track(0, 100)?;
/// watermarks.track(1, 200)?;
/// watermarks.track(1, 201)?;
/// watermarks.finish(&1, 200)?;
/// watermarks.finish(&1, 201)?; // partition 0's unit 100 failed: it holds only partition 0
/// let batch = watermarks.uncommitted();
/// assert_eq!(batch, vec![(1, 202)]);
/// for (partition, offset) in &batch {
///     // ... commit the batch in one round trip; once the broker confirms:
///     watermarks.committed(partition, *offset);
/// }
/// assert!(watermarks.uncommitted().is_empty());
/// # Ok::<(), delivery_core::offset::OffsetError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Watermarks<P = i32> {
    partitions: BTreeMap<P, Watermark>,
}

impl<P> Default for Watermarks<P> {
    fn default() -> Self {
        Self {
            partitions: BTreeMap::new(),
        }
    }
}

impl<P: Ord + Clone> Watermarks<P> {
    /// No partitions.
    ///
    /// ```
    /// use delivery_core::offset::Watermarks;
    ///
    /// let watermarks: Watermarks = Watermarks::new();
    /// assert_eq!(watermarks.pending(), 0);
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// A unit at `offset` of `partition` was received; the partition's watermark is created on
    /// its first unit. See [`Watermark::track`].
    ///
    /// ```
    /// use delivery_core::offset::Watermarks;
    ///
    /// let mut watermarks = Watermarks::new();
    /// watermarks.track(("orders", 3), 41)?;
    /// assert_eq!(watermarks.get(&("orders", 3)).map(|w| w.pending()), Some(1));
    /// # Ok::<(), delivery_core::offset::OffsetError>(())
    /// ```
    pub fn track(&mut self, partition: P, offset: u64) -> Result<(), OffsetError> {
        self.partitions.entry(partition).or_default().track(offset)
    }

    /// The disposition of the unit at `offset` of `partition` is final. A partition without a
    /// watermark — revoked while the unit was in flight — is refused with
    /// [`OffsetError::NotAssigned`]: its unit is the new owner's now. See [`Watermark::finish`].
    ///
    /// ```
    /// use delivery_core::offset::{OffsetError, Watermarks};
    ///
    /// let mut watermarks = Watermarks::new();
    /// watermarks.track(2, 7)?;
    /// watermarks.revoke(&2);
    /// assert_eq!(watermarks.finish(&2, 7), Err(OffsetError::NotAssigned { offset: 7 }));
    /// # Ok::<(), OffsetError>(())
    /// ```
    pub fn finish(&mut self, partition: &P, offset: u64) -> Result<(), OffsetError> {
        self.partitions
            .get_mut(partition)
            .ok_or(OffsetError::NotAssigned { offset })?
            .finish(offset)
    }

    /// The watermark of `partition`, if it is assigned and has received a unit.
    ///
    /// ```
    /// use delivery_core::offset::Watermarks;
    ///
    /// let mut watermarks = Watermarks::new();
    /// assert!(watermarks.get(&0).is_none());
    /// watermarks.track(0, 0)?;
    /// watermarks.finish(&0, 0)?;
    /// assert_eq!(watermarks.get(&0).and_then(|w| w.committable()), Some(1));
    /// # Ok::<(), delivery_core::offset::OffsetError>(())
    /// ```
    pub fn get(&self, partition: &P) -> Option<&Watermark> {
        self.partitions.get(partition)
    }

    /// A rebalance took `partition` away: its watermark is dropped, so its units still in flight
    /// are never committed (the new owner receives them again from the committed offset). Returns
    /// what is still owed to the broker for it — the [`uncommitted`](Watermark::uncommitted)
    /// offset, every unit below it final — to commit before the revocation completes.
    ///
    /// ```
    /// use delivery_core::offset::Watermarks;
    ///
    /// let mut watermarks = Watermarks::new();
    /// watermarks.track(0, 10)?;
    /// watermarks.track(0, 11)?;
    /// watermarks.finish(&0, 10)?; // 11 still in flight
    /// assert_eq!(watermarks.revoke(&0), Some(11)); // commit 11 now; unit 11 goes to the new owner
    /// assert!(watermarks.uncommitted().is_empty());
    /// # Ok::<(), delivery_core::offset::OffsetError>(())
    /// ```
    pub fn revoke(&mut self, partition: &P) -> Option<u64> {
        self.partitions
            .remove(partition)
            .and_then(|watermark| watermark.uncommitted())
    }

    /// Every partition whose watermark advanced since its last confirmed commit, with the offset
    /// to commit, ordered by partition: one batch, one round trip. Nothing is marked; call
    /// [`committed`](Self::committed) once the broker confirms, so a failed commit is retried by
    /// the next batch.
    ///
    /// ```
    /// use delivery_core::offset::Watermarks;
    ///
    /// let mut watermarks = Watermarks::new();
    /// for partition in [2, 0] {
    ///     watermarks.track(partition, 5)?;
    ///     watermarks.finish(&partition, 5)?;
    /// }
    /// assert_eq!(watermarks.uncommitted(), vec![(0, 6), (2, 6)]);
    /// # Ok::<(), delivery_core::offset::OffsetError>(())
    /// ```
    pub fn uncommitted(&self) -> Vec<(P, u64)> {
        self.partitions
            .iter()
            .filter_map(|(partition, watermark)| {
                watermark
                    .uncommitted()
                    .map(|offset| (partition.clone(), offset))
            })
            .collect()
    }

    /// The broker confirmed a commit of `offset` for `partition`. A partition revoked meanwhile
    /// is ignored. See [`Watermark::committed`].
    ///
    /// ```
    /// use delivery_core::offset::Watermarks;
    ///
    /// let mut watermarks = Watermarks::new();
    /// watermarks.track(1, 0)?;
    /// watermarks.finish(&1, 0)?;
    /// watermarks.committed(&1, 1);
    /// watermarks.committed(&9, 1); // not assigned: nothing to record
    /// assert!(watermarks.uncommitted().is_empty());
    /// # Ok::<(), delivery_core::offset::OffsetError>(())
    /// ```
    pub fn committed(&mut self, partition: &P, offset: u64) {
        if let Some(watermark) = self.partitions.get_mut(partition) {
            watermark.committed(offset);
        }
    }

    /// Units without a final disposition, over all partitions.
    ///
    /// ```
    /// use delivery_core::offset::Watermarks;
    ///
    /// let mut watermarks = Watermarks::new();
    /// watermarks.track(0, 1)?;
    /// watermarks.track(1, 1)?;
    /// assert_eq!(watermarks.pending(), 2);
    /// # Ok::<(), delivery_core::offset::OffsetError>(())
    /// ```
    pub fn pending(&self) -> usize {
        self.partitions.values().map(Watermark::pending).sum()
    }
}
