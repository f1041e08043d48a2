//! Where a unit's disposition is carried out: acknowledged, returned or dead-lettered. Every
//! transport's units pass through the [`Settler`]'s three entry points, which also log each
//! disposition once and count it; the transport's [`Settle`] primitives are composed in
//! [`carry_out`] alone.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use metrics::Counter;

use super::handover::Settled;
use super::holds::{Give, Holds};
use super::observer::ConsumerObserver;
use crate::disposition::{
    DeadLetterReason, Disposition, Outcome, ReasonKind, RedeliveryPolicy, decide,
};
use crate::health::Health;
use crate::source::{KeepAlive, Settle};
use crate::transport_error::TransportError;
use crate::unit::Unit;

/// Counters registered once per run, so the hot path only increments.
#[derive(Clone)]
struct Counters {
    acked: Counter,
    returned: Counter,
    malformed: Counter,
    rejected: Counter,
    exhausted: Counter,
    settle_failed: Counter,
    observe: ConsumerObserver,
}

impl Counters {
    fn new(source: &str, health: &Health) -> Self {
        let dead = |reason: ReasonKind| metrics::counter!(crate::observe::DEAD_LETTERED, "source" => source.to_owned(), "reason" => reason.as_str());
        Counters {
            acked: metrics::counter!(crate::observe::ACKED, "source" => source.to_owned()),
            returned: metrics::counter!(crate::observe::RETURNED, "source" => source.to_owned()),
            malformed: dead(ReasonKind::Malformed),
            rejected: dead(ReasonKind::Rejected),
            exhausted: dead(ReasonKind::Exhausted),
            settle_failed: metrics::counter!(crate::observe::SETTLE_FAILED, "source" => source.to_owned()),
            observe: ConsumerObserver::new(source, health),
        }
    }
}

/// The one place a consumer's units are settled: each unit ends through one of its three entry
/// points, [`settle`](Settler::settle) (the handler ran), [`past_the_bound`](Settler::past_the_bound)
/// (delivered more often than the bound allows: never run) and [`release`](Settler::release)
/// (never run to its end: abandoned at shutdown, or given back to make room behind a held key).
/// Each carries out the disposition through the transport's [`Settle`] primitives, then logs it
/// once and counts it.
pub(crate) struct Settler {
    counters: Counters,
    holds: Holds,
    policy: RedeliveryPolicy,
}

impl Settler {
    pub(crate) fn new(
        source: &str,
        health: &Health,
        keep_alive: Option<KeepAlive>,
        policy: RedeliveryPolicy,
    ) -> Self {
        Settler {
            counters: Counters::new(source, health),
            holds: Holds::new(keep_alive),
            policy,
        }
    }

    /// The consumer's health and metrics, as units arrive and their handlers end.
    pub(crate) fn observe(&self) -> &ConsumerObserver {
        &self.counters.observe
    }

    /// Whether `unit` was delivered more often than the bound allows: it goes to
    /// [`past_the_bound`](Settler::past_the_bound), unrun.
    #[inline]
    pub(crate) fn is_past_the_bound(&self, unit: &Unit) -> bool {
        unit.delivery_count().get() > self.policy.max_deliveries.get()
    }

    /// The disposition of a unit whose handler ended with `outcome`: [`decide`]'s answer. An
    /// applied unit is acknowledged without looking at the count or the policy.
    #[inline]
    pub(crate) fn disposition(&self, outcome: &Outcome, unit: &Unit) -> Disposition {
        match outcome {
            Outcome::Applied => Disposition::Ack,
            _ => decide(
                outcome,
                unit.delivery_count(),
                &self.policy,
                unit.id().as_str(),
            ),
        }
    }

    /// Settles a unit whose handler ended with `outcome`, decided into `disposition`
    /// ([`Settler::disposition`]). An acknowledgement is polled by [`Settling`] itself, inline in
    /// the unit's run; the rare paths, whose futures are large, are boxed, so that they do not
    /// make every unit's future larger. A return the mechanism cannot delay is held by the
    /// runtime for its wait ([`Settled::Held`]).
    #[inline(always)]
    pub(crate) fn settle<'a, L: Settle + 'a>(
        &'a self,
        handle: L,
        unit: &'a Unit,
        outcome: &'a Outcome,
        disposition: &'a Disposition,
    ) -> Settling<'a, impl Future<Output = Result<(), TransportError>> + Send + 'a> {
        let (ack, other) = match disposition {
            Disposition::Ack => (Some(handle.ack(unit)), None),
            Disposition::Return { after } if !after.is_zero() && !L::DELAYS_REDELIVERY => {
                self.hold(handle, unit, outcome, *after);
                return Settling::Held;
            }
            Disposition::DeadLetter(_) if !L::DELAYS_REDELIVERY => (
                None,
                Some(
                    Box::pin(self.dead_letter_or_hold(handle, unit, outcome, disposition))
                        as Pin<Box<dyn Future<Output = Settled> + Send + 'a>>,
                ),
            ),
            _ => (
                None,
                Some(Box::pin(async move {
                    let result = carry_out(handle, unit, disposition).await;
                    self.counters.record(result, unit, outcome, disposition)
                })
                    as Pin<Box<dyn Future<Output = Settled> + Send + 'a>>),
            ),
        };
        match (ack, other) {
            (Some(ack), _) => Settling::Ack {
                ack,
                settler: self,
                unit,
                outcome,
                disposition,
            },
            (None, Some(other)) => Settling::Other { other },
            (None, None) => unreachable!("every disposition settles one way"),
        }
    }

    /// Settles a unit delivered more often than the bound allows, never run: to the dead letter
    /// as exhausted (rule 2). Its consumers crashed or stopped on every delivery, so no failure
    /// was ever recorded.
    #[cold]
    pub(crate) async fn past_the_bound<L: Settle>(&self, handle: L, unit: &Unit) -> Settled {
        let detail = format!(
            "delivered {} times (bound {}) without being settled: its consumers stopped or crashed while handling it",
            unit.delivery_count(),
            self.policy.max_deliveries
        );
        let outcome = Outcome::Failed(detail.clone());
        let disposition =
            Disposition::DeadLetter(DeadLetterReason::new(ReasonKind::Exhausted, detail));
        self.settle(handle, unit, &outcome, &disposition).await
    }

    /// Releases a unit that was not run to its end — without counting the delivery where the
    /// mechanism allows ([`Settle::release`]): it did not fail — at once (`after` zero: abandoned
    /// at the drain deadline, or waiting in its key's lane at shutdown), or held for `after`
    /// first (given back to make room behind its key's returned unit, `order.rs`). Never
    /// acknowledged.
    #[cold]
    pub(crate) async fn release<L: Settle>(
        &self,
        handle: L,
        unit: &Unit,
        after: Duration,
        why: &'static str,
    ) -> Settled {
        if after.is_zero() {
            return released(handle.release(unit).await, unit, why, &self.counters);
        }
        let counters = self.counters.clone();
        self.holds
            .spawn(handle, unit, after, Give::Release, move |result, unit| {
                released(result, unit, why, &counters)
            });
        Settled::Held
    }

    /// Gives back at once every unit still held, waits until each was, and counts them all in
    /// `report`: at the end of a run.
    pub(crate) async fn release_held(&self, report: &mut super::report::Report) {
        self.holds.release(report).await;
    }

    /// Dead-letters a unit of a mechanism that cannot delay a redelivery
    /// ([`Settle::DELAYS_REDELIVERY`] is `false`): when the copy fails, the unit is held for
    /// [`AFTER_A_FAILED_DEAD_LETTER`] before it is given back, so that a dead letter that keeps
    /// failing does not become a hot loop, and the wait takes no place of the consumer's
    /// concurrency.
    async fn dead_letter_or_hold<L: Settle>(
        &self,
        mut handle: L,
        unit: &Unit,
        outcome: &Outcome,
        disposition: &Disposition,
    ) -> Settled {
        let Disposition::DeadLetter(reason) = disposition else {
            unreachable!("only a dead letter comes here")
        };
        match handle.copy_to_dead_letter(unit, reason).await {
            Ok(()) => {
                let finished = finish_dead_lettered(handle, unit).await;
                self.counters.record(finished, unit, outcome, disposition)
            }
            Err(error) => {
                let (outcome, disposition, counters) =
                    (outcome.clone(), disposition.clone(), self.counters.clone());
                self.holds.hold_then(
                    handle,
                    unit,
                    AFTER_A_FAILED_DEAD_LETTER,
                    move |returned, unit| {
                        counters.record(
                            Err(copy_failed(error, returned)),
                            unit,
                            &outcome,
                            &disposition,
                        )
                    },
                );
                Settled::Held
            }
        }
    }

    /// Holds `unit` for `after`, then gives it back through `handle` with a zero wait, recorded
    /// as the return it is.
    #[cold]
    fn hold<H: Settle>(&self, handle: H, unit: &Unit, outcome: &Outcome, after: Duration) {
        let (outcome, counters) = (outcome.clone(), self.counters.clone());
        self.holds
            .hold_then(handle, unit, after, move |result, unit| {
                counters.record(result, unit, &outcome, &Disposition::Return { after })
            });
    }
}

pin_project_lite::pin_project! {
    /// A unit being settled ([`Settler::settle`]): its acknowledgement, polled right here (the
    /// common case: a plain future whose poll is inlined into the unit's run, with no state machine
    /// of its own), or a rare path, boxed.
    #[must_use = "a unit is settled only when this is awaited"]
    #[project = SettlingNow]
    pub(crate) enum Settling<'a, A> {
        Ack {
            #[pin]
            ack: A,
            settler: &'a Settler,
            unit: &'a Unit,
            outcome: &'a Outcome,
            disposition: &'a Disposition,
        },
        Other { other: Pin<Box<dyn Future<Output = Settled> + Send + 'a>> },
        Held,
    }
}

impl<A> Future for Settling<'_, A>
where
    A: Future<Output = Result<(), TransportError>>,
{
    type Output = Settled;

    #[inline(always)]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Settled> {
        match self.project() {
            SettlingNow::Ack {
                ack,
                settler,
                unit,
                outcome,
                disposition,
            } => ack
                .poll(cx)
                .map(|result| settler.counters.record(result, unit, outcome, disposition)),
            SettlingNow::Other { other } => other.as_mut().poll(cx),
            SettlingNow::Held => Poll::Ready(Settled::Held),
        }
    }
}

/// How long a unit whose dead-letter copy was not confirmed waits before it is delivered again.
const AFTER_A_FAILED_DEAD_LETTER: Duration = Duration::from_secs(1);

/// The one place the primitives of [`Settle`] are composed (rules 1 and 2):
/// - ack: acknowledge;
/// - return: give back after the wait, counting the delivery;
/// - dead letter: an intact copy first, confirmed by the mechanism; only then is the original
///   finished (acknowledged). If the copy fails, the original is given back — never acknowledged,
///   never dropped — and the failure reported.
#[inline(never)]
pub(crate) async fn carry_out<H: Settle>(
    mut handle: H,
    unit: &Unit,
    disposition: &Disposition,
) -> Result<(), TransportError> {
    match disposition {
        Disposition::Ack => handle.ack(unit).await,
        Disposition::Return { after } if H::DELAYS_REDELIVERY => {
            handle.give_back(unit, *after).await
        }
        // Only `testing::settle` comes here with a wait: the runtime holds such a unit itself.
        Disposition::Return { after } => {
            tokio::time::sleep(*after).await;
            handle.give_back(unit, Duration::ZERO).await
        }
        Disposition::DeadLetter(reason) => match handle.copy_to_dead_letter(unit, reason).await {
            Ok(()) => finish_dead_lettered(handle, unit).await,
            Err(error) => {
                // Only `testing::settle` comes here for a mechanism that cannot delay a
                // redelivery: the runtime holds such a unit itself (`dead_letter_or_hold`).
                if !H::DELAYS_REDELIVERY {
                    tokio::time::sleep(AFTER_A_FAILED_DEAD_LETTER).await;
                }
                let returned = handle.give_back(unit, AFTER_A_FAILED_DEAD_LETTER).await;
                Err(copy_failed(error, returned))
            }
        },
    }
}

/// The second step of a dead letter, once the copy is confirmed: the original finished.
async fn finish_dead_lettered<H: Settle>(handle: H, unit: &Unit) -> Result<(), TransportError> {
    handle.finish_dead_lettered(unit).await.map_err(|error| {
        TransportError::msg(
            "settling a dead-lettered unit",
            format!(
                "{error}; its copy is in the dead letter, and the original will be delivered \
                 again (and dead-lettered again)"
            ),
        )
    })
}

/// The error of a dead letter whose copy failed, after the unit was `returned` instead.
#[cold]
fn copy_failed(error: TransportError, returned: Result<(), TransportError>) -> TransportError {
    TransportError::msg(
        "moving the unit to the dead letter",
        match returned {
            Ok(()) => format!("{error}; the unit was returned instead"),
            Err(e) => format!(
                "{error}; returning it failed too ({e}); the mechanism will deliver it again"
            ),
        },
    )
}

/// Logs and counts a released unit ([`Settler::release`]).
#[cold]
fn released(
    result: Result<(), TransportError>,
    unit: &Unit,
    why: &'static str,
    counters: &Counters,
) -> Settled {
    let id = unit.id().as_str();
    match result {
        Ok(()) => {
            counters.returned.increment(1);
            tracing::info!(unit.id = id, why, "released for redelivery, unsettled");
            Settled::Returned
        }
        Err(error) => {
            counters.settle_failed.increment(1);
            tracing::error!(unit.id = id, why, %error,
                "could not release the unit; the broker will deliver it again");
            Settled::Failed
        }
    }
}

impl Counters {
    /// Logs the disposition once and counts it. A carried-out acknowledgement, the common case,
    /// is handled inline; everything else (with its larger log records) out of line.
    #[inline(always)]
    fn record(
        &self,
        result: Result<(), TransportError>,
        unit: &Unit,
        outcome: &Outcome,
        disposition: &Disposition,
    ) -> Settled {
        match result {
            Ok(()) if matches!(disposition, Disposition::Ack) => self.acked(unit),
            result => self.record_other(result, unit, outcome, disposition),
        }
    }

    #[inline(always)]
    fn acked(&self, unit: &Unit) -> Settled {
        self.acked.increment(1);
        tracing::debug!(
            unit.id = unit.id().as_str(),
            delivery_count = unit.delivery_count().get(),
            disposition = "ack",
            "unit applied"
        );
        Settled::Acked
    }

    #[inline(never)]
    fn record_other(
        &self,
        result: Result<(), TransportError>,
        unit: &Unit,
        outcome: &Outcome,
        disposition: &Disposition,
    ) -> Settled {
        let id = unit.id().as_str();
        let count = unit.delivery_count().get();
        if let Err(error) = result {
            self.settle_failed.increment(1);
            tracing::error!(unit.id = id, delivery_count = count, ?disposition, %error,
                "could not settle the unit; the broker will deliver it again");
            return Settled::Failed;
        }
        match disposition {
            Disposition::Ack => self.acked(unit),
            Disposition::Return { after } => {
                self.returned.increment(1);
                let error = outcome.error();
                tracing::warn!(
                    unit.id = id,
                    delivery_count = count,
                    disposition = "return",
                    backoff_ms = duration_ms(*after),
                    error,
                    "unit failed; returned for redelivery"
                );
                Settled::Returned
            }
            Disposition::DeadLetter(reason) => {
                match reason.kind() {
                    ReasonKind::Malformed => &self.malformed,
                    ReasonKind::Rejected => &self.rejected,
                    ReasonKind::Exhausted => &self.exhausted,
                }
                .increment(1);
                self.observe.dead_lettered();
                tracing::error!(
                    unit.id = id,
                    delivery_count = count,
                    disposition = "dead-letter",
                    reason = reason.kind().as_str(),
                    detail = reason.detail(),
                    "unit moved to the dead letter"
                );
                Settled::DeadLettered
            }
        }
    }
}

fn duration_ms(d: Duration) -> u64 {
    d.as_millis().try_into().unwrap_or(u64::MAX)
}
