//! In-memory sink, for tests only (feature `testing`): records what was sent and confirms it, or
//! fails as told. Its [`Receipt`] proves nothing went anywhere, so it is not among the
//! sinks (`delivery::rabbitmq::RabbitSink`, `delivery::kafka::KafkaSink`, `delivery::http::HttpSink`) and is not compiled without the feature: a relay wired
//! to it in a production build would mark records delivered while nothing went out (rule 6).

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;

use crate::error::HandlerError;
use crate::outbox::{Receipt, Record, RecordId, Sink};

/// A sink that keeps what it is sent, in memory, and returns a [`Receipt`] for each record it
/// accepts — the receiver of a relay under test. It can be told to fail: transiently (the relay
/// retries), with a `Retry-After`, permanently (the record is dead at once), to answer only
/// after a delay, or never (an attempt left hanging, as a relay that dies mid-flight leaves it).
///
/// Every send is recorded in [`sent`](Self::sent) with the attempt's record, including failed
/// ones ([`Sent::accepted`] tells which), so a test sees each attempt and its id.
///
/// ```
/// use delivery_core::outbox::Record;
/// use delivery_core::testing::{MemorySink, SinkFailure};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let sink = MemorySink::new();
/// let record = Record::new("order-1", "orders.events", Some("c-7".into()), "placed", 0);
/// sink.fail_next(1, SinkFailure::Transient);
/// assert!(sink.send(&record).await.unwrap_err().is_retry());
/// let receipt = sink.send(&record).await.unwrap();
/// assert_eq!(receipt.record().as_str(), "order-1");
/// assert_eq!(sink.accepted().len(), 1);
/// assert_eq!(sink.sent().len(), 2);
/// # }
/// ```
#[derive(Clone, Default)]
pub struct MemorySink {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Default)]
struct Inner {
    sent: Vec<Sent>,
    /// Failures for the next sends, whatever the record.
    next: VecDeque<SinkFailure>,
    /// Failures for one record's sends, consumed one per send (`None` count: every send).
    by_record: HashMap<RecordId, (SinkFailure, Option<u32>)>,
    latency: Duration,
    in_flight: usize,
    most_in_flight: usize,
}

/// How a [`MemorySink`] is told to fail a send.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SinkFailure {
    /// A transient failure ([`HandlerError::retry`]): the relay attempts the record again.
    Transient,
    /// A transient failure whose receiver asks to wait `after` ([`HandlerError::after`]).
    RetryAfter(Duration),
    /// A permanent refusal ([`HandlerError::reject`]): the record is dead at once.
    Permanent,
    /// No answer at all: the send never completes (the relay's attempt timeout, or its
    /// shutdown, ends it).
    Hang,
}

/// One send, as the sink received it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sent {
    /// The record's id: what a real sink sends as the message id or idempotency key.
    pub id: RecordId,
    /// The topic.
    pub topic: String,
    /// The key.
    pub key: Option<String>,
    /// The payload, as written.
    pub payload: Bytes,
    /// The record's failed attempts before this one.
    pub attempts: u32,
    /// Whether the sink accepted it (and returned a receipt).
    pub accepted: bool,
}

impl MemorySink {
    /// An empty sink that accepts everything.
    pub fn new() -> Self {
        MemorySink::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A test thread that panicked while holding the lock leaves the list usable.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Sends `record`: recorded, then confirmed with a [`Receipt`] for its id — unless told to
    /// fail.
    pub async fn send(&self, record: impl AsRef<Record>) -> Result<Receipt, HandlerError> {
        let record = record.as_ref();
        let (failure, latency) = {
            let mut inner = self.lock();
            let failure = match inner.by_record.get_mut(record.id()) {
                Some((failure, remaining)) => {
                    let failure = failure.clone();
                    match remaining {
                        Some(0) => None,
                        Some(n) => {
                            *n -= 1;
                            Some(failure)
                        }
                        None => Some(failure),
                    }
                }
                None => None,
            };
            let failure = failure.or_else(|| inner.next.pop_front());
            inner.sent.push(Sent {
                id: record.id().clone(),
                topic: record.topic().to_owned(),
                key: record.key().map(str::to_owned),
                payload: record.payload().clone(),
                attempts: record.attempts(),
                accepted: failure.is_none(),
            });
            inner.in_flight += 1;
            inner.most_in_flight = inner.most_in_flight.max(inner.in_flight);
            (failure, inner.latency)
        };
        let _done = InFlight(self);
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        match failure {
            None => Ok(Receipt::confirmed(record.id().clone())),
            Some(SinkFailure::Transient) => Err(HandlerError::retry(format!(
                "memory sink: transient failure sending {}",
                record.id()
            ))),
            Some(SinkFailure::RetryAfter(after)) => Err(HandlerError::retry(format!(
                "memory sink: busy, retry after {} ms",
                after.as_millis()
            ))
            .after(after)),
            Some(SinkFailure::Permanent) => Err(HandlerError::reject(format!(
                "memory sink: refused {}",
                record.id()
            ))),
            Some(SinkFailure::Hang) => std::future::pending().await,
        }
    }

    /// Fails the next `n` sends, whatever their record, with `failure`.
    pub fn fail_next(&self, n: usize, failure: SinkFailure) {
        let mut inner = self.lock();
        inner.next.extend(std::iter::repeat_n(failure, n));
    }

    /// Fails the next `n` sends of record `id` with `failure`.
    pub fn fail_record(&self, id: impl Into<RecordId>, n: u32, failure: SinkFailure) {
        self.lock().by_record.insert(id.into(), (failure, Some(n)));
    }

    /// Fails every send of record `id` with `failure`, until [`heal`](Self::heal).
    pub fn fail_record_always(&self, id: impl Into<RecordId>, failure: SinkFailure) {
        self.lock().by_record.insert(id.into(), (failure, None));
    }

    /// Forgets every failure it was told.
    pub fn heal(&self) {
        let mut inner = self.lock();
        inner.next.clear();
        inner.by_record.clear();
    }

    /// Answers each send only after `latency` (a receiver's confirm round trip).
    pub fn latency(&self, latency: Duration) {
        self.lock().latency = latency;
    }

    /// Every send so far, in the order received, failed ones included.
    pub fn sent(&self) -> Vec<Sent> {
        self.lock().sent.clone()
    }

    /// The sends it accepted (returned a receipt for), in order.
    pub fn accepted(&self) -> Vec<Sent> {
        self.lock()
            .sent
            .iter()
            .filter(|s| s.accepted)
            .cloned()
            .collect()
    }

    /// The most sends that were in progress at once (how far a relay pipelines).
    pub fn most_in_flight(&self) -> usize {
        self.lock().most_in_flight
    }
}

impl Sink for MemorySink {
    /// [`MemorySink::send`].
    fn send(&self, record: &Record) -> impl Future<Output = Result<Receipt, HandlerError>> + Send {
        MemorySink::send(self, record)
    }
}

/// Counts a send out when it ends, also when its future is dropped.
struct InFlight<'a>(&'a MemorySink);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.lock().in_flight -= 1;
    }
}
