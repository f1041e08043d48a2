//! [`Sink`]: where a relay function sends a record, and the only maker of a [`Receipt`].

use std::future::Future;

use super::record::{Receipt, Record};
use crate::error::HandlerError;

/// Sends an outbox record to its receiver and returns a [`Receipt`] only once the receiver
/// confirmed it (rule 6): a broker's publisher confirm, a replicated delivery report, a 2xx.
///
/// The sinks, each in its transport's crate: `delivery::rabbitmq::RabbitSink`,
/// `delivery::kafka::KafkaSink`, `delivery::http::HttpSink`; and, for tests,
/// `delivery::testing::MemorySink` (feature `testing`), whose receipt confirms a send that went
/// nowhere. Each keeps its `send` as a method of its own too, so `sink.send(&record)` needs no
/// import; the trait is for code written once for any of them: a relay's body shared between the
/// production sink and a test's `MemorySink`, or a sink of your own.
///
/// A sink sends under the record's own id (a message id, an idempotency key), the same on every
/// attempt, so the receiver deduplicates the copies a retry sends. A failure the same record will
/// meet on every attempt is [`HandlerError::reject`] (the relay marks it dead at once); anything
/// that may pass later is [`HandlerError::retry`].
///
/// ```
/// use delivery::outbox::{Record, Sink};
/// use delivery::testing::MemorySink;
/// use delivery::{relay, HandlerError, Receipt, State};
///
/// /// What the relay does with a record, written once for any sink.
/// async fn forward(sink: &impl Sink, record: &Record) -> Result<Receipt, HandlerError> {
///     if record.payload().is_empty() {
///         return Err(HandlerError::reject("an empty event"));
///     }
///     sink.send(record).await
/// }
///
/// // In production the state holds `delivery::rabbitmq::RabbitSink` (or another sink).
/// #[derive(Clone)]
/// struct App {
///     sink: MemorySink,
/// }
///
/// #[relay]
/// async fn publish(record: Record, State(app): State<App>) -> Result<Receipt, HandlerError> {
///     forward(&app.sink, &record).await
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let sink = MemorySink::new();
/// let record = Record::new("order-1", "orders.events", None, "placed", 0);
/// let receipt = forward(&sink, &record).await.unwrap();
/// assert_eq!(receipt.record().as_str(), "order-1");
/// # }
/// ```
pub trait Sink: Send + Sync {
    /// Sends `record` and waits for the receiver's confirmation: `Ok` with a [`Receipt`] for
    /// `record`'s id only once the receiver confirmed it.
    fn send(&self, record: &Record) -> impl Future<Output = Result<Receipt, HandlerError>> + Send;
}
