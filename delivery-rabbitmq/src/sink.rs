//! RabbitMQ sink: persistent, mandatory publishes under publisher confirms, pipelined.
//!
//! [`RabbitSink::send`] publishes a record to the exchange named by its topic, with its key as the
//! routing key, persistent (`delivery_mode` 2), `mandatory`, with the record id as `message_id`,
//! on a channel in confirm mode; it returns a [`Receipt`] only for a `basic.ack` of a publish the
//! broker did not return (rule 6). Everything else fails as a *retry*: a `basic.nack`, a
//! `basic.return` (unroutable: no queue bound, the queue deleted), the channel or connection lost
//! before the confirm, and no confirm within the timeout.
//!
//! The publishing is [`ConfirmedPublisher`](crate::ConfirmedPublisher)'s, the one confirmed publisher of the RabbitMQ
//! transport; the sink turns a record into an exchange, a routing key and properties, and the
//! broker's outcome into a [`Receipt`] or a [`HandlerError`].
//!
//! - **Pipelined.** Many `send` calls on one sink (or its clones) share one channel; each awaits its
//!   own confirm, and up to [`window`](RabbitSink::window) publishes are outstanding at once. The
//!   only section held across an await is the write of the frames to the socket, never a broker
//!   round trip.
//! - **Returns are matched exactly.** AMQP does not say which publish a `basic.return` belongs
//!   to, and under pipelining lapin may attach it to a neighbour's confirm. Confirms are therefore
//!   decided in publish order and every returned message is charged to the publish its
//!   (exchange, routing key, `message_id`) names — one record at a time per key, so a record sent
//!   twice at once waits for its first send — and a returned record never gets a receipt because
//!   a neighbour carried its return.
//! - **Reconnect strategy.** A channel the broker closed (a missing exchange: `404 NOT_FOUND`), a
//!   lost connection, or a confirm that did not come within the timeout retires the channel; the
//!   next `send` opens a fresh one (and, for a sink made with [`connect`](RabbitSink::connect), a
//!   fresh connection when the old one is gone). There is no backoff inside the sink: each failed
//!   send is a retry, and the relay's backoff paces the next attempt. Publishes in flight on a
//!   retired channel fail and are retried under the same `message_id`, which the receiver
//!   deduplicates.
//!
//! Declare the exchange (and a queue bound to it) with the deployment; a record sent to an
//! exchange nobody declared closes the channel and is retried until it is marked dead:
//!
//! ```no_run
//! use delivery::lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
//! use delivery::lapin::types::FieldTable;
//! use delivery::lapin::{Connection, ExchangeKind};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let url = "amqp://guest:guest@127.0.0.1:5672/%2f";
//! let connection = Connection::connect(url, Default::default()).await?;
//! let channel = connection.create_channel().await?;
//! let durable = ExchangeDeclareOptions { durable: true, ..Default::default() };
//! channel
//!     .exchange_declare("orders.events".into(), ExchangeKind::Topic, durable, FieldTable::default())
//!     .await?;
//! let queue = QueueDeclareOptions { durable: true, ..Default::default() };
//! channel
//!     .queue_declare("orders.events.audit".into(), queue, FieldTable::default())
//!     .await?;
//! channel
//!     .queue_bind(
//!         "orders.events.audit".into(),
//!         "orders.events".into(),
//!         "#".into(),
//!         QueueBindOptions::default(),
//!         FieldTable::default(),
//!     )
//!     .await?;
//! # Ok(()) }
//! ```

use std::fmt;
use std::future::Future;
use std::time::Duration;

use lapin::types::ShortString;
use lapin::{BasicProperties, ConnectionProperties};
use tracing::debug;

use crate::connector::RabbitConnector;
use crate::publish::{ConfirmedPublisher, Outcome};
use delivery_core::HandlerError;
use delivery_core::outbox::{Receipt, Record, Sink};
use delivery_core::transport::TransportError;

/// Sends outbox records to RabbitMQ and returns a [`Receipt`] only once the broker confirmed
/// (publisher confirms), pipelined on one channel. Cloning is cheap; clones share the channel and
/// the window.
///
/// Each record goes to the exchange named by its topic, with its key (or `""`) as the routing key,
/// persistent, `mandatory`, with the record id as `message_id` — the same on every attempt, so
/// the receiver deduplicates. Returned messages are charged by (exchange, routing key,
/// `message_id`) to the record they name, never to the neighbour whose confirm lapin attached
/// them to.
///
/// **Reconnect strategy:** a channel the broker closed (a publish to a missing exchange), a lost
/// connection, or a confirm that did not come within the timeout retires the channel, and the next
/// send opens a fresh one — and, for a sink made with [`connect`](Self::connect), redials the
/// connection when it is gone. No backoff inside the sink: every failed send is a retry that the
/// relay backs off. Publishes in flight on a retired channel fail too and are retried under their
/// `message_id`. The sink spawns one tokio task per channel (its publisher), so it is used inside a
/// tokio runtime.
///
/// ```no_run
/// use delivery::rabbitmq::RabbitSink;
/// use delivery::outbox::{Receipt, Record};
/// use delivery::HandlerError;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let sink = RabbitSink::connect("amqp://guest:guest@127.0.0.1:5672/%2f").await?;
/// let record = Record::new("order-42-placed", "orders.events", Some("order.placed".into()), &b"{}"[..], 0);
/// let sent: Result<Receipt, HandlerError> = sink.send(&record).await;
/// # let _ = sent;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RabbitSink {
    publisher: ConfirmedPublisher,
    content_type: Option<ShortString>,
}

impl fmt::Debug for RabbitSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RabbitSink")
            .field("timeout", &self.publisher.timeout())
            .field("content_type", &self.content_type)
            .finish_non_exhaustive()
    }
}

impl RabbitSink {
    /// A sink on a connection of its own to `url` (`amqp://user:pass@host:port/vhost`), opened
    /// now. Publishing on its own connection keeps the broker's flow control on publishers from
    /// stalling consumers; a lost connection is redialled on the next [`send`](Self::send).
    pub async fn connect(url: &str) -> Result<Self, TransportError> {
        let properties =
            ConnectionProperties::default().with_connection_name("delivery outbox sink".into());
        RabbitSink::connect_with(url, properties).await
    }

    /// [`connect`](Self::connect) with lapin's connection `properties` (a connection name shown
    /// in the management UI, an authentication provider), used for every dial.
    pub async fn connect_with(
        url: &str,
        properties: ConnectionProperties,
    ) -> Result<Self, TransportError> {
        RabbitSink::new(RabbitConnector::url_with(url, properties)).await
    }

    /// A sink publishing through `connector` ([`RabbitConnector`]): your own `Connection` (pass
    /// it, or an `Arc` of it to keep using it elsewhere), a factory of yours, or a URL. Its
    /// confirm channel is opened now and reopened on the next [`send`](Self::send) after the
    /// broker closed it. A connection of yours stays yours: if it is lost, sends fail (as
    /// retries) until lapin recovers it (`ConnectionProperties::enable_auto_recover`); a factory
    /// is asked for a new one.
    ///
    /// ```no_run
    /// use delivery::lapin::{Connection, ConnectionProperties};
    /// use delivery::rabbitmq::RabbitSink;
    /// use std::sync::Arc;
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// let properties = ConnectionProperties::default().with_connection_name("orders relay".into());
    /// let connection = Arc::new(Connection::connect("amqp://guest:guest@127.0.0.1:5672/%2f", properties).await?);
    /// let sink = RabbitSink::new(connection.clone()).await?;
    /// # let _ = sink; Ok(()) }
    /// ```
    pub async fn new(connector: impl Into<RabbitConnector>) -> Result<Self, TransportError> {
        let publisher = ConfirmedPublisher::new(connector);
        publisher.open().await?;
        Ok(RabbitSink {
            publisher,
            content_type: Some(ShortString::from("application/json")),
        })
    }

    /// How long a send waits, in all, for a window slot, the channel and the broker's confirm
    /// (default [`DEFAULT_CONFIRM_TIMEOUT`](crate::DEFAULT_CONFIRM_TIMEOUT)). A send that times out fails as a retry, and the
    /// channel is replaced on the next send.
    pub fn confirm_timeout(mut self, timeout: Duration) -> Self {
        self.publisher = self.publisher.confirm_timeout(timeout);
        self
    }

    /// How many publishes may await their confirm at once (default [`DEFAULT_CONFIRM_WINDOW`](crate::DEFAULT_CONFIRM_WINDOW), at least
    /// 1); a send beyond it waits for a slot. Applies to this sink and the clones made from it
    /// afterwards.
    pub fn window(mut self, publishes: usize) -> Self {
        self.publisher = self.publisher.window(publishes);
        self
    }

    /// The `content_type` property of every publish (default `application/json`); `None` sends
    /// none. A value longer than 255 bytes is not representable in AMQP and is ignored.
    pub fn content_type(mut self, content_type: Option<&str>) -> Self {
        self.content_type = content_type.and_then(|value| ShortString::try_new(value).ok());
        self
    }

    /// Publishes `record` and waits for the broker's confirm.
    ///
    /// `Ok` only for a `basic.ack` of a publish that was not returned. A `basic.nack`, a return
    /// (nothing bound to route it to), a lost channel or connection, and a timeout fail as
    /// [`HandlerError::retry`]. A topic, key or id longer than AMQP's 255-byte limit can never be
    /// published and fails as [`HandlerError::reject`].
    pub async fn send(&self, record: impl AsRef<Record>) -> Result<Receipt, HandlerError> {
        let record = record.as_ref();
        let (exchange, routing_key, properties) = self.prepare(record)?;
        let outcome = self
            .publisher
            .send(exchange, routing_key, record.payload().clone(), properties)
            .await;
        debug!(record = %record.id(), topic = record.topic(), ?outcome, "publish settled");
        let kind = outcome.kind();
        let retry = |context: &'static str, detail: String| {
            Err(HandlerError::retry(
                TransportError::msg(context, detail).with_kind(kind),
            ))
        };
        match outcome {
            Outcome::Confirmed => Ok(Receipt::confirmed(record.id().clone())),
            Outcome::Returned { code, text } => retry(
                "publishing",
                format!(
                    "the broker returned record {} as unroutable ({code} {text}): is a queue bound to exchange `{}` for routing key `{}`?",
                    record.id(),
                    record.topic(),
                    record.key().unwrap_or("")
                ),
            ),
            Outcome::Nacked => retry(
                "publishing",
                format!("the broker refused record {} (basic.nack)", record.id()),
            ),
            Outcome::NotConfirmMode => {
                retry("publishing", "the channel is not in confirm mode".into())
            }
            Outcome::Lost(reason) => retry(
                "publishing",
                format!(
                    "the channel was lost before the broker confirmed record {}: {reason}",
                    record.id()
                ),
            ),
            Outcome::TimedOut(timeout) => retry(
                "waiting for the publisher confirm",
                format!("no confirm for record {} within {timeout:?}", record.id()),
            ),
            Outcome::Unavailable(error) => Err(HandlerError::retry(error)),
        }
    }

    /// The record's exchange, routing key and properties; a name AMQP cannot carry is rejected.
    fn prepare(
        &self,
        record: &Record,
    ) -> Result<(ShortString, ShortString, BasicProperties), HandlerError> {
        let short = |what: &str, value: &str| {
            ShortString::try_new(value).map_err(|error| {
                HandlerError::reject(TransportError::msg(
                    "publishing",
                    format!(
                        "the record's {what} cannot be sent over AMQP: {error} (record {})",
                        record.id()
                    ),
                ))
            })
        };
        let exchange = short("topic (exchange)", record.topic())?;
        let routing_key = short("key (routing key)", record.key().unwrap_or(""))?;
        let message_id = short("id (message_id)", record.id().as_str())?;
        let mut properties = BasicProperties::default()
            .with_delivery_mode(2)
            .with_message_id(message_id);
        if let Some(content_type) = &self.content_type {
            properties = properties.with_content_type(content_type.clone());
        }
        // The record's headers (its trace context: see `delivery_core::trace`).
        let mut headers = lapin::types::FieldTable::default();
        for (name, value) in delivery_core::trace::outgoing("rabbitmq", record.headers()).iter() {
            headers.insert(
                name.into(),
                lapin::types::AMQPValue::LongString(value.to_vec().into()),
            );
        }
        if let Some(stamp) = record.stamp() {
            // The record's order, for the consumer's store guard (rule 4): RabbitMQ has none.
            headers.insert(
                delivery_core::headers::STAMP.into(),
                lapin::types::AMQPValue::LongLongInt(i64::try_from(stamp.0).unwrap_or(i64::MAX)),
            );
        }
        if !headers.inner().is_empty() {
            properties = properties.with_headers(headers);
        }
        Ok((exchange, routing_key, properties))
    }
}

impl Sink for RabbitSink {
    /// [`RabbitSink::send`].
    fn send(&self, record: &Record) -> impl Future<Output = Result<Receipt, HandlerError>> + Send {
        RabbitSink::send(self, record)
    }
}
