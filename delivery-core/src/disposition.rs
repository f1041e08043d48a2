//! The one decision every transport shares: what happens to a unit once its handler has run.
//!
//! [`decide`] is a pure function of the outcome, the mechanism's delivery count and the policy.
//! Transports only carry out its answer; none of them decides on its own.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::num::NonZeroU32;
use std::time::Duration;

use crate::unit::DeliveryCount;

/// How a handler's run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The effect is committed (or was already applied by an earlier delivery).
    Applied,
    /// A transient failure: the handler returned [`HandlerError::retry`](crate::HandlerError::retry)
    /// or an ordinary error through `?`.
    Failed(String),
    /// A transient failure after which the handler asked for no new attempt before `after`
    /// ([`HandlerError::after`](crate::HandlerError::after), e.g. a downstream's `Retry-After`):
    /// returned after the longer of `after` and the backoff.
    RetryAfter {
        /// What failed.
        error: String,
        /// The earliest the unit should be tried again, from now.
        after: Duration,
    },
    /// The handler panicked. Treated as a transient failure: the unit is returned, never acked.
    Panicked(String),
    /// The handler refused the unit for good ([`HandlerError::reject`](crate::HandlerError::reject)).
    Rejected(String),
    /// The unit could not be decoded into the handler's parameters; it never reached the handler.
    Malformed(String),
}

impl Outcome {
    /// What went wrong, as the handler or the runtime put it; empty for [`Outcome::Applied`].
    pub fn error(&self) -> &str {
        match self {
            Outcome::Applied => "",
            Outcome::Failed(e)
            | Outcome::RetryAfter { error: e, .. }
            | Outcome::Panicked(e)
            | Outcome::Rejected(e)
            | Outcome::Malformed(e) => e,
        }
    }

    /// The outcome of a handler that panicked with `panic` (the payload `catch_unwind` returns).
    #[cold]
    pub fn panicked(panic: &(dyn std::any::Any + Send)) -> Outcome {
        let text = panic
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("a non-text payload");
        Outcome::Panicked(format!("handler panicked: {text}"))
    }
}

/// What the runtime does with a unit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Disposition {
    /// Acknowledge: the effect is committed.
    Ack,
    /// Return the unit for redelivery, once `after` has passed.
    Return {
        /// The backoff before the unit may be delivered again.
        after: Duration,
    },
    /// Move the unit, intact, to the dead letter, and only then acknowledge it.
    DeadLetter(DeadLetterReason),
}

/// Why a unit went to the dead letter. Recorded with it, for the operator.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DeadLetterReason {
    kind: ReasonKind,
    detail: String,
}

/// The kind of a [`DeadLetterReason`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ReasonKind {
    /// The payload could not be decoded (invalid JSON, wrong shape, invalid UTF-8, empty).
    Malformed,
    /// The handler refused the unit as permanently failed.
    Rejected,
    /// The unit failed on its last allowed delivery.
    Exhausted,
}

impl ReasonKind {
    /// The reason as recorded in headers and metrics: `malformed`, `rejected` or `exhausted`.
    pub fn as_str(self) -> &'static str {
        match self {
            ReasonKind::Malformed => "malformed",
            ReasonKind::Rejected => "rejected",
            ReasonKind::Exhausted => "exhausted",
        }
    }

    /// Parses [`ReasonKind::as_str`]'s output.
    pub fn parse(s: &str) -> Option<ReasonKind> {
        match s {
            "malformed" => Some(ReasonKind::Malformed),
            "rejected" => Some(ReasonKind::Rejected),
            "exhausted" => Some(ReasonKind::Exhausted),
            _ => None,
        }
    }
}

impl fmt::Display for ReasonKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl DeadLetterReason {
    /// A reason of `kind` with a human-readable detail.
    pub fn new(kind: ReasonKind, detail: impl Into<String>) -> Self {
        DeadLetterReason {
            kind,
            detail: detail.into(),
        }
    }

    /// The kind of reason.
    pub fn kind(&self) -> ReasonKind {
        self.kind
    }

    /// The detail: the decode error, the handler's error, the last failure.
    pub fn detail(&self) -> &str {
        &self.detail
    }
}

impl fmt::Display for DeadLetterReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.detail)
    }
}

/// The bound on redelivery and the backoff before each return.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedeliveryPolicy {
    /// The most deliveries a unit gets. A unit that fails on this delivery goes to the dead letter.
    pub max_deliveries: NonZeroU32,
    /// The wait before a returned unit is delivered again.
    pub backoff: Backoff,
}

impl RedeliveryPolicy {
    /// The default bound: five deliveries.
    pub const DEFAULT_MAX_DELIVERIES: NonZeroU32 = NonZeroU32::new(5).unwrap();
}

impl Default for RedeliveryPolicy {
    fn default() -> Self {
        RedeliveryPolicy {
            max_deliveries: Self::DEFAULT_MAX_DELIVERIES,
            backoff: Backoff::default(),
        }
    }
}

/// An exponential backoff that grows with the delivery count: `initial * factor^(count - 1)`,
/// capped at `max`, with a jitter derived from the unit's id so replicas retrying one outage
/// spread out while the decision stays a pure function.
///
/// The default grows from 100 ms, four-fold per delivery, to a cap of 30 s: 0.1, 0.4, 1.6, 6.4,
/// 25.6, 30 s... With the default bound of 5 deliveries the waits add up to at least 4 s (jitter
/// halves a wait at most), 8.5 s without jitter; with 6 deliveries (a quorum queue with
/// `x-delivery-limit = 5`) at least 17 s, so a dependency that is down for a few seconds does not
/// exhaust the bound (rule 1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    factor: u32,
    jitter: bool,
}

impl Backoff {
    /// Grows from `initial`, doubling per delivery, up to `max`, with jitter. Change the growth
    /// with [`factor`](Self::factor).
    pub fn exponential(initial: Duration, max: Duration) -> Self {
        Backoff {
            initial,
            max: max.max(initial),
            factor: 2,
            jitter: true,
        }
    }

    /// Multiplies the wait by `factor` per delivery instead of 2 (at least 1: a constant wait).
    pub fn factor(mut self, factor: u32) -> Self {
        self.factor = factor.max(1);
        self
    }

    /// No wait at all: a returned unit is redelivered at once. For tests.
    pub fn none() -> Self {
        Backoff {
            initial: Duration::ZERO,
            max: Duration::ZERO,
            factor: 1,
            jitter: false,
        }
    }

    /// Disables the jitter, so delays are exactly `initial * factor^(count - 1)` up to `max`.
    pub fn without_jitter(mut self) -> Self {
        self.jitter = false;
        self
    }

    /// The first delay.
    pub fn initial(&self) -> Duration {
        self.initial
    }

    /// The cap.
    pub fn max(&self) -> Duration {
        self.max
    }

    /// The wait before the delivery after `count` of the unit (or outbox record) whose id is
    /// `id`. With jitter, it lies between half and all of the exponential delay (and never under
    /// half of `initial`).
    pub fn delay(&self, count: DeliveryCount, id: &str) -> Duration {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        id.hash(&mut hasher);
        count.get().hash(&mut hasher);
        // From the unit's identity: the same unit and count always wait the same, which keeps
        // `decide` pure.
        self.wait(count.get(), hasher.finish())
    }

    /// The wait after the `n`th attempt (from 1), its jitter taken from `seed`: between half and
    /// all of `initial * factor^(n - 1)`, capped at `max`.
    pub(crate) fn wait(&self, n: u32, seed: u64) -> Duration {
        let exponent = n.saturating_sub(1).min(64);
        let full = self
            .initial
            .saturating_mul(self.factor.saturating_pow(exponent))
            .min(self.max);
        if !self.jitter || full.is_zero() {
            return full;
        }
        // A fraction in [0.5, 1.0].
        let fraction = 0.5 + (seed % 1024) as f64 / 2046.0;
        full.mul_f64(fraction)
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::exponential(Duration::from_millis(100), Duration::from_secs(30)).factor(4)
    }
}

/// Decides a unit's disposition from its outcome, the mechanism's delivery count and the policy
/// (the relay decides an outbox record's the same way, its attempts as the count). `id`, the
/// unit's or the record's own, seeds the backoff's jitter.
///
/// - applied: acknowledge (also on a redelivery past the bound: the effect is there);
/// - malformed or rejected: dead letter now, whatever the count (rule 2: never through
///   redeliveries it cannot pass);
/// - failed or panicked below the bound: return after the backoff for this count (or after the
///   handler's own [`after`](crate::HandlerError::after), if that is longer);
/// - failed or panicked on the last allowed delivery (or later): dead letter as exhausted.
///
/// ```
/// use delivery_core::{decide, Backoff, DeliveryCount, Disposition, Outcome, RedeliveryPolicy, ReasonKind, UnitId};
/// use std::num::NonZeroU32;
///
/// let policy = RedeliveryPolicy { max_deliveries: NonZeroU32::new(3).unwrap(), backoff: Backoff::none() };
/// let id = UnitId::new("u-1");
/// let failed = Outcome::Failed("db down".into());
/// assert!(matches!(decide(&failed, DeliveryCount::new(2), &policy, id.as_str()), Disposition::Return { .. }));
/// match decide(&failed, DeliveryCount::new(3), &policy, id.as_str()) {
///     Disposition::DeadLetter(reason) => assert_eq!(reason.kind(), ReasonKind::Exhausted),
///     other => panic!("{other:?}"),
/// }
/// ```
#[inline]
pub fn decide(
    outcome: &Outcome,
    count: DeliveryCount,
    policy: &RedeliveryPolicy,
    id: &str,
) -> Disposition {
    let (error, what) = match outcome {
        Outcome::Applied => return Disposition::Ack,
        Outcome::Malformed(error) => {
            return Disposition::DeadLetter(DeadLetterReason::new(
                ReasonKind::Malformed,
                error.clone(),
            ));
        }
        Outcome::Rejected(error) => {
            return Disposition::DeadLetter(DeadLetterReason::new(
                ReasonKind::Rejected,
                error.clone(),
            ));
        }
        Outcome::Failed(error) => (error, "failed"),
        Outcome::RetryAfter { error, .. } => (error, "failed"),
        Outcome::Panicked(message) => (message, "panicked"),
    };
    let max = policy.max_deliveries.get();
    if count.get() >= max {
        return Disposition::DeadLetter(DeadLetterReason::new(
            ReasonKind::Exhausted,
            format!("{what} on delivery {count} of {max}: {error}"),
        ));
    }
    let backoff = policy.backoff.delay(count, id);
    Disposition::Return {
        after: match outcome {
            Outcome::RetryAfter { after, .. } => backoff.max(*after),
            _ => backoff,
        },
    }
}
