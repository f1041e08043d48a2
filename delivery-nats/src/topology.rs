//! The JetStream topology a consumer relies on — the stream, its durable pull consumer with the
//! delivery bound, and the dead-letter stream — declared with the deployment from a settings
//! struct that can live in the application's configuration.

use std::num::NonZeroU32;
use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use serde::{Deserialize, Serialize};

use delivery_core::transport::TransportErrorKind;

/// The topology of one consumed stream (rule 2: the bound and the dead letter are declared with the
/// deployment).
///
/// - the stream `stream` over `subjects`, deduplicating by `Nats-Msg-Id` over `duplicate_window`;
/// - its durable pull consumer `durable` with explicit acks, `ack_wait` and `max_deliver`: JetStream
///   counts each delivery (`delivered`) and delivers a unit at most `max_deliver` times;
/// - the dead-letter stream `dead_letter_stream` (default `<stream>_DLQ`) over the single subject
///   `dead_letter_subject` (default `<stream>_DLQ`), kept until an operator redrives or deletes its
///   units. JetStream itself only emits an advisory at `max_deliver`, so the consumer moves a unit
///   that fails on its last delivery into this stream itself;
/// - the advisory stream `advisory_stream` (default `<stream>_MAX_DELIVERIES`) capturing the
///   durable consumer's `MAX_DELIVERIES` advisories, with its durable consumer `sweeper`: a unit
///   whose last delivery never settled (its consumer crashed, or its move to the dead letter
///   failed) is announced there, and a sweep moves it into the dead-letter stream.
///
/// Durations are written in seconds (`"ack_wait": 2.5`).
///
/// ```
/// use delivery::nats::NatsTopology;
///
/// let topology: NatsTopology = serde_json::from_str(
///     r#"{"stream": "ORDERS", "subjects": ["orders.>"], "max_deliver": 4, "ack_wait": 10}"#,
/// )
/// .unwrap();
/// assert_eq!(topology.dead_letter_stream_name(), "ORDERS_DLQ");
/// assert_eq!(topology.dead_letter_subject_name(), "ORDERS_DLQ");
/// assert_eq!(topology.advisory_stream_name(), "ORDERS_MAX_DELIVERIES");
/// assert_eq!(
///     topology.max_deliveries_advisory_subject(),
///     "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.ORDERS.delivery"
/// );
/// assert_eq!(topology.durable, "delivery");
/// assert_eq!(topology.max_deliveries().get(), 4);
/// assert_eq!(topology.ack_wait, std::time::Duration::from_secs(10));
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct NatsTopology {
    /// The stream consumed.
    pub stream: String,
    /// The subjects the stream captures. Default `["<stream>.>"]`.
    #[serde(default)]
    pub subjects: Vec<String>,
    /// The durable pull consumer's name. Default `delivery`.
    #[serde(default = "default_durable")]
    pub durable: String,
    /// The consumer's `max_deliver`: the most deliveries a unit gets. Default 5.
    #[serde(default = "default_max_deliver")]
    pub max_deliver: u32,
    /// The consumer's `ack_wait`: how long a delivery may stay unsettled before JetStream delivers
    /// it again. A unit in flight longer is kept from redelivery by `+WPI` (in progress) every
    /// third of it, up to `in_progress_limit`. Default 30 s.
    #[serde(default = "default_ack_wait", with = "seconds")]
    pub ack_wait: Duration,
    /// How long one delivery is kept in progress; past it JetStream may deliver the unit again
    /// (to this or another consumer) while the first handler still runs. Default 5 min.
    #[serde(default = "default_in_progress_limit", with = "seconds")]
    pub in_progress_limit: Duration,
    /// The most units delivered to the source and not yet taken by the runtime: pull requests
    /// ask for what the buffer has room for. Buffered units are delivered already; the source
    /// keeps them in progress (`+WPI`) while they wait, up to `in_progress_limit`, so a large
    /// batch behind slow handlers is not delivered again meanwhile — but it is held by this
    /// consumer rather than handled by another. Default 64.
    #[serde(default = "default_batch")]
    pub batch: usize,
    /// The stream's `duplicate_window` for the producers' `Nats-Msg-Id` (at least 100 ms). A
    /// redrive under the same id within it is refused by JetStream as a duplicate. Default 2 min.
    #[serde(default = "default_duplicate_window", with = "seconds")]
    pub duplicate_window: Duration,
    /// The stream's retention. Default `limits`.
    #[serde(default)]
    pub retention: Retention,
    /// The dead-letter stream. Default `<stream>_DLQ`.
    #[serde(default)]
    pub dead_letter_stream: Option<String>,
    /// The dead-letter stream's subject. Default `<stream>_DLQ`.
    #[serde(default)]
    pub dead_letter_subject: Option<String>,
    /// The stream capturing the durable consumer's `MAX_DELIVERIES` advisories: the units whose
    /// last delivery never settled, which the sweep moves to the dead letter
    /// ([`NatsDeadLetters::sweep`](super::NatsDeadLetters::sweep)). Default
    /// `<stream>_MAX_DELIVERIES`.
    #[serde(default)]
    pub advisory_stream: Option<String>,
    /// How often a [`NatsSource`](super::NatsSource) sweeps units stranded on their last delivery
    /// into the dead letter (once at start, then every `sweep_every`); zero leaves the sweep to
    /// the operator. Default 30 s.
    #[serde(default = "default_sweep_every", with = "seconds")]
    pub sweep_every: Duration,
    /// Whether a unit's final settlement — `+ACK` after its handler, `+TERM` once its copy is in
    /// the dead letter — waits for JetStream's reply (async-nats `double_ack`), instead of being
    /// sent without waiting (`ack`). Default `false`.
    ///
    /// Unconfirmed is the default because the reply adds nothing the rules need: the effect is
    /// committed before the `+ACK` is sent either way (rule 1), and an acknowledgement lost on the
    /// way (a dropped connection) only means JetStream delivers the unit again after `ack_wait`,
    /// which a handler that changes nothing on a second delivery (rule 3) absorbs; a lost `+TERM`
    /// finds the copy already in the dead letter (deduplicated by its `Nats-Msg-Id`). The copy
    /// itself is always confirmed by JetStream before the `+TERM`. Waiting costs a round trip
    /// per unit; turn it on where a redelivery is costly (a handler whose effect on another
    /// system carries no key) and the round trip is worth fewer of them. `-NAK` and `+WPI` are
    /// never confirmed: a lost one means a redelivery after `ack_wait` or a unit kept less long.
    #[serde(default)]
    pub confirm_acks: bool,
}

/// A stream's retention policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Retention {
    /// Units stay until the stream's limits remove them (JetStream's default).
    #[default]
    Limits,
    /// A unit is removed once acknowledged (or terminated after its move to the dead letter).
    WorkQueue,
    /// A unit is removed once every consumer acknowledged it.
    Interest,
}

fn default_durable() -> String {
    "delivery".to_owned()
}
fn default_max_deliver() -> u32 {
    5
}
fn default_ack_wait() -> Duration {
    Duration::from_secs(30)
}
fn default_in_progress_limit() -> Duration {
    Duration::from_secs(300)
}
fn default_batch() -> usize {
    64
}
fn default_duplicate_window() -> Duration {
    Duration::from_secs(120)
}
fn default_sweep_every() -> Duration {
    Duration::from_secs(30)
}

/// The durable consumer of the advisory stream through which sweeps take advisories one at a
/// time (a work queue: an advisory acknowledged is gone).
pub(crate) const SWEEPER: &str = "sweeper";

impl NatsTopology {
    /// The topology of `stream` with the defaults (see each field).
    pub fn new(stream: impl Into<String>) -> Self {
        NatsTopology {
            stream: stream.into(),
            subjects: Vec::new(),
            durable: default_durable(),
            max_deliver: default_max_deliver(),
            ack_wait: default_ack_wait(),
            in_progress_limit: default_in_progress_limit(),
            batch: default_batch(),
            duplicate_window: default_duplicate_window(),
            retention: Retention::default(),
            dead_letter_stream: None,
            dead_letter_subject: None,
            advisory_stream: None,
            sweep_every: default_sweep_every(),
            confirm_acks: false,
        }
    }

    /// Sets the subjects the stream captures.
    pub fn subjects<S: Into<String>>(mut self, subjects: impl IntoIterator<Item = S>) -> Self {
        self.subjects = subjects.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the durable consumer's name.
    pub fn durable(mut self, name: impl Into<String>) -> Self {
        self.durable = name.into();
        self
    }

    /// Sets `max_deliver`, the most deliveries a unit gets (`0` is read as 1).
    pub fn max_deliver(mut self, n: u32) -> Self {
        self.max_deliver = n.max(1);
        self
    }

    /// Sets `ack_wait`.
    pub fn ack_wait(mut self, wait: Duration) -> Self {
        self.ack_wait = wait;
        self
    }

    /// Sets how long one delivery is kept in progress.
    pub fn in_progress_limit(mut self, limit: Duration) -> Self {
        self.in_progress_limit = limit;
        self
    }

    /// Sets the pull batch (at least 1).
    pub fn batch(mut self, n: usize) -> Self {
        self.batch = n.max(1);
        self
    }

    /// Sets the stream's duplicate window (JetStream refuses less than 100 ms).
    pub fn duplicate_window(mut self, window: Duration) -> Self {
        self.duplicate_window = window;
        self
    }

    /// Sets the stream's retention.
    pub fn retention(mut self, retention: Retention) -> Self {
        self.retention = retention;
        self
    }

    /// Sets the dead-letter stream's name.
    pub fn dead_letter_stream(mut self, name: impl Into<String>) -> Self {
        self.dead_letter_stream = Some(name.into());
        self
    }

    /// Sets the dead-letter stream's subject.
    pub fn dead_letter_subject(mut self, subject: impl Into<String>) -> Self {
        self.dead_letter_subject = Some(subject.into());
        self
    }

    /// Sets the advisory stream's name.
    pub fn advisory_stream(mut self, name: impl Into<String>) -> Self {
        self.advisory_stream = Some(name.into());
        self
    }

    /// Sets how often a source sweeps stranded units into the dead letter (zero: never).
    pub fn sweep_every(mut self, every: Duration) -> Self {
        self.sweep_every = every;
        self
    }

    /// Sets whether `+ACK` and `+TERM` wait for JetStream's reply (see
    /// [`confirm_acks`](Self::confirm_acks); default `false`).
    ///
    /// ```
    /// use delivery::nats::NatsTopology;
    ///
    /// let topology = NatsTopology::new("ORDERS").confirm_acks(true);
    /// assert!(topology.confirm_acks);
    /// assert!(!NatsTopology::new("ORDERS").confirm_acks);
    /// ```
    pub fn confirm_acks(mut self, confirm: bool) -> Self {
        self.confirm_acks = confirm;
        self
    }

    /// The subjects the stream captures.
    pub fn subject_names(&self) -> Vec<String> {
        if self.subjects.is_empty() {
            vec![format!("{}.>", self.stream)]
        } else {
            self.subjects.clone()
        }
    }

    /// The dead-letter stream's name.
    pub fn dead_letter_stream_name(&self) -> String {
        self.dead_letter_stream
            .clone()
            .unwrap_or_else(|| format!("{}_DLQ", self.stream))
    }

    /// The dead-letter stream's subject.
    pub fn dead_letter_subject_name(&self) -> String {
        self.dead_letter_subject
            .clone()
            .unwrap_or_else(|| self.dead_letter_stream_name())
    }

    /// The advisory stream's name.
    pub fn advisory_stream_name(&self) -> String {
        self.advisory_stream
            .clone()
            .unwrap_or_else(|| format!("{}_MAX_DELIVERIES", self.stream))
    }

    /// The subject on which JetStream announces that a unit of the durable consumer reached
    /// `max_deliver` without being settled:
    /// `$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.<stream>.<durable>`.
    pub fn max_deliveries_advisory_subject(&self) -> String {
        format!(
            "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{}.{}",
            self.stream, self.durable
        )
    }

    /// The most deliveries a unit gets: `max_deliver`.
    pub fn max_deliveries(&self) -> NonZeroU32 {
        NonZeroU32::new(self.max_deliver).unwrap_or(NonZeroU32::MIN)
    }

    /// The consumed stream's configuration, exactly as declared.
    pub fn stream_config(&self) -> stream::Config {
        stream::Config {
            name: self.stream.clone(),
            subjects: self.subject_names(),
            retention: match self.retention {
                Retention::Limits => stream::RetentionPolicy::Limits,
                Retention::WorkQueue => stream::RetentionPolicy::WorkQueue,
                Retention::Interest => stream::RetentionPolicy::Interest,
            },
            duplicate_window: self.duplicate_window,
            ..stream::Config::default()
        }
    }

    /// The dead-letter stream's configuration: kept until removed, deduplicating as little as
    /// JetStream allows (100 ms), so a unit dead-lettered again after a redrive is stored again.
    pub fn dead_letter_stream_config(&self) -> stream::Config {
        stream::Config {
            name: self.dead_letter_stream_name(),
            subjects: vec![self.dead_letter_subject_name()],
            duplicate_window: Duration::from_millis(100),
            ..stream::Config::default()
        }
    }

    /// The advisory stream's configuration: the durable consumer's `MAX_DELIVERIES` advisories,
    /// as a work queue (an advisory is removed once a sweep acknowledged it).
    pub fn advisory_stream_config(&self) -> stream::Config {
        stream::Config {
            name: self.advisory_stream_name(),
            subjects: vec![self.max_deliveries_advisory_subject()],
            retention: stream::RetentionPolicy::WorkQueue,
            ..stream::Config::default()
        }
    }

    /// The sweeps' durable consumer of the advisory stream: explicit acks, an advisory taken by one
    /// sweep at a time (given again after a minute if that sweep died).
    pub fn sweeper_consumer_config(&self) -> consumer::pull::Config {
        consumer::pull::Config {
            durable_name: Some(SWEEPER.to_owned()),
            ack_policy: consumer::AckPolicy::Explicit,
            ack_wait: Duration::from_secs(60),
            deliver_policy: consumer::DeliverPolicy::All,
            ..consumer::pull::Config::default()
        }
    }

    /// The durable pull consumer's configuration, exactly as declared.
    pub fn consumer_config(&self) -> consumer::pull::Config {
        consumer::pull::Config {
            durable_name: Some(self.durable.clone()),
            ack_policy: consumer::AckPolicy::Explicit,
            ack_wait: self.ack_wait,
            max_deliver: i64::from(self.max_deliver.max(1)),
            deliver_policy: consumer::DeliverPolicy::All,
            ..consumer::pull::Config::default()
        }
    }

    /// Declares the dead-letter stream, the advisory stream and its sweeper consumer, the stream
    /// and its durable consumer (the advisory stream first, so no advisory is missed). An existing stream
    /// is updated to these settings where JetStream allows it; an existing consumer with other
    /// settings is refused by JetStream with a [`TopologyError`] saying which step failed.
    pub async fn declare(&self, context: &jetstream::Context) -> Result<(), TopologyError> {
        let dead_letter = self.dead_letter_stream_name();
        context
            .create_or_update_stream(self.dead_letter_stream_config())
            .await
            .map_err(|e| TopologyError::new("declaring the dead-letter stream", &dead_letter, e))?;
        let advisories = self.advisory_stream_name();
        context
            .create_or_update_stream(self.advisory_stream_config())
            .await
            .map_err(|e| TopologyError::new("declaring the advisory stream", &advisories, e))?;
        context
            .get_stream(&advisories)
            .await
            .map_err(|e| TopologyError::new("reading the advisory stream", &advisories, e))?
            .create_consumer(self.sweeper_consumer_config())
            .await
            .map_err(|e| TopologyError::new("declaring the sweeper consumer", SWEEPER, e))?;
        context
            .create_or_update_stream(self.stream_config())
            .await
            .map_err(|e| TopologyError::new("declaring the stream", &self.stream, e))?;
        let stream = context
            .get_stream(&self.stream)
            .await
            .map_err(|e| TopologyError::new("reading the stream", &self.stream, e))?;
        stream
            .create_consumer(self.consumer_config())
            .await
            .map_err(|e| TopologyError::new("declaring the durable consumer", &self.durable, e))?;
        Ok(())
    }
}

/// The topology could not be declared: which step, for which name, and JetStream's answer.
#[derive(Debug, thiserror::Error)]
#[error("{doing} `{name}`: {source}")]
#[non_exhaustive]
pub struct TopologyError {
    doing: &'static str,
    name: String,
    kind: TransportErrorKind,
    #[source]
    source: Box<dyn std::error::Error + Send + Sync>,
}

impl TopologyError {
    fn new<E: Classified>(doing: &'static str, name: &str, source: E) -> Self {
        TopologyError {
            doing,
            name: name.to_owned(),
            kind: source.kind_of(),
            source: Box::new(source),
        }
    }

    /// What kind of failure this is: [`Misconfigured`](TransportErrorKind::Misconfigured) when
    /// JetStream refused the stream or consumer as configured (it exists with other settings, a
    /// name or setting is invalid), [`ConnectionLost`](TransportErrorKind::ConnectionLost) when
    /// the server did not answer.
    pub fn kind(&self) -> TransportErrorKind {
        self.kind
    }
}

/// The kind of each JetStream error a declaration meets.
trait Classified: std::error::Error + Send + Sync + 'static {
    fn kind_of(&self) -> TransportErrorKind;
}

impl Classified for jetstream::context::CreateStreamError {
    fn kind_of(&self) -> TransportErrorKind {
        use jetstream::context::CreateStreamErrorKind as K;
        match self.kind() {
            K::TimedOut | K::JetStreamUnavailable => TransportErrorKind::ConnectionLost,
            K::EmptyStreamName
            | K::InvalidStreamName
            | K::DomainAndExternalSet
            | K::JetStream(_) => TransportErrorKind::Misconfigured,
            K::Response | K::NotFound | K::ResponseParse => TransportErrorKind::Other,
        }
    }
}

impl Classified for jetstream::context::GetStreamError {
    fn kind_of(&self) -> TransportErrorKind {
        use jetstream::context::GetStreamErrorKind as K;
        match self.kind() {
            K::Request => TransportErrorKind::ConnectionLost,
            K::EmptyName | K::InvalidStreamName | K::JetStream(_) => {
                TransportErrorKind::Misconfigured
            }
        }
    }
}

impl Classified for jetstream::stream::ConsumerError {
    fn kind_of(&self) -> TransportErrorKind {
        use jetstream::stream::ConsumerErrorKind as K;
        match self.kind() {
            K::TimedOut | K::Request => TransportErrorKind::ConnectionLost,
            K::InvalidConsumerType | K::InvalidName | K::JetStream(_) => {
                TransportErrorKind::Misconfigured
            }
            _ => TransportErrorKind::Other,
        }
    }
}

/// Durations as a number of seconds in settings.
mod seconds {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let secs = f64::deserialize(d)?;
        Duration::try_from_secs_f64(secs).map_err(serde::de::Error::custom)
    }
}
