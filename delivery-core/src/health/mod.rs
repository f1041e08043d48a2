//! Health of a running consumer or relay, for a readiness probe or an operator's page.
//!
//! Each [`Consumer`](crate::Consumer) and each [`Relayer`](crate::outbox::Relayer) has a
//! [`Health`], taken from its builder before `.run(..)`: a cheap handle (an `Arc`) the runtime
//! updates as it goes, and that anything may [`snapshot`](Health::snapshot) at any time.
//!
//! | field | consumer | relay |
//! |---|---|---|
//! | `connected` | the last receive succeeded, or the receive after a failure has waited [`RECONNECT_GRACE`] without failing | the last claim succeeded |
//! | `last_receive_age_seconds` | since a unit last arrived (units that arrive and complete without the consumer waiting are stamped one in 32: they come microseconds apart) | since the last claim came back |
//! | `in_flight` | units received and not yet settled | records being relayed |
//! | `dead_lettered` | units this run moved to the dead letter | records this run marked dead |
//! | `dead_letter_depth` | units in the dead letter, once [watched](Health::watch_dead_letters) | dead records in the table, as last read |
//! | `pending`, `oldest_pending_age_seconds` | — | records not yet delivered nor dead, and the oldest one's age, as last read |
//!
//! A component is healthy while it runs and is connected ([`HealthStatus::Up`]); before its run
//! starts, once it stopped, and while its broker or database is unreachable it is not.
//!
//! ```
//! use delivery::{consumer, Consumer, HandlerError, Json};
//! use delivery::health::HealthStatus;
//! use delivery::memory::MemoryBroker;
//!
//! #[consumer]
//! async fn take(Json(n): Json<u32>) -> Result<(), HandlerError> { let _ = n; Ok(()) }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let broker = MemoryBroker::new();
//! broker.publish("numbers", delivery::Unit::new("n-1", "7"));
//! broker.publish("numbers", delivery::Unit::new("n-2", "not a number"));
//! let consumer = Consumer::new(broker.consume("numbers")).shutdown_on(broker.idle("numbers"));
//! let health = consumer.health();
//! assert_eq!(health.snapshot().status, HealthStatus::Starting);
//!
//! consumer.run(take).await;
//! let snapshot = health.snapshot();
//! assert_eq!(snapshot.status, HealthStatus::Stopped);
//! assert!(snapshot.connected);
//! assert_eq!((snapshot.in_flight, snapshot.dead_lettered), (0, 1));
//! assert!(snapshot.last_receive_age_seconds.is_some());
//! # }
//! ```

use std::fmt;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use crate::dead_letter::DeadLetters;

/// How long a consumer's receive after a failure must wait without failing again before the
/// consumer counts as connected: a source that reconnected waits for the next unit, and an idle
/// queue must not keep it unhealthy.
pub const RECONNECT_GRACE: Duration = Duration::from_secs(2);

/// "Not known", in the atomics that hold a count or an instant.
const UNKNOWN: u64 = u64::MAX;

/// What a [`Health`] watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Component {
    /// A [`Consumer`](crate::Consumer).
    Consumer,
    /// An outbox [`Relayer`](crate::outbox::Relayer).
    Relay,
}

/// Where a component stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum HealthStatus {
    /// Its run has not started.
    Starting,
    /// Running and connected.
    Up,
    /// Running, but its last receive or claim failed.
    Down,
    /// Its run ended.
    Stopped,
}

const STARTING: u8 = 0;
const RUNNING: u8 = 1;
const STOPPED: u8 = 2;

/// The health of one consumer or relay: cheap to clone, shared with the runtime that updates it.
/// See the [module](self).
#[derive(Clone)]
pub struct Health {
    inner: Arc<Inner>,
}

struct Inner {
    component: Component,
    name: String,
    /// The instant the atomics below count from, in nanoseconds (plus one: zero is "never").
    origin: Instant,
    phase: AtomicU8,
    failures: AtomicU32,
    last_ok: AtomicU64,
    /// When the receive after the last failure started (consumer only; zero: not retrying).
    retry_from: AtomicU64,
    last_error: Mutex<Option<String>>,
    in_flight: AtomicU64,
    dead_lettered: AtomicU64,
    dead_letter_depth: AtomicU64,
    pending: AtomicU64,
    /// The oldest pending record's age when last read, in nanoseconds; `UNKNOWN`: none.
    oldest_pending_age: AtomicU64,
    /// When the backlog was last read.
    backlog_read: AtomicU64,
}

/// A [`Health`] at one moment: what a probe serves as JSON.
///
/// ```json
/// {"component":"consumer","name":"orders","status":"up","healthy":true,"connected":true,
///  "consecutive_failures":0,"last_error":null,"last_receive_age_seconds":0.42,"in_flight":0,
///  "dead_lettered":1,"dead_letter_depth":1,"pending":null,"oldest_pending_age_seconds":null}
/// ```
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct HealthSnapshot {
    /// A consumer or a relay.
    pub component: Component,
    /// The source's name (queue, stream, topic) or the outbox table's.
    pub name: String,
    /// Where it stands.
    pub status: HealthStatus,
    /// `status == Up`.
    pub healthy: bool,
    /// Whether its broker or database answered last (see the [module](self)).
    pub connected: bool,
    /// Receives (claims) failed in a row.
    pub consecutive_failures: u32,
    /// The last failure, while it is not followed by a success.
    pub last_error: Option<String>,
    /// Seconds since a unit was last received (a relay: since its last claim came back); `None`
    /// before the first.
    pub last_receive_age_seconds: Option<f64>,
    /// Units (records) being handled now.
    pub in_flight: u64,
    /// Units moved to the dead letter (records marked dead) by this run.
    pub dead_lettered: u64,
    /// Units (records) waiting in the dead letter, as last read; `None` if never read.
    pub dead_letter_depth: Option<u64>,
    /// Relay: records neither delivered nor dead, as last read.
    pub pending: Option<u64>,
    /// Relay: the age of the oldest pending record, as last read; `None` when none is pending
    /// (or never read).
    pub oldest_pending_age_seconds: Option<f64>,
}

impl fmt::Debug for Health {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.snapshot(), f)
    }
}

impl Health {
    /// A health for `component` named `name`, not started. The runtime makes one per consumer and
    /// relay; make your own to report another component the same way.
    pub fn new(component: Component, name: impl Into<String>) -> Self {
        Health {
            inner: Arc::new(Inner {
                component,
                name: name.into(),
                origin: Instant::now(),
                phase: AtomicU8::new(STARTING),
                failures: AtomicU32::new(0),
                last_ok: AtomicU64::new(0),
                retry_from: AtomicU64::new(0),
                last_error: Mutex::new(None),
                in_flight: AtomicU64::new(0),
                dead_lettered: AtomicU64::new(0),
                dead_letter_depth: AtomicU64::new(UNKNOWN),
                pending: AtomicU64::new(UNKNOWN),
                oldest_pending_age: AtomicU64::new(UNKNOWN),
                backlog_read: AtomicU64::new(0),
            }),
        }
    }

    /// The component's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Whether it is [up](HealthStatus::Up) now.
    pub fn is_healthy(&self) -> bool {
        self.snapshot().healthy
    }

    /// Where it stands now.
    pub fn snapshot(&self) -> HealthSnapshot {
        self.snapshot_at(Instant::now())
    }

    fn snapshot_at(&self, now: Instant) -> HealthSnapshot {
        let inner = &*self.inner;
        let failures = inner.failures.load(Ordering::Acquire);
        let retry_from = inner.retry_from.load(Ordering::Acquire);
        let connected = failures == 0
            || (retry_from != 0
                && self
                    .elapsed(retry_from, now)
                    .is_some_and(|waited| waited >= RECONNECT_GRACE));
        let status = match inner.phase.load(Ordering::Acquire) {
            STARTING => HealthStatus::Starting,
            STOPPED => HealthStatus::Stopped,
            _ if connected => HealthStatus::Up,
            _ => HealthStatus::Down,
        };
        let known = |n: u64| (n != UNKNOWN).then_some(n);
        let last_error = if failures == 0 {
            None
        } else {
            lock(&inner.last_error).clone()
        };
        HealthSnapshot {
            component: inner.component,
            name: inner.name.clone(),
            status,
            healthy: status == HealthStatus::Up,
            connected,
            consecutive_failures: failures,
            last_error,
            last_receive_age_seconds: self
                .elapsed(inner.last_ok.load(Ordering::Acquire), now)
                .map(|age| age.as_secs_f64()),
            in_flight: inner.in_flight.load(Ordering::Acquire),
            dead_lettered: inner.dead_lettered.load(Ordering::Acquire),
            dead_letter_depth: known(inner.dead_letter_depth.load(Ordering::Acquire)),
            pending: known(inner.pending.load(Ordering::Acquire)),
            oldest_pending_age_seconds: match inner.oldest_pending_age.load(Ordering::Acquire) {
                UNKNOWN => None,
                age => {
                    let since = self.elapsed(inner.backlog_read.load(Ordering::Acquire), now);
                    Some((Duration::from_nanos(age) + since.unwrap_or_default()).as_secs_f64())
                }
            },
        }
    }

    /// Keeps the dead-letter depth up to date: reads `dead_letters.count()` now and every
    /// `every` after, until the returned task is aborted (or the runtime shuts down). A failed
    /// read is logged and leaves the last depth. The count also sets the
    /// `delivery_dead_letter_depth` gauge.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use std::time::Duration;
    /// use delivery::memory::MemoryBroker;
    ///
    /// let broker = MemoryBroker::new();
    /// let consumer = delivery::Consumer::new(broker.consume("orders"));
    /// let watching = consumer.health().watch_dead_letters(broker.dead_letters("orders"), Duration::from_secs(15));
    /// // ... run the consumer ...
    /// watching.abort();
    /// # }
    /// ```
    pub fn watch_dead_letters<D>(
        &self,
        dead_letters: D,
        every: Duration,
    ) -> tokio::task::JoinHandle<()>
    where
        D: DeadLetters + 'static,
    {
        let health = self.clone();
        tokio::spawn(async move {
            loop {
                match dead_letters.count().await {
                    Ok(depth) => health.set_dead_letter_depth(depth),
                    Err(error) => tracing::warn!(dead_letter = dead_letters.name(), %error,
                        "could not read the dead letter's depth"),
                }
                tokio::time::sleep(every).await;
            }
        })
    }

    /// Sets the dead-letter depth (what [`watch_dead_letters`](Self::watch_dead_letters) does).
    pub fn set_dead_letter_depth(&self, depth: u64) {
        self.inner
            .dead_letter_depth
            .store(depth.min(UNKNOWN - 1), Ordering::Release);
    }

    // What the runtime reports.

    fn stamp(&self, at: Instant) -> u64 {
        let nanos = at.saturating_duration_since(self.inner.origin).as_nanos();
        u64::try_from(nanos)
            .unwrap_or(UNKNOWN - 1)
            .saturating_add(1)
            .min(UNKNOWN - 1)
    }

    fn elapsed(&self, stamp: u64, now: Instant) -> Option<Duration> {
        (stamp != 0 && stamp != UNKNOWN).then(|| {
            let at = self.inner.origin + Duration::from_nanos(stamp - 1);
            now.saturating_duration_since(at)
        })
    }

    /// The run started: up, until a receive fails. Stopped when the guard is dropped.
    pub(crate) fn running(&self) -> Running {
        self.inner.phase.store(RUNNING, Ordering::Release);
        Running(self.clone())
    }

    /// A receive (claim) succeeded at `at`.
    #[inline]
    pub(crate) fn succeeded(&self, at: Instant) {
        let inner = &*self.inner;
        inner.last_ok.store(self.stamp(at), Ordering::Release);
        if inner.failures.load(Ordering::Relaxed) != 0 {
            self.recovered();
        }
    }

    #[cold]
    fn recovered(&self) {
        self.inner.failures.store(0, Ordering::Release);
        self.inner.retry_from.store(0, Ordering::Release);
    }

    /// A receive (claim) failed with `error`. `retry_in`: the wait before the next receive, after
    /// which a receive that waits [`RECONNECT_GRACE`] without failing counts as connected; `None`
    /// where only a success does (a claim, which answers at once).
    #[cold]
    pub(crate) fn failed(&self, error: &dyn fmt::Display, retry_in: Option<Duration>) {
        let inner = &*self.inner;
        *lock(&inner.last_error) = Some(error.to_string());
        inner.failures.fetch_add(1, Ordering::AcqRel);
        let retry_from = retry_in.map_or(0, |wait| self.stamp(Instant::now() + wait));
        inner.retry_from.store(retry_from, Ordering::Release);
    }

    /// One more unit (record) in flight, until the guard is dropped.
    #[inline]
    pub(crate) fn in_flight(&self) -> InFlight<'_> {
        self.inner.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(self)
    }

    /// The number in flight (the relay knows it).
    pub(crate) fn set_in_flight(&self, n: usize) {
        self.inner.in_flight.store(n as u64, Ordering::Relaxed);
    }

    /// One more unit (record) moved to the dead letter.
    #[cold]
    pub(crate) fn dead_lettered(&self) {
        self.inner.dead_lettered.fetch_add(1, Ordering::Relaxed);
    }

    /// The relay's backlog as last read: `pending` records, the oldest `oldest_age` old.
    pub(crate) fn set_backlog(&self, pending: u64, oldest_age: Option<Duration>, dead: u64) {
        let inner = &*self.inner;
        inner
            .pending
            .store(pending.min(UNKNOWN - 1), Ordering::Release);
        let age = oldest_age.map_or(UNKNOWN, |age| {
            u64::try_from(age.as_nanos())
                .unwrap_or(UNKNOWN - 1)
                .min(UNKNOWN - 1)
        });
        inner
            .backlog_read
            .store(self.stamp(Instant::now()), Ordering::Release);
        inner.oldest_pending_age.store(age, Ordering::Release);
        self.set_dead_letter_depth(dead);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A run in progress; stopped when dropped.
pub(crate) struct Running(Health);

impl Running {
    pub(crate) fn health(&self) -> &Health {
        &self.0
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.inner.phase.store(STOPPED, Ordering::Release);
    }
}

/// A unit (record) in flight; dropped once it is settled.
pub(crate) struct InFlight<'a>(&'a Health);

impl Drop for InFlight<'_> {
    #[inline]
    fn drop(&mut self) {
        self.0.inner.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn consumer() -> Health {
        Health::new(Component::Consumer, "orders")
    }

    #[tokio::test(start_paused = true)]
    async fn a_consumer_is_starting_then_up_then_stopped() {
        let health = consumer();
        let snapshot = health.snapshot();
        assert_eq!(snapshot.status, HealthStatus::Starting);
        assert!(!snapshot.healthy);
        assert_eq!(snapshot.last_receive_age_seconds, None);

        let running = health.running();
        assert!(health.is_healthy());
        health.succeeded(Instant::now());
        tokio::time::advance(Duration::from_millis(1500)).await;
        let snapshot = health.snapshot();
        assert_eq!(snapshot.status, HealthStatus::Up);
        assert_eq!(snapshot.last_receive_age_seconds, Some(1.5));

        drop(running);
        let snapshot = health.snapshot();
        assert_eq!(snapshot.status, HealthStatus::Stopped);
        assert!(!snapshot.healthy);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_receive_is_down_until_a_success() {
        let health = consumer();
        let _running = health.running();
        health.failed(&"connection refused", None);
        health.failed(&"connection refused again", None);
        let snapshot = health.snapshot();
        assert_eq!(snapshot.status, HealthStatus::Down);
        assert!(!snapshot.connected);
        assert_eq!(snapshot.consecutive_failures, 2);
        assert_eq!(
            snapshot.last_error.as_deref(),
            Some("connection refused again")
        );
        tokio::time::advance(Duration::from_secs(60)).await;
        assert!(
            !health.is_healthy(),
            "no retry hint: only a success recovers"
        );

        health.succeeded(Instant::now());
        let snapshot = health.snapshot();
        assert_eq!(snapshot.status, HealthStatus::Up);
        assert_eq!(
            (snapshot.consecutive_failures, snapshot.last_error),
            (0, None)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_receive_waiting_past_the_grace_after_its_retry_is_connected() {
        let health = consumer();
        let _running = health.running();
        health.failed(&"channel closed", Some(Duration::from_millis(100)));
        tokio::time::advance(Duration::from_millis(100) + RECONNECT_GRACE / 2).await;
        assert!(
            !health.is_healthy(),
            "the retry has not waited the grace yet"
        );
        tokio::time::advance(RECONNECT_GRACE).await;
        assert!(health.is_healthy(), "reconnected, waiting on an idle queue");

        // It fails again: down again, until the next retry has waited its grace.
        health.failed(&"channel closed", Some(Duration::from_millis(200)));
        assert!(!health.is_healthy());
        assert_eq!(health.snapshot().consecutive_failures, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn in_flight_and_dead_letters_are_counted() {
        let health = consumer();
        let first = health.in_flight();
        let second = health.in_flight();
        assert_eq!(health.snapshot().in_flight, 2);
        drop(first);
        health.dead_lettered();
        drop(second);
        let snapshot = health.snapshot();
        assert_eq!((snapshot.in_flight, snapshot.dead_lettered), (0, 1));
        assert_eq!(snapshot.dead_letter_depth, None);
        health.set_dead_letter_depth(3);
        assert_eq!(health.snapshot().dead_letter_depth, Some(3));
    }

    #[tokio::test(start_paused = true)]
    async fn a_relay_backlog_ages_between_reads() {
        let health = Health::new(Component::Relay, "delivery_outbox");
        assert_eq!(health.snapshot().pending, None);
        health.set_backlog(4, Some(Duration::from_secs(10)), 1);
        tokio::time::advance(Duration::from_secs(5)).await;
        let snapshot = health.snapshot();
        assert_eq!(snapshot.pending, Some(4));
        assert_eq!(snapshot.oldest_pending_age_seconds, Some(15.0));
        assert_eq!(snapshot.dead_letter_depth, Some(1));
        health.set_backlog(0, None, 1);
        assert_eq!(health.snapshot().oldest_pending_age_seconds, None);
    }

    #[test]
    fn the_snapshot_serializes_to_the_documented_shape() {
        let health = Health::new(Component::Relay, "delivery_outbox");
        let json = serde_json::to_value(health.snapshot()).unwrap();
        assert_eq!(json["component"], "relay");
        assert_eq!(json["status"], "starting");
        assert_eq!(json["healthy"], false);
        assert_eq!(json["in_flight"], 0);
        assert!(json["dead_letter_depth"].is_null());
    }
}
