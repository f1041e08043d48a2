//! Kafka sink (rdkafka): an idempotent producer with `acks=all`, the record id in a `message-id`
//! header.
//!
//! [`KafkaSink::send`] produces a record to the topic named by its topic, with its key as the
//! message key (no key: a null key), its payload byte for byte, and a `message-id` header holding
//! the record id — the same on every attempt, so the receiver deduplicates (rule 6) — and returns
//! a [`Receipt`] only for a delivery report without error: with `acks=all`, once every in-sync
//! replica has the message.
//!
//! | delivery report | failure |
//! |---|---|
//! | no error | none: a receipt |
//! | the message timed out (`message.timeout.ms`: broker unreachable, topic missing), a broker or network error, a lost leader, a full local queue, a fatal error of the idempotent producer, any other error the broker reports | [`HandlerError::retry`] |
//! | a topic name Kafka does not allow, a payload larger than the producer's `message.max.bytes`, a topic the broker calls invalid | [`HandlerError::reject`]: the same record can never pass; the relay marks it dead at once |
//!
//! The broker answers for a whole batch of messages, so an error it reports against the batch
//! (too large, an invalid record) is a retry for each of them: a neighbour's fault never marks a
//! record dead, and a record that keeps failing is marked dead by the relay's bound.
//!
//! - **Idempotent, `acks=all`, always.** [`KafkaSink::with_config`] takes any librdkafka property
//!   (security, `linger.ms`, compression) but sets `enable.idempotence=true` and `acks=all` over
//!   whatever it was given: librdkafka's own retries then never write a message twice or out of
//!   order within a partition, and the report comes only once the message is replicated.
//! - **Bounded.** `message.timeout.ms` is how long librdkafka keeps trying before it reports the
//!   message failed. The sink's default, [`DEFAULT_DELIVERY_TIMEOUT`] (librdkafka's own is 5
//!   minutes), is under the relay's default attempt timeout (30 s), so the delivery report, not
//!   the relay giving up, ends an attempt; keep it so when changing either. A send dropped before
//!   its report (the relay's attempt timed out first) leaves the message in librdkafka's queue;
//!   if it still reaches the broker, the retry sends a second copy under the same `message-id`.
//! - **Fatal errors.** An idempotent producer that hits a fatal error (the broker lost its
//!   sequence state) refuses every later message. The sink then fails that send as a retry and
//!   replaces the producer with a fresh one from the same configuration for the next send.
//! - **Pipelined.** Many `send` calls on one sink (or its clones) share one producer; each awaits
//!   its own delivery report, and librdkafka batches the messages in flight.
//!
//! Create the topics with the deployment; a record for a topic that does not exist stays in
//! librdkafka's queue until `message.timeout.ms` and is retried:
//!
//! ```no_run
//! use delivery::kafka::client::ClientConfig;
//! use delivery::kafka::client::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
//! use delivery::kafka::client::client::DefaultClientContext;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
//!     .set("bootstrap.servers", "127.0.0.1:9092")
//!     .create()?;
//! let topic = NewTopic::new("orders.events", 3, TopicReplication::Fixed(1));
//! for created in admin.create_topics([&topic], &AdminOptions::new()).await? {
//!     created.map_err(|(topic, code)| format!("creating {topic}: {code}"))?;
//! }
//! # Ok(()) }
//! ```

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use tracing::debug;

use delivery_core::HandlerError;
use delivery_core::outbox::{Receipt, Record, Sink};
use delivery_core::transport::{TransportError, TransportErrorKind};

/// The header carrying the record id: the one [`KafkaSource`](crate::KafkaSource) reads
/// as the unit id.
pub const MESSAGE_ID: &str = delivery_core::headers::MESSAGE_ID;

/// How long librdkafka tries to deliver a message (`message.timeout.ms`) unless the
/// configuration says otherwise: under the relay's default attempt timeout (30 s).
pub const DEFAULT_DELIVERY_TIMEOUT: Duration = Duration::from_secs(20);

/// How long a send waits for the delivery report beyond `message.timeout.ms` before it gives up
/// on its own: librdkafka reports every message by then, so this only bounds a report that is
/// lost.
const REPORT_GRACE: Duration = Duration::from_secs(5);

/// The pause before enqueueing again when librdkafka's local queue is full: deliveries in flight
/// free room as their reports come back.
const QUEUE_FULL_PAUSE: Duration = Duration::from_millis(20);

/// Kafka's longest topic name.
const MAX_TOPIC_LEN: usize = 249;

/// Sends outbox records to Kafka and returns a [`Receipt`] only for a delivery report without
/// error, from an idempotent producer with `acks=all`. Cloning is cheap; clones share the
/// producer.
///
/// Each record goes to the topic named by its topic, keyed by its key (no key: a null key, and
/// librdkafka's partitioner spreads such records), with its payload intact and its id in the
/// [`MESSAGE_ID`] header — the same on every attempt, so the receiver deduplicates.
///
/// The producer has its own polling thread, so the sink needs no task of its own; a send awaits
/// the report inside any tokio runtime.
///
/// ```no_run
/// use delivery::kafka::KafkaSink;
/// use delivery::outbox::{Receipt, Record};
/// use delivery::HandlerError;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let sink = KafkaSink::new("127.0.0.1:9092")?;
/// let record = Record::new("order-42-placed", "orders.events", Some("order-42".into()), &b"{}"[..], 0);
/// let sent: Result<Receipt, HandlerError> = sink.send(&record).await;
/// # let _ = sent;
/// # Ok(()) }
/// ```
///
/// Any other librdkafka property through rdkafka's `ClientConfig`, re-exported as
/// [`kafka::client`](crate::client) (the idempotence and `acks` are the sink's and cannot
/// be replaced):
///
/// ```
/// use delivery::kafka::client::ClientConfig;
/// use delivery::kafka::KafkaSink;
/// use std::time::Duration;
///
/// let sink = KafkaSink::with_config(
///     ClientConfig::new()
///         .set("bootstrap.servers", "kafka-1.internal:9092,kafka-2.internal:9092")
///         .set("compression.type", "lz4")
///         .set("message.timeout.ms", "10000")
///         .clone(),
/// )
/// .unwrap();
/// assert_eq!(sink.delivery_timeout(), Duration::from_secs(10));
/// ```
#[derive(Clone)]
pub struct KafkaSink {
    shared: Arc<Shared>,
    timeout: Duration,
}

struct Shared {
    /// What every producer of this sink is made from, the sink's settings applied.
    config: ClientConfig,
    /// The producer sends use; replaced after a fatal error.
    producer: Mutex<Arc<FutureProducer>>,
}

impl fmt::Debug for KafkaSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaSink")
            .field(
                "bootstrap.servers",
                &self.shared.config.get("bootstrap.servers"),
            )
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl KafkaSink {
    /// A sink producing to the cluster at `bootstrap_servers` (`host:port`, comma-separated),
    /// idempotent, `acks=all`, with `message.timeout.ms` = [`DEFAULT_DELIVERY_TIMEOUT`]. The
    /// producer is created now; it connects in the background, so an unreachable cluster is not
    /// an error here but a send that fails as a retry.
    pub fn new(bootstrap_servers: &str) -> Result<Self, TransportError> {
        KafkaSink::with_config(crate::config::config(
            bootstrap_servers,
            &Default::default(),
        ))
    }

    /// A sink producing to `bootstrap_servers` with the common client properties of `topology`
    /// ([`KafkaTopology::client`](super::KafkaTopology::client): security, SASL, TLS, timeouts),
    /// the same every client of the consumer's side is built with; otherwise as
    /// [`with_config`](Self::with_config).
    pub fn from_topology(
        bootstrap_servers: &str,
        topology: &crate::topology::KafkaTopology,
    ) -> Result<Self, TransportError> {
        KafkaSink::with_config(topology.client_config(bootstrap_servers))
    }

    /// A sink with librdkafka's properties `config` (`bootstrap.servers` at least). The sink sets
    /// `enable.idempotence=true` and `acks=all` over whatever `config` says, and
    /// `message.timeout.ms` = [`DEFAULT_DELIVERY_TIMEOUT`] when `config` sets none; a
    /// `message.timeout.ms` (or its alias `delivery.timeout.ms`) of `0`, which librdkafka reads
    /// as *never give up*, is refused, as is any property librdkafka refuses.
    pub fn with_config(mut config: ClientConfig) -> Result<Self, TransportError> {
        let timeout = delivery_timeout(&config)?;
        let millis = timeout.as_millis().to_string();
        config
            .set("message.timeout.ms", millis.as_str())
            .set("delivery.timeout.ms", millis);
        let producer = super::publish::confirmed(&mut config)?;
        Ok(KafkaSink {
            shared: Arc::new(Shared {
                config,
                producer: Mutex::new(Arc::new(producer)),
            }),
            timeout,
        })
    }

    /// How long librdkafka tries to deliver one message before it reports it failed
    /// (`message.timeout.ms`).
    pub fn delivery_timeout(&self) -> Duration {
        self.timeout
    }

    /// Produces `record` and waits for its delivery report.
    ///
    /// `Ok` only for a report without error (with `acks=all`: the message is on every in-sync
    /// replica). A report with an error, a message that timed out (broker unreachable, topic
    /// missing), a full local queue and a fatal error of the producer fail as
    /// [`HandlerError::retry`]. A record that can never be produced — a topic name Kafka does not
    /// allow, a payload larger than the producer's `message.max.bytes` — fails as
    /// [`HandlerError::reject`].
    pub async fn send(&self, record: impl AsRef<Record>) -> Result<Receipt, HandlerError> {
        let record = record.as_ref();
        check_topic(record)?;
        let producer = self.producer();
        let limit = self.timeout.saturating_add(REPORT_GRACE);
        let reported = tokio::time::timeout(limit, produce(&producer, record)).await;
        let error = match reported {
            Ok(Ok((partition, offset))) => {
                debug!(record = %record.id(), topic = record.topic(), partition, offset, "delivered");
                return Ok(Receipt::confirmed(record.id().clone()));
            }
            Ok(Err(error)) => error,
            Err(_) => {
                debug!(record = %record.id(), ?limit, "no delivery report in time");
                return Err(HandlerError::retry(
                    TransportError::msg(
                        "waiting for the delivery report",
                        format!(
                            "no delivery report for record {} within {limit:?}",
                            record.id()
                        ),
                    )
                    .with_kind(TransportErrorKind::NotConfirmed),
                ));
            }
        };
        debug!(record = %record.id(), topic = record.topic(), %error, "not delivered");
        self.renew_if_fatal(&producer);
        let permanent = never_passes(&error);
        let failure = TransportError::msg(
            "producing",
            format!(
                "record {} to topic `{}` not delivered: {error}",
                record.id(),
                record.topic()
            ),
        )
        .with_kind(if permanent {
            TransportErrorKind::Refused
        } else {
            TransportErrorKind::NotConfirmed
        });
        Err(if permanent {
            HandlerError::reject(failure)
        } else {
            HandlerError::retry(failure)
        })
    }

    fn producer(&self) -> Arc<FutureProducer> {
        let current = self
            .shared
            .producer
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        Arc::clone(&current)
    }

    /// After a fatal error the producer refuses every message: the next send gets a fresh one.
    /// Only the first send to see the fatal error replaces `used`.
    fn renew_if_fatal(&self, used: &Arc<FutureProducer>) {
        let Some((code, reason)) = used.client().fatal_error() else {
            return;
        };
        let mut current = self
            .shared
            .producer
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if !Arc::ptr_eq(&current, used) {
            return;
        }
        match super::publish::confirmed(&mut self.shared.config.clone()) {
            Ok(fresh) => {
                debug!(?code, reason, "the producer hit a fatal error; replaced it");
                let retired = std::mem::replace(&mut *current, Arc::new(fresh));
                drop(current);
                // Dropping a producer purges it and joins its thread: not on a runtime worker.
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    runtime.spawn_blocking(move || drop(retired));
                }
            }
            Err(error) => {
                debug!(?code, reason, %error, "the producer hit a fatal error; no fresh one yet")
            }
        }
    }
}

impl Sink for KafkaSink {
    /// [`KafkaSink::send`].
    fn send(&self, record: &Record) -> impl Future<Output = Result<Receipt, HandlerError>> + Send {
        KafkaSink::send(self, record)
    }
}

/// Why a message was not delivered, and at which step.
#[derive(Debug)]
enum Undelivered {
    /// librdkafka refused to enqueue it: about this message alone.
    Enqueue(KafkaError),
    /// Its delivery report carries an error: possibly about the batch it travelled in.
    Report(KafkaError),
}

impl fmt::Display for Undelivered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Undelivered::Enqueue(error) => write!(f, "not enqueued: {error}"),
            Undelivered::Report(error) => write!(f, "delivery report: {error}"),
        }
    }
}

impl Undelivered {
    fn error(&self) -> &KafkaError {
        match self {
            Undelivered::Enqueue(error) | Undelivered::Report(error) => error,
        }
    }
}

/// Enqueues `record` (waiting while librdkafka's queue is full) and awaits its delivery report:
/// the partition and offset, or why it was not delivered.
async fn produce(producer: &FutureProducer, record: &Record) -> Result<(i32, i64), Undelivered> {
    let mut headers = OwnedHeaders::new().insert(Header {
        key: MESSAGE_ID,
        value: Some(record.id().as_str()),
    });
    // The record's order, which a retry or a redrive of the unit keeps (rule 4).
    let stamp = record.stamp().map(|stamp| stamp.0.to_string());
    if let Some(stamp) = &stamp {
        headers = headers.insert(Header {
            key: delivery_core::headers::STAMP,
            value: Some(stamp.as_str()),
        });
    }
    // The record's headers (its trace context: see `delivery_core::trace`).
    let extra = delivery_core::trace::outgoing("kafka", record.headers());
    for (name, value) in extra.iter() {
        headers = headers.insert(Header {
            key: name,
            value: Some(&value[..]),
        });
    }
    let mut message = FutureRecord::to(record.topic())
        .payload(&record.payload()[..])
        .headers(headers);
    if let Some(key) = record.key() {
        message = message.key(key);
    }
    let report = loop {
        match producer.send_result(message) {
            Ok(report) => break report,
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), unsent)) => {
                message = unsent;
                tokio::time::sleep(QUEUE_FULL_PAUSE).await;
            }
            Err((error, _)) => return Err(Undelivered::Enqueue(error)),
        }
    };
    match report.await {
        Ok(Ok(delivery)) => Ok((delivery.partition, delivery.offset)),
        Ok(Err((error, _))) => Err(Undelivered::Report(error)),
        // The producer is held above, so its reports cannot be dropped; answered all the same.
        Err(_) => Err(Undelivered::Report(KafkaError::Canceled)),
    }
}

/// `message.timeout.ms` (or `delivery.timeout.ms`) as given, else the default; never `0`.
fn delivery_timeout(config: &ClientConfig) -> Result<Duration, TransportError> {
    let given = ["message.timeout.ms", "delivery.timeout.ms"]
        .into_iter()
        .find_map(|key| config.get(key).map(|value| (key, value)));
    let Some((key, value)) = given else {
        return Ok(DEFAULT_DELIVERY_TIMEOUT);
    };
    match value.trim().parse::<u64>() {
        Ok(0) => Err(TransportError::msg(
            "configuring the Kafka producer",
            format!("{key}=0 would never give up on a message: give a bound in milliseconds"),
        )
        .with_kind(TransportErrorKind::Misconfigured)),
        Ok(millis) => Ok(Duration::from_millis(millis)),
        Err(error) => Err(TransportError::msg(
            "configuring the Kafka producer",
            format!("{key}={value:?}: {error}"),
        )
        .with_kind(TransportErrorKind::Misconfigured)),
    }
}

/// Kafka's rule for topic names, checked before producing: a name it breaks can never be sent.
fn check_topic(record: &Record) -> Result<(), HandlerError> {
    let topic = record.topic();
    let legal = !topic.is_empty()
        && topic.len() <= MAX_TOPIC_LEN
        && topic != "."
        && topic != ".."
        && topic
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if legal {
        return Ok(());
    }
    Err(HandlerError::reject(TransportError::msg(
        "producing",
        format!(
            "topic {topic:?} of record {} is not a valid Kafka topic name (1 to {MAX_TOPIC_LEN} of `a-z A-Z 0-9 . _ -`)",
            record.id()
        ),
    )))
}

/// Failures the same record meets on every attempt: librdkafka refusing this message alone as too
/// large, or the broker calling its topic invalid. Everything else — timeouts, unreachable or
/// changing brokers, a missing topic, a full queue, authorization (a deployment fixes it), the
/// idempotent producer's fatal errors, errors the broker reports for a whole batch — may pass
/// later.
fn never_passes(failure: &Undelivered) -> bool {
    let code = failure.error().rdkafka_error_code();
    match failure {
        Undelivered::Enqueue(_) => matches!(
            code,
            Some(RDKafkaErrorCode::MessageSizeTooLarge | RDKafkaErrorCode::InvalidTopic)
        ),
        Undelivered::Report(_) => code == Some(RDKafkaErrorCode::InvalidTopic),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(topic: &str) -> Record {
        Record::new("rec-1", topic, None, &b"{}"[..], 0)
    }

    #[test]
    fn topic_names_follow_kafka_rules() {
        for ok in ["orders", "orders.events", "a_b-c.9", &"t".repeat(249)] {
            assert!(check_topic(&record(ok)).is_ok(), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            "orders events",
            "orders/events",
            "café",
            &"t".repeat(250),
        ] {
            assert!(
                check_topic(&record(bad)).unwrap_err().is_reject(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn only_failures_a_record_can_never_pass_reject() {
        let production = |code| KafkaError::MessageProduction(code);
        for failure in [
            Undelivered::Enqueue(production(RDKafkaErrorCode::MessageSizeTooLarge)),
            Undelivered::Enqueue(production(RDKafkaErrorCode::InvalidTopic)),
            Undelivered::Report(production(RDKafkaErrorCode::InvalidTopic)),
        ] {
            assert!(never_passes(&failure), "{failure}");
        }
        for code in [
            RDKafkaErrorCode::MessageTimedOut,
            RDKafkaErrorCode::UnknownTopicOrPartition,
            RDKafkaErrorCode::UnknownTopic,
            RDKafkaErrorCode::NotLeaderForPartition,
            RDKafkaErrorCode::NotEnoughReplicas,
            RDKafkaErrorCode::BrokerTransportFailure,
            RDKafkaErrorCode::AllBrokersDown,
            RDKafkaErrorCode::TopicAuthorizationFailed,
            RDKafkaErrorCode::OutOfOrderSequenceNumber,
            RDKafkaErrorCode::Fatal,
            RDKafkaErrorCode::PurgeQueue,
            // Reported for the whole batch: a neighbour may be the cause.
            RDKafkaErrorCode::MessageSizeTooLarge,
            RDKafkaErrorCode::MessageBatchTooLarge,
            RDKafkaErrorCode::InvalidRecord,
        ] {
            assert!(
                !never_passes(&Undelivered::Report(production(code))),
                "{code:?}"
            );
        }
        for code in [RDKafkaErrorCode::QueueFull, RDKafkaErrorCode::Fatal] {
            assert!(
                !never_passes(&Undelivered::Enqueue(production(code))),
                "{code:?}"
            );
        }
        assert!(!never_passes(&Undelivered::Report(KafkaError::Canceled)));
    }

    /// librdkafka's test hook raises a fatal error, as the broker's loss of the producer's
    /// sequence state would: the send fails as a retry, and the next send has a fresh producer.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_fatal_error_replaces_the_producer() {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", "127.0.0.1:1")
            .set("message.timeout.ms", "300");
        let sink = KafkaSink::with_config(config).unwrap();
        let before = sink.producer();
        let reason = std::ffi::CString::new("injected by the test").unwrap();
        // SAFETY: a live client handle, a NUL-terminated reason that outlives the call.
        let raised = unsafe {
            rdkafka::bindings::rd_kafka_test_fatal_error(
                before.client().native_ptr(),
                rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER,
                reason.as_ptr(),
            )
        };
        assert_eq!(
            raised,
            rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR
        );
        assert!(before.client().fatal_error().is_some());

        let failure = sink.send(record("orders")).await.unwrap_err();
        assert!(failure.is_retry(), "{failure}");
        let after = sink.producer();
        assert!(!Arc::ptr_eq(&before, &after), "the producer was replaced");
        assert!(after.client().fatal_error().is_none());
        // A clone made earlier uses the fresh producer too.
        assert!(Arc::ptr_eq(&sink.clone().producer(), &after));
        // The fresh one is usable: it reaches the broker's absence, not a fatal error.
        let failure = sink.send(record("orders")).await.unwrap_err();
        assert!(failure.is_retry(), "{failure}");
        assert!(!failure.to_string().contains("Fatal"), "{failure}");
        assert!(Arc::ptr_eq(&sink.producer(), &after), "replaced once only");
    }

    #[test]
    fn the_delivery_timeout_is_bounded_and_forced_idempotent() {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", "127.0.0.1:1")
            .set("enable.idempotence", "false")
            .set("acks", "1");
        let sink = KafkaSink::with_config(config.clone()).unwrap();
        assert_eq!(sink.delivery_timeout(), DEFAULT_DELIVERY_TIMEOUT);
        assert_eq!(sink.shared.config.get("enable.idempotence"), Some("true"));
        assert_eq!(sink.shared.config.get("acks"), Some("all"));

        config.set("delivery.timeout.ms", "1500");
        let sink = KafkaSink::with_config(config.clone()).unwrap();
        assert_eq!(sink.delivery_timeout(), Duration::from_millis(1500));
        assert_eq!(sink.shared.config.get("message.timeout.ms"), Some("1500"));

        for refused in ["0", "soon", "-1"] {
            config.set("message.timeout.ms", refused);
            assert!(KafkaSink::with_config(config.clone()).is_err(), "{refused}");
        }
        // A property librdkafka refuses is an error, not a panic.
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", "127.0.0.1:1")
            .set("no.such.property", "1");
        assert!(KafkaSink::with_config(config).is_err());
    }
}
