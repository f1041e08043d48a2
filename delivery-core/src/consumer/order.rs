//! Per-key order under concurrency: where it is kept. Units with the same key run one at a time,
//! in arrival order, while units of other keys (and units without a key) run concurrently.
//!
//! The loop (`run.rs`) asks [`Lanes::admit`] for each unit it receives: a unit whose key has none
//! running runs now; one whose key has a unit running waits in its key's lane, holding its
//! delivery (unsettled, so the mechanism counts it in flight: a lane's waiting units count
//! against the consumer's concurrency, and on Kafka the commit watermark never passes them). When
//! a unit settles, [`Lanes::settled`] hands over its key's next waiting unit. At shutdown the
//! waiting units, never started, are released ([`Lanes::drain`]).
//!
//! A unit that fails and is returned to the mechanism lets its key's later units pass: it comes
//! back after its backoff, behind them. Where that order matters to the effect, rule 4's guard
//! (`store::postgres::advance`) keeps an older unit from undoing a newer one.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;

use crate::unit::Unit;

/// What orders a unit: its key, or `None` for a unit that runs unordered.
pub(crate) type KeyOf = Arc<dyn Fn(&Unit) -> Option<Bytes> + Send + Sync>;

/// The lanes of the keys with a unit running, each with the units waiting behind it.
pub(super) struct Lanes<L> {
    key_of: KeyOf,
    lanes: HashMap<Bytes, VecDeque<(Unit, L)>>,
    waiting: usize,
}

impl<L> Lanes<L> {
    pub(super) fn new(key_of: KeyOf) -> Self {
        Lanes {
            key_of,
            lanes: HashMap::new(),
            waiting: 0,
        }
    }

    /// The unit to run now, with the key it runs under; `None` when it waits behind its key's
    /// running unit.
    pub(super) fn admit(&mut self, unit: Unit, handle: L) -> Option<(Unit, L, Option<Bytes>)> {
        let Some(key) = (self.key_of)(&unit) else {
            return Some((unit, handle, None));
        };
        match self.lanes.get_mut(&key) {
            Some(lane) => {
                lane.push_back((unit, handle));
                self.waiting += 1;
                None
            }
            None => {
                self.lanes.insert(key.clone(), VecDeque::new());
                Some((unit, handle, Some(key)))
            }
        }
    }

    /// The unit running under `key` settled: its key's next waiting unit, to run now under the
    /// same key; `None` closes the lane.
    pub(super) fn settled(&mut self, key: Bytes) -> Option<(Unit, L, Option<Bytes>)> {
        let lane = self.lanes.get_mut(&key)?;
        match lane.pop_front() {
            Some((unit, handle)) => {
                self.waiting -= 1;
                Some((unit, handle, Some(key)))
            }
            None => {
                self.lanes.remove(&key);
                None
            }
        }
    }

    /// Units received and waiting behind their key's running unit.
    pub(super) fn waiting(&self) -> usize {
        self.waiting
    }

    /// Every waiting unit, each lane in arrival order, for the loop to release at shutdown; the
    /// lanes close as their running units settle.
    pub(super) fn drain(&mut self) -> Vec<(Unit, L)> {
        self.waiting = 0;
        self.lanes
            .values_mut()
            .flat_map(|lane| lane.drain(..))
            .collect()
    }
}

/// The lanes the loop keeps when the consumer orders by key; nothing at all when it does not.
pub(super) fn lanes<L>(key_of: Option<&KeyOf>) -> Option<Lanes<L>> {
    key_of.map(|key_of| Lanes::new(key_of.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn by_header() -> Lanes<u32> {
        Lanes::new(Arc::new(|unit: &Unit| {
            unit.headers().get(crate::headers::KEY).cloned()
        }))
    }

    fn unit(id: &str, key: Option<&'static str>) -> Unit {
        let unit = Unit::new(id, "{}");
        match key {
            Some(key) => unit.with_headers(crate::unit::Headers::from_pairs([(
                crate::headers::KEY,
                key,
            )])),
            None => unit,
        }
    }

    fn id(admitted: &Option<(Unit, u32, Option<Bytes>)>) -> Option<&str> {
        admitted.as_ref().map(|(unit, _, _)| unit.id().as_str())
    }

    #[test]
    fn a_key_runs_one_unit_at_a_time_in_arrival_order_and_other_keys_pass() {
        let mut lanes = by_header();
        assert_eq!(id(&lanes.admit(unit("a1", Some("a")), 1)), Some("a1"));
        assert_eq!(id(&lanes.admit(unit("a2", Some("a")), 2)), None);
        assert_eq!(id(&lanes.admit(unit("b1", Some("b")), 3)), Some("b1"));
        assert_eq!(id(&lanes.admit(unit("a3", Some("a")), 4)), None);
        assert_eq!(id(&lanes.admit(unit("x", None), 5)), Some("x"));
        assert_eq!(id(&lanes.admit(unit("y", None), 6)), Some("y"));
        assert_eq!(lanes.waiting(), 2);

        let next = lanes.settled(Bytes::from_static(b"a"));
        assert_eq!(id(&next), Some("a2"));
        assert_eq!(next.unwrap().1, 2, "with its own handle");
        assert_eq!(id(&lanes.admit(unit("a4", Some("a")), 7)), None, "a2 runs");
        assert_eq!(id(&lanes.settled(Bytes::from_static(b"a"))), Some("a3"));
        assert_eq!(id(&lanes.settled(Bytes::from_static(b"a"))), Some("a4"));
        assert_eq!(id(&lanes.settled(Bytes::from_static(b"a"))), None);
        assert_eq!(lanes.waiting(), 0);
        // The lane closed: the next `a` runs at once.
        assert_eq!(id(&lanes.admit(unit("a5", Some("a")), 8)), Some("a5"));
        assert_eq!(id(&lanes.settled(Bytes::from_static(b"b"))), None);
    }

    #[test]
    fn drain_hands_back_every_waiting_unit() {
        let mut lanes = by_header();
        lanes.admit(unit("a1", Some("a")), 1);
        lanes.admit(unit("a2", Some("a")), 2);
        lanes.admit(unit("a3", Some("a")), 3);
        lanes.admit(unit("b1", Some("b")), 4);
        lanes.admit(unit("b2", Some("b")), 5);
        let mut drained: Vec<u32> = lanes.drain().into_iter().map(|(_, h)| h).collect();
        drained.sort();
        assert_eq!(drained, [2, 3, 5]);
        assert_eq!(lanes.waiting(), 0);
        assert!(lanes.settled(Bytes::from_static(b"a")).is_none());
    }
}
