//! Per-key order under concurrency: where it is kept. Units with the same key run one at a time,
//! in arrival order, while units of other keys (and units without a key) run concurrently.
//!
//! The loop (`run.rs`) asks [`Lanes::admit`] for each unit it receives: a unit whose key has none
//! running runs now; one whose key has a unit running waits in its key's lane, holding its
//! delivery (unsettled, so the mechanism counts it in flight: a lane's waiting units count
//! against the consumer's concurrency, and on Kafka the commit watermark never passes them). When
//! a unit settles, [`Lanes::settled`] hands over its key's next waiting unit. While they wait,
//! their deliveries are kept alive as a running unit's are ([`Source::keep_alive`]): every
//! `every`, the loop sweeps the waiting units due ([`Lanes::keep_alive_due`]), each for at most
//! `at_most` after it began waiting, so the mechanism does not hand them to another consumer (or
//! back to this one) while they are held. At shutdown the waiting units, never started, are
//! released ([`Lanes::drain`]), after the source stopped.
//!
//! [`Source::keep_alive`]: crate::Source::keep_alive
//!
//! A unit that fails and is returned to the mechanism:
//! - [`WhenReturned::Pass`] (the default): lets its key's later units pass; it comes back after
//!   its backoff, behind them, and rule 4's guard (`store::postgres::advance`) keeps an older
//!   unit from undoing a newer one.
//! - [`WhenReturned::Hold`]: keeps its place at the head of its lane, *away*, and its key's later
//!   units wait until it came back and was applied or dead-lettered. A place kept away expires
//!   [`HOLD_GRACE`] after the unit's backoff: with several consumers on one queue it may come back
//!   to another one, and this one must not wait for it forever. When the units waiting behind
//!   held keys fill the whole concurrency and nothing else runs, the held unit could never be
//!   received again: the newest waiting unit is then given back to make room
//!   ([`Lanes::make_room`]), its place in the lane kept away too, so that whichever order the
//!   mechanism delivers them again in, the lane runs them in their first order.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use crate::source::KeepAlive;
use crate::unit::{Unit, UnitId};

/// What orders a unit: its key, or `None` for a unit that runs unordered.
pub(crate) type KeyOf = Arc<dyn Fn(&Unit) -> Option<Bytes> + Send + Sync>;

/// What a unit that fails and is returned does to its key's later units, when the consumer
/// orders by key ([`Consumer::order_by_key`](crate::Consumer::order_by_key)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum WhenReturned {
    /// Its key's later units run meanwhile; it comes back after its backoff, behind them. Where
    /// the order of the effects matters, guard them with the unit's stamp (rule 4,
    /// `delivery::store`).
    #[default]
    Pass,
    /// Its key's later units wait until it came back and was applied or dead-lettered (or until
    /// its backoff and [`HOLD_GRACE`] passed: it may have come back to another consumer). Their
    /// deliveries are held meanwhile and count against the concurrency; when they fill it and
    /// nothing else runs, the newest is given back to make room (released: uncounted where the
    /// mechanism allows, as at shutdown) and keeps its place in its lane. Keep the mechanism's
    /// window (RabbitMQ's prefetch) at least the concurrency: a window full of waiting units the
    /// runtime does not see as full lets the returned unit back only when the hold expires.
    Hold,
}

/// How long past its backoff a key waits for its returned unit before its later units run anyway
/// ([`WhenReturned::Hold`]).
pub const HOLD_GRACE: Duration = Duration::from_secs(10);

/// The least wait of a unit given back to make room: it cannot come back sooner, so a key held
/// for long does not turn into a loop of deliveries and give-backs.
const MIN_AWAY: Duration = Duration::from_secs(1);

/// The keys ordered and what their returned units do.
#[derive(Clone)]
pub(crate) struct Order {
    pub(crate) key_of: KeyOf,
    pub(crate) when_returned: WhenReturned,
}

/// A key's units, in arrival order, behind the one running (if any).
struct Lane<L> {
    running: bool,
    slots: VecDeque<Slot<L>>,
}

enum Slot<L> {
    /// A unit received and waiting, kept alive until the instant (`at_most` after it began
    /// waiting).
    Waiting(Unit, L, Instant),
    /// A unit of the key handed back to the mechanism (returned, or given back to make room),
    /// whose place is kept until it comes back, or until `until`.
    Away {
        id: UnitId,
        back_at: Instant,
        until: Instant,
    },
}

/// The lanes of the keys with a unit running, returned or waiting.
pub(super) struct Lanes<L> {
    key_of: KeyOf,
    hold: bool,
    lanes: HashMap<Bytes, Lane<L>>,
    waiting: usize,
    away: usize,
    /// How the waiting units' deliveries are kept alive, if the mechanism needs it.
    keep_alive: Option<KeepAlive>,
    /// When the waiting units are next kept alive; `None` while none waits.
    sweep_at: Option<Instant>,
}

/// A unit to run now, with the key it runs under.
pub(super) type Admitted<L> = (Unit, L, Option<Bytes>);

impl<L> Lanes<L> {
    pub(super) fn new(order: &Order, keep_alive: Option<KeepAlive>) -> Self {
        Lanes {
            key_of: order.key_of.clone(),
            hold: order.when_returned == WhenReturned::Hold,
            lanes: HashMap::new(),
            waiting: 0,
            away: 0,
            keep_alive,
            sweep_at: None,
        }
    }

    /// The unit to run now; `None` when it waits in its key's lane.
    pub(super) fn admit(&mut self, unit: Unit, handle: L) -> Option<Admitted<L>> {
        let Some(key) = (self.key_of)(&unit) else {
            return Some((unit, handle, None));
        };
        let lane = self.lanes.entry(key.clone()).or_insert_with(|| Lane {
            running: false,
            slots: VecDeque::new(),
        });
        if !lane.running && lane.slots.is_empty() {
            lane.running = true;
            return Some((unit, handle, Some(key)));
        }
        // Kept alive from now on, for at most `at_most`.
        let now = Instant::now();
        let kept_until = match self.keep_alive {
            Some(KeepAlive { every, at_most }) => {
                if self.waiting == 0 || self.sweep_at.is_none() {
                    self.sweep_at = Some(now + every);
                }
                now + at_most
            }
            None => now,
        };
        // Back from away: in its own place; otherwise last.
        let place = (self.away > 0)
            .then(|| {
                lane.slots
                    .iter_mut()
                    .find(|slot| matches!(slot, Slot::Away { id, .. } if id == unit.id()))
            })
            .flatten();
        match place {
            Some(place) => {
                *place = Slot::Waiting(unit, handle, kept_until);
                self.away -= 1;
            }
            None => lane
                .slots
                .push_back(Slot::Waiting(unit, handle, kept_until)),
        }
        self.waiting += 1;
        self.advance(&key)
    }

    /// The unit running under `key` settled (`returned` with its id and backoff, when it was
    /// returned): its key's next unit to run, if one waits at the head of the lane.
    pub(super) fn settled(
        &mut self,
        key: Bytes,
        returned: Option<(UnitId, Duration)>,
    ) -> Option<Admitted<L>> {
        let lane = self.lanes.get_mut(&key)?;
        lane.running = false;
        if self.hold
            && let Some((id, after)) = returned
        {
            let back_at = Instant::now() + after;
            lane.slots.push_front(Slot::Away {
                id,
                back_at,
                until: back_at + HOLD_GRACE,
            });
            self.away += 1;
        }
        self.advance(&key)
    }

    /// Runs the head of `key`'s lane if nothing of the key runs and the head is a waiting unit
    /// (places kept away past their time are dropped first); closes an empty lane.
    fn advance(&mut self, key: &Bytes) -> Option<Admitted<L>> {
        let lane = self.lanes.get_mut(key)?;
        if lane.running {
            return None;
        }
        loop {
            match lane.slots.front() {
                None => {
                    self.lanes.remove(key);
                    return None;
                }
                Some(Slot::Away { until, .. }) => {
                    if *until > Instant::now() {
                        return None;
                    }
                    lane.slots.pop_front();
                    self.away -= 1;
                }
                Some(Slot::Waiting(..)) => {
                    let Some(Slot::Waiting(unit, handle, _)) = lane.slots.pop_front() else {
                        unreachable!("the head was just seen waiting")
                    };
                    self.waiting -= 1;
                    lane.running = true;
                    return Some((unit, handle, Some(key.clone())));
                }
            }
        }
    }

    /// Units received and waiting in their key's lane.
    pub(super) fn waiting(&self) -> usize {
        self.waiting
    }

    /// When the loop has something to do for the lanes: a lane gives up waiting for its unit
    /// away ([`expired`](Self::expired)), or the waiting units are due to be kept alive
    /// ([`keep_alive_due`](Self::keep_alive_due)); `None` when neither will happen.
    pub(super) fn next_due(&self) -> Option<Instant> {
        let sweep = self.sweep_at.filter(|_| self.waiting > 0);
        match (self.next_expiry(), sweep) {
            (Some(expiry), Some(sweep)) => Some(expiry.min(sweep)),
            (expiry, sweep) => expiry.or(sweep),
        }
    }

    /// The waiting units to keep alive now, if their sweep is due (each until `at_most` after
    /// it began waiting); the next sweep is then due `every` from now.
    pub(super) fn keep_alive_due(&mut self) -> Vec<(&Unit, &mut L)> {
        let now = Instant::now();
        let (Some(KeepAlive { every, .. }), Some(at)) = (self.keep_alive, self.sweep_at) else {
            return Vec::new();
        };
        if at > now {
            return Vec::new();
        }
        self.sweep_at = (self.waiting > 0).then_some(now + every);
        self.lanes
            .values_mut()
            .flat_map(|lane| lane.slots.iter_mut())
            .filter_map(|slot| match slot {
                Slot::Waiting(unit, handle, until) if *until > now => Some((&*unit, handle)),
                _ => None,
            })
            .collect()
    }

    /// When the first lane held by a unit away gives up waiting for it; `None` when none is.
    fn next_expiry(&self) -> Option<Instant> {
        if self.away == 0 {
            return None;
        }
        self.lanes
            .values()
            .filter_map(|lane| match lane.slots.front() {
                Some(Slot::Away { until, .. }) if !lane.running => Some(*until),
                _ => None,
            })
            .min()
    }

    /// The units to run now that lanes gave up waiting for their units away.
    pub(super) fn expired(&mut self) -> Vec<Admitted<L>> {
        let now = Instant::now();
        let keys: Vec<Bytes> = self
            .lanes
            .iter()
            .filter(|(_, lane)| {
                !lane.running
                    && matches!(lane.slots.front(), Some(Slot::Away { until, .. }) if *until <= now)
            })
            .map(|(key, _)| key.clone())
            .collect();
        keys.iter().filter_map(|key| self.advance(key)).collect()
    }

    /// The units waiting behind held keys fill the concurrency and nothing runs: the newest
    /// waiting unit of a held lane, to give back after the returned unit's backoff (at least
    /// [`MIN_AWAY`]), its place kept away.
    pub(super) fn make_room(&mut self) -> Option<(Unit, L, Duration)> {
        let now = Instant::now();
        let (back_at, lane) =
            self.lanes
                .values_mut()
                .find_map(|lane| match lane.slots.front() {
                    Some(Slot::Away { back_at, .. })
                        if !lane.running
                            && lane.slots.iter().any(|s| matches!(s, Slot::Waiting(..))) =>
                    {
                        Some((*back_at, lane))
                    }
                    _ => None,
                })?;
        let newest = lane
            .slots
            .iter()
            .rposition(|slot| matches!(slot, Slot::Waiting(..)))?;
        let after = back_at.saturating_duration_since(now).max(MIN_AWAY);
        let Slot::Waiting(unit, _, _) = &lane.slots[newest] else {
            unreachable!("the slot was just seen waiting")
        };
        let away = Slot::Away {
            id: unit.id().clone(),
            back_at: now + after,
            until: now + after + HOLD_GRACE,
        };
        let Slot::Waiting(unit, handle, _) = std::mem::replace(&mut lane.slots[newest], away)
        else {
            unreachable!("the slot was just seen waiting")
        };
        self.waiting -= 1;
        self.away += 1;
        Some((unit, handle, after))
    }

    /// Every waiting unit, each lane in arrival order, for the loop to release at shutdown (after
    /// the source stopped); the lanes close as their running units settle.
    pub(super) fn drain(&mut self) -> Vec<(Unit, L)> {
        self.waiting = 0;
        self.away = 0;
        self.sweep_at = None;
        self.lanes
            .values_mut()
            .flat_map(|lane| lane.slots.drain(..))
            .filter_map(|slot| match slot {
                Slot::Waiting(unit, handle, _) => Some((unit, handle)),
                Slot::Away { .. } => None,
            })
            .collect()
    }
}

/// The lanes the loop keeps when the consumer orders by key; nothing at all when it does not.
pub(super) fn lanes<L>(order: Option<&Order>, keep_alive: Option<KeepAlive>) -> Option<Lanes<L>> {
    order.map(|order| Lanes::new(order, keep_alive))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn by_header(when_returned: WhenReturned) -> Lanes<u32> {
        kept_alive(when_returned, None)
    }

    fn kept_alive(when_returned: WhenReturned, keep_alive: Option<KeepAlive>) -> Lanes<u32> {
        Lanes::new(
            &Order {
                key_of: Arc::new(|unit: &Unit| unit.headers().get(crate::headers::KEY).cloned()),
                when_returned,
            },
            keep_alive,
        )
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

    fn id(admitted: &Option<Admitted<u32>>) -> Option<&str> {
        admitted.as_ref().map(|(unit, _, _)| unit.id().as_str())
    }

    fn a() -> Bytes {
        Bytes::from_static(b"a")
    }

    #[test]
    fn a_key_runs_one_unit_at_a_time_in_arrival_order_and_other_keys_pass() {
        let mut lanes = by_header(WhenReturned::Pass);
        assert_eq!(id(&lanes.admit(unit("a1", Some("a")), 1)), Some("a1"));
        assert_eq!(id(&lanes.admit(unit("a2", Some("a")), 2)), None);
        assert_eq!(id(&lanes.admit(unit("b1", Some("b")), 3)), Some("b1"));
        assert_eq!(id(&lanes.admit(unit("a3", Some("a")), 4)), None);
        assert_eq!(id(&lanes.admit(unit("x", None), 5)), Some("x"));
        assert_eq!(id(&lanes.admit(unit("y", None), 6)), Some("y"));
        assert_eq!(lanes.waiting(), 2);

        let next = lanes.settled(a(), None);
        assert_eq!(id(&next), Some("a2"));
        assert_eq!(next.unwrap().1, 2, "with its own handle");
        assert_eq!(id(&lanes.admit(unit("a4", Some("a")), 7)), None, "a2 runs");
        assert_eq!(id(&lanes.settled(a(), None)), Some("a3"));
        assert_eq!(id(&lanes.settled(a(), None)), Some("a4"));
        assert_eq!(id(&lanes.settled(a(), None)), None);
        assert_eq!(lanes.waiting(), 0);
        // The lane closed: the next `a` runs at once.
        assert_eq!(id(&lanes.admit(unit("a5", Some("a")), 8)), Some("a5"));
        assert_eq!(id(&lanes.settled(Bytes::from_static(b"b"), None)), None);
    }

    #[test]
    fn passing_lets_the_next_unit_run_when_one_is_returned() {
        let mut lanes = by_header(WhenReturned::Pass);
        lanes.admit(unit("a1", Some("a")), 1);
        lanes.admit(unit("a2", Some("a")), 2);
        let returned = Some((UnitId::new("a1"), Duration::from_secs(5)));
        assert_eq!(id(&lanes.settled(a(), returned)), Some("a2"));
        assert_eq!(lanes.next_due(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn holding_keeps_the_returned_units_place_until_it_comes_back() {
        let mut lanes = by_header(WhenReturned::Hold);
        lanes.admit(unit("a1", Some("a")), 1);
        lanes.admit(unit("a2", Some("a")), 2);
        let returned = Some((UnitId::new("a1"), Duration::from_secs(5)));
        assert_eq!(id(&lanes.settled(a(), returned)), None, "a2 waits for a1");
        assert_eq!(id(&lanes.admit(unit("a3", Some("a")), 3)), None);
        assert_eq!(lanes.waiting(), 2);
        // a1 comes back: it runs first, then a2, a3.
        assert_eq!(id(&lanes.admit(unit("a1", Some("a")), 4)), Some("a1"));
        assert_eq!(id(&lanes.settled(a(), None)), Some("a2"));
        assert_eq!(id(&lanes.settled(a(), None)), Some("a3"));
        assert_eq!(id(&lanes.settled(a(), None)), None);
        assert_eq!((lanes.waiting(), lanes.away), (0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_key_stops_waiting_past_the_backoff_and_the_grace() {
        let mut lanes = by_header(WhenReturned::Hold);
        lanes.admit(unit("a1", Some("a")), 1);
        lanes.admit(unit("a2", Some("a")), 2);
        let start = Instant::now();
        lanes.settled(a(), Some((UnitId::new("a1"), Duration::from_secs(5))));
        assert_eq!(
            lanes.next_due(),
            Some(start + Duration::from_secs(5) + HOLD_GRACE)
        );
        assert!(lanes.expired().is_empty());
        tokio::time::advance(Duration::from_secs(5) + HOLD_GRACE).await;
        let run: Vec<u32> = lanes.expired().into_iter().map(|(_, h, _)| h).collect();
        assert_eq!(run, [2]);
        assert_eq!(lanes.next_due(), None);
        // a1, back late, runs after a2 like any later unit.
        assert_eq!(id(&lanes.admit(unit("a1", Some("a")), 3)), None);
        assert_eq!(id(&lanes.settled(a(), None)), Some("a1"));
    }

    #[tokio::test(start_paused = true)]
    async fn making_room_gives_back_the_newest_and_keeps_its_place() {
        let mut lanes = by_header(WhenReturned::Hold);
        lanes.admit(unit("a1", Some("a")), 1);
        lanes.admit(unit("a2", Some("a")), 2);
        lanes.admit(unit("a3", Some("a")), 3);
        lanes.settled(a(), Some((UnitId::new("a1"), Duration::from_secs(3))));
        let (given, handle, after) = lanes.make_room().expect("a held lane has waiting units");
        assert_eq!((given.id().as_str(), handle), ("a3", 3));
        assert_eq!(after, Duration::from_secs(3));
        assert_eq!(lanes.waiting(), 1);
        // a4 arrives, then a3 comes back before a1: a3 keeps its place ahead of a4.
        assert_eq!(id(&lanes.admit(unit("a4", Some("a")), 4)), None);
        assert_eq!(id(&lanes.admit(unit("a3", Some("a")), 5)), None);
        assert_eq!(id(&lanes.admit(unit("a1", Some("a")), 6)), Some("a1"));
        assert_eq!(id(&lanes.settled(a(), None)), Some("a2"));
        assert_eq!(id(&lanes.settled(a(), None)), Some("a3"));
        assert_eq!(id(&lanes.settled(a(), None)), Some("a4"));
        assert_eq!(id(&lanes.settled(a(), None)), None);
    }

    #[test]
    fn drain_hands_back_every_waiting_unit() {
        let mut lanes = by_header(WhenReturned::Pass);
        lanes.admit(unit("a1", Some("a")), 1);
        lanes.admit(unit("a2", Some("a")), 2);
        lanes.admit(unit("a3", Some("a")), 3);
        lanes.admit(unit("b1", Some("b")), 4);
        lanes.admit(unit("b2", Some("b")), 5);
        let mut drained: Vec<u32> = lanes.drain().into_iter().map(|(_, h)| h).collect();
        drained.sort();
        assert_eq!(drained, [2, 3, 5]);
        assert_eq!(lanes.waiting(), 0);
        assert!(lanes.settled(a(), None).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_units_are_kept_alive_every_period_until_at_most() {
        let keep_alive = KeepAlive {
            every: Duration::from_secs(1),
            at_most: Duration::from_millis(2_500),
        };
        let mut lanes = kept_alive(WhenReturned::Pass, Some(keep_alive));
        let start = Instant::now();
        lanes.admit(unit("a1", Some("a")), 1);
        assert_eq!(
            lanes.next_due(),
            None,
            "a running unit is kept alive by its run"
        );
        lanes.admit(unit("a2", Some("a")), 2);
        lanes.admit(unit("b1", Some("b")), 3);
        assert_eq!(lanes.next_due(), Some(start + Duration::from_secs(1)));
        assert!(lanes.keep_alive_due().is_empty(), "not due yet");
        tokio::time::advance(Duration::from_millis(500)).await;
        lanes.admit(unit("a3", Some("a")), 4);
        tokio::time::advance(Duration::from_millis(500)).await;
        let kept = |lanes: &mut Lanes<u32>| {
            let mut kept: Vec<u32> = lanes
                .keep_alive_due()
                .into_iter()
                .map(|(_, h)| *h)
                .collect();
            kept.sort();
            kept
        };
        assert_eq!(kept(&mut lanes), [2, 4]);
        assert_eq!(lanes.next_due(), Some(start + Duration::from_secs(2)));
        tokio::time::advance(Duration::from_millis(1_500)).await;
        // a2 waited past `at_most`: no longer kept alive; a3 still is.
        assert_eq!(kept(&mut lanes), [4]);
        assert_eq!(id(&lanes.settled(a(), None)), Some("a2"));
        assert_eq!(id(&lanes.settled(a(), None)), Some("a3"));
        assert_eq!(lanes.next_due(), None, "nothing waits");
        assert!(lanes.keep_alive_due().is_empty());
    }

    #[test]
    fn without_keep_alive_nothing_is_swept() {
        let mut lanes = by_header(WhenReturned::Pass);
        lanes.admit(unit("a1", Some("a")), 1);
        lanes.admit(unit("a2", Some("a")), 2);
        assert_eq!(lanes.next_due(), None);
        assert!(lanes.keep_alive_due().is_empty());
    }
}
