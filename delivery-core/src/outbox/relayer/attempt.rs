//! One attempt: the relay function's future, guarded against panics (as the consumer's handlers
//! are, by `runtime::guard`) and bounded by the attempt
//! timeout, decided into a mark — delivered only for a [`Receipt`](crate::outbox::Receipt) naming
//! the record (rule 6).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::super::record::{Attempt, Record, Relay};
use super::super::store::Mark;
use crate::disposition::{DeadLetterReason, Outcome, ReasonKind, RedeliveryPolicy, decide};
use crate::runtime;
use crate::unit::DeliveryCount;

/// A boxed future the relay loop holds.
pub(super) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// One attempt's end, waiting to be written back.
pub(super) struct Finished {
    pub(super) mark: Mark,
    /// Which attempt this was (1 for the first).
    pub(super) attempt: u32,
}

/// Settings every attempt reads.
pub(super) struct Attempts {
    pub(super) policy: RedeliveryPolicy,
    pub(super) timeout: Duration,
    pub(super) abandon: CancellationToken,
    /// The outbox table's name, for the attempts' spans.
    pub(super) outbox: Arc<str>,
}

/// Starts one attempt: the relay function's future (a panic while resolving its parameters is a
/// failure too), bounded by the attempt timeout, decided into a mark.
pub(super) fn start<S, R: Relay<S>>(
    relay: &R,
    record: Record,
    state: &S,
    attempts: &Arc<Attempts>,
) -> BoxFuture<Finished> {
    let attempt = record.attempts().saturating_add(1);
    if attempt > attempts.policy.max_deliveries.get() {
        // Every earlier attempt was cut short (the relay died during each): dead before the
        // relay function runs again, as a consumer's unit that arrives past the bound.
        return Box::pin(std::future::ready(past_the_bound(record, attempt)));
    }
    // The attempt's span, its parent the trace context written with the record.
    let span = crate::trace::relay_span(
        &attempts.outbox,
        record.topic(),
        record.id().as_str(),
        record.headers(),
        attempt,
    );
    let call = span.in_scope(|| runtime::guard(|| relay.call(&record, state)));
    let attempts = attempts.clone();
    let attempt_run = async move {
        let result = match call {
            Err(panicked) => Err(panicked),
            Ok(call) => {
                let call = tokio::time::timeout(attempts.timeout, runtime::guarded(call));
                tokio::select! {
                    biased;
                    result = call => match result {
                        Ok(attempt) => attempt,
                        Err(_) => Err(Outcome::Failed(format!(
                            "no answer within the attempt timeout ({} ms)",
                            attempts.timeout.as_millis()
                        ))),
                    },
                    () = attempts.abandon.cancelled() => {
                        return Finished { mark: Mark::Release(record.id().clone()), attempt };
                    }
                }
            }
        };
        // A receipt naming the record is the one applied outcome; everything else is decided
        // as a consumer's failure is.
        let outcome = match result {
            Ok(Attempt::Delivered(receipt)) if receipt.record() == record.id() => Outcome::Applied,
            Ok(Attempt::Delivered(receipt)) => Outcome::Failed(format!(
                "the receipt names record {}, not {}",
                receipt.record(),
                record.id()
            )),
            // As a consumer's handler error: a reject, or a retry (after its wait, if it asked).
            Ok(Attempt::Failed(error)) => crate::handler::outcome_of(error),
            Ok(Attempt::Malformed(malformed)) => Outcome::Malformed(malformed.to_string()),
            Err(outcome) => outcome,
        };
        let id = record.id();
        let count = DeliveryCount::new(attempt);
        let disposition = decide(&outcome, count, &attempts.policy, id.as_str());
        let mark = Mark::of(id.clone(), disposition, &outcome);
        Finished { mark, attempt }
    };
    Box::pin(attempt_run.instrument(span))
}

#[cold]
fn past_the_bound(record: Record, attempt: u32) -> Finished {
    let detail = format!(
        "attempt {attempt} claimed past the bound ({} attempts) without an answer: the relay stopped or crashed during the earlier ones",
        attempt - 1
    );
    Finished {
        mark: Mark::Dead {
            id: record.id().clone(),
            reason: DeadLetterReason::new(ReasonKind::Exhausted, detail),
        },
        attempt,
    }
}
