//! The topics a Kafka consumer relies on — the source topic, its retry topic and its dead-letter
//! topic — and its group, declared with the deployment from a settings struct that can live in the
//! application's configuration.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::types::RDKafkaErrorCode;
use serde::{Deserialize, Serialize};

use delivery_core::transport::{TransportError, TransportErrorKind};

/// The settings of one consumed topic: its group, its retry and dead-letter topics, the bound on
/// deliveries, how many returned units the source holds back and how often the commit watermark is
/// committed.
///
/// Kafka keeps no delivery count, so the count travels with the unit (rule 2): a failed unit is
/// republished to the retry topic with its count incremented, and the bound is checked against
/// that count. A delivery that never settles (its consumer crashed) is counted in the group's
/// attempts topic ([`attempts_topic_name`](Self::attempts_topic_name), see the
/// [module docs](super)).
///
/// The retry, dead-letter and attempts topics are the group's own by default (their names hold
/// the group), so two groups reading one topic never handle each other's failures.
///
/// **Retention**: [`declare`](Self::declare) creates the dead-letter topic with
/// `retention.ms=-1` and `retention.bytes=-1` — a dead letter stays until an operator redrives or
/// purges it, never deleted unread by the broker's default retention (seven days on a stock
/// cluster) — and the retry topic with `retention.ms` of 30 days and `retention.bytes=-1`:
/// returned units of a group stopped for less than that are still there when it starts again.
/// Both are settable ([`dead_letter_retention`](Self::dead_letter_retention),
/// [`retry_retention`](Self::retry_retention)). A topic that already exists with a shorter
/// retention (one created by hand, or by an earlier version of `declare`, with the broker's
/// default) makes `declare` fail, naming the topic, the setting and both values, as a RabbitMQ
/// queue declared with other arguments does; raise its retention
/// (`kafka-configs.sh --alter --entity-type topics --entity-name <topic> --add-config
/// retention.ms=-1,retention.bytes=-1`) or declare the shorter value.
///
/// [`client`](Self::client) holds the librdkafka properties every client of this transport
/// shares — security, SASL, TLS, timeouts: the consumer, the producer of returns and dead letters,
/// the admin client of [`declare`](Self::declare), [`KafkaDeadLetters`](super::KafkaDeadLetters),
/// and a [`KafkaSink`](super::KafkaSink) made with
/// [`from_topology`](super::KafkaSink::from_topology).
///
/// ```
/// use delivery::kafka::KafkaTopology;
///
/// let topology: KafkaTopology = serde_json::from_str(
///     r#"{"topic": "orders", "group": "billing", "max_deliveries": 4}"#,
/// ).unwrap();
/// assert_eq!(topology.retry_topic_name(), "orders.billing.retry");
/// assert_eq!(topology.dead_letter_topic_name(), "orders.billing.dlq");
/// assert_eq!(topology.removed_topic_name(), "orders.billing.dlq.removed");
/// assert_eq!(topology.attempts_topic_name(), "orders.billing.attempts");
/// assert_eq!(topology.delivery_bound().get(), 4);
/// assert_eq!(topology.partitions, 3);
/// assert_eq!(topology.dead_letter_retention_ms, -1); // kept until an operator removes it
/// assert_eq!(topology.retry_retention_ms, 30 * 24 * 60 * 60 * 1000); // 30 days
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct KafkaTopology {
    /// The topic consumed.
    pub topic: String,
    /// The consumer group reading it (and its retry topic).
    pub group: String,
    /// The retry topic: failed units wait out their backoff there. Default
    /// `<topic>.<group>.retry`.
    #[serde(default)]
    pub retry_topic: Option<String>,
    /// The dead-letter topic. Default `<topic>.<group>.dlq`.
    #[serde(default)]
    pub dead_letter_topic: Option<String>,
    /// Where the operator's view records the dead letters it removed (redriven or purged), since
    /// Kafka removes no single record from the dead-letter topic
    /// ([`KafkaDeadLetters`](super::KafkaDeadLetters)). Default `<dead-letter topic>.removed`.
    #[serde(default)]
    pub removed_topic: Option<String>,
    /// Where the group records, before a handler runs, which delivery of the first unit not final
    /// of each partition is running (the crash-loop count, see the [module docs](super)). Default
    /// `<topic>.<group>.attempts`, with twice [`partitions`](Self::partitions) partitions.
    #[serde(default)]
    pub attempts_topic: Option<String>,
    /// librdkafka properties every client of this transport is built with (security, SASL, TLS,
    /// timeouts): see [`client_property`](Self::client_property). Default none.
    #[serde(default)]
    pub client: BTreeMap<String, String>,
    /// Partitions of each topic [`declare`](Self::declare) creates. Default 3.
    #[serde(default = "default_partitions")]
    pub partitions: i32,
    /// Replicas of each topic [`declare`](Self::declare) creates. Default 1.
    #[serde(default = "default_replication")]
    pub replication: i32,
    /// The most deliveries a unit gets, counted in the unit's own
    /// [`delivery_core::headers::DELIVERY_COUNT`](delivery_core::headers::DELIVERY_COUNT). Default 5.
    #[serde(default = "default_max_deliveries")]
    pub max_deliveries: u32,
    /// How long the group waits for a consumer's heartbeat before it counts the consumer as gone
    /// and hands its partitions to the others (`session.timeout.ms`), in milliseconds. Units a
    /// crashed consumer held are delivered again after at most this. Default 10 000.
    #[serde(default = "default_session_timeout_ms")]
    pub session_timeout_ms: u64,
    /// How often the watermark's advance is committed, in milliseconds: one commit per interval
    /// for every partition that advanced, never one per unit. Also committed on revocation and on
    /// shutdown. Default 500.
    #[serde(default = "default_commit_interval_ms")]
    pub commit_interval_ms: u64,
    /// The most units read from the retry topic that the source holds in memory until they are
    /// due (`0` is read as 1). When it holds this many, it pauses its retry-topic partitions, so
    /// the rest wait in the broker, not in memory; once it holds half as many or fewer, it resumes
    /// them. The source topic is never paused. A unit that still arrives at the limit is held all
    /// the same, never dropped, so the count can pass the limit by such stragglers. Each held unit
    /// costs its payload, headers and id in memory; a larger limit buys fewer pauses in a storm of
    /// failures, a smaller one less memory. Default 10 000.
    #[serde(default = "default_max_waiting")]
    pub max_waiting: usize,
    /// The dead-letter topic's `retention.ms`, set by [`declare`](Self::declare): how long the
    /// broker keeps a dead letter, in milliseconds; `-1` keeps it until an operator redrives or
    /// purges it. Default `-1`.
    #[serde(default = "forever")]
    pub dead_letter_retention_ms: i64,
    /// The dead-letter topic's `retention.bytes` (per partition; `-1`: no limit). Default `-1`.
    #[serde(default = "forever")]
    pub dead_letter_retention_bytes: i64,
    /// The retry topic's `retention.ms`, set by [`declare`](Self::declare): how long a returned
    /// unit waits there for its group, in milliseconds (`-1`: forever). A group stopped longer
    /// than this loses the units it had returned. Default 30 days (2 592 000 000).
    #[serde(default = "default_retry_retention_ms")]
    pub retry_retention_ms: i64,
    /// The retry topic's `retention.bytes` (per partition; `-1`: no limit). Default `-1`.
    #[serde(default = "forever")]
    pub retry_retention_bytes: i64,
}

/// `-1`: a retention without limit.
fn forever() -> i64 {
    -1
}

/// 30 days, in milliseconds.
fn default_retry_retention_ms() -> i64 {
    30 * 24 * 60 * 60 * 1000
}

/// A retention (`retention.ms` in ms or `retention.bytes`) from an optional limit: `-1` for none.
fn retention(limit: Option<u128>) -> i64 {
    limit.map_or(-1, |limit| i64::try_from(limit).unwrap_or(i64::MAX))
}

/// Whether a topic's `existing` retention (as described; `None` when the broker reports none)
/// keeps records for less than `wanted` (negative: without limit).
fn shorter(existing: Option<i64>, wanted: i64) -> bool {
    match existing {
        None => true,
        Some(existing) if existing < 0 => false,
        Some(existing) => wanted < 0 || existing < wanted,
    }
}

fn default_partitions() -> i32 {
    3
}

fn default_replication() -> i32 {
    1
}

fn default_max_deliveries() -> u32 {
    5
}

fn default_session_timeout_ms() -> u64 {
    10_000
}

fn default_commit_interval_ms() -> u64 {
    500
}

fn default_max_waiting() -> usize {
    10_000
}

impl KafkaTopology {
    /// The topology of `topic` read by `group`, with the defaults: retry topic
    /// `<topic>.<group>.retry`, dead letter `<topic>.<group>.dlq`, 3 partitions, 1 replica, 5 deliveries, a session timeout of 10 s, a
    /// commit every 500 ms, at most 10 000 returned units held.
    pub fn new(topic: impl Into<String>, group: impl Into<String>) -> Self {
        KafkaTopology {
            topic: topic.into(),
            group: group.into(),
            retry_topic: None,
            dead_letter_topic: None,
            removed_topic: None,
            attempts_topic: None,
            client: BTreeMap::new(),
            partitions: default_partitions(),
            replication: default_replication(),
            max_deliveries: default_max_deliveries(),
            session_timeout_ms: default_session_timeout_ms(),
            commit_interval_ms: default_commit_interval_ms(),
            max_waiting: default_max_waiting(),
            dead_letter_retention_ms: forever(),
            dead_letter_retention_bytes: forever(),
            retry_retention_ms: default_retry_retention_ms(),
            retry_retention_bytes: forever(),
        }
    }

    /// Sets how long the dead-letter topic keeps a dead letter (`retention.ms`); `None` (the
    /// default) keeps it until an operator redrives or purges it.
    pub fn dead_letter_retention(mut self, retention: Option<Duration>) -> Self {
        self.dead_letter_retention_ms = self::retention(retention.map(|d| d.as_millis()));
        self
    }

    /// Sets how long the retry topic keeps a returned unit (`retention.ms`); `None` keeps it
    /// forever. Default 30 days.
    pub fn retry_retention(mut self, retention: Option<Duration>) -> Self {
        self.retry_retention_ms = self::retention(retention.map(|d| d.as_millis()));
        self
    }

    /// Sets the retry topic's name.
    pub fn retry_topic(mut self, name: impl Into<String>) -> Self {
        self.retry_topic = Some(name.into());
        self
    }

    /// Sets the dead-letter topic's name.
    pub fn dead_letter_topic(mut self, name: impl Into<String>) -> Self {
        self.dead_letter_topic = Some(name.into());
        self
    }

    /// Sets the name of the topic that records the dead letters removed.
    pub fn removed_topic(mut self, name: impl Into<String>) -> Self {
        self.removed_topic = Some(name.into());
        self
    }

    /// Sets the name of the topic that records the deliveries running (the crash-loop count).
    pub fn attempts_topic(mut self, name: impl Into<String>) -> Self {
        self.attempts_topic = Some(name.into());
        self
    }

    /// Sets a librdkafka property that every client of this transport is built with — the
    /// consumer, the producer of returns and dead letters, the admin client, the dead letter's
    /// reader and a sink made [`from_topology`](super::KafkaSink::from_topology): security
    /// (`security.protocol`, `sasl.*`, `ssl.*`), timeouts, `client.id`. The properties a client's
    /// role needs (`group.id`, `enable.auto.commit`, `acks`, `enable.idempotence`, ...) are set
    /// after these and win.
    pub fn client_property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.client.insert(key.into(), value.into());
        self
    }

    /// Takes every property of your own rdkafka `config` (the one your other Kafka clients are
    /// built from: `security.protocol`, `sasl.*`, `ssl.*`, `client.id`, timeouts) as a
    /// [`client_property`](Self::client_property), so it reaches every client this transport
    /// makes — the consumer, the producer of returns and dead letters, the attempts reader, the
    /// admin client of [`declare`](Self::declare), [`KafkaDeadLetters`](super::KafkaDeadLetters)
    /// and [`KafkaSink::from_topology`](super::KafkaSink::from_topology) — and stays in the
    /// topology when it is serialized. Its `bootstrap.servers` is not taken: the brokers are the
    /// argument each of those is given. Keep role-specific settings of your own clients
    /// (`transactional.id`, a producer's or consumer's tuning) out of it; the keys a role needs
    /// (`group.id`, `enable.auto.commit`, `acks`, `enable.idempotence`) are set over these anyway.
    /// Secrets are taken too (`sasl.password`): keep a topology holding them out of logs, as
    /// its `Debug` and its serialization show them. rdkafka's `ClientConfig` is re-exported as
    /// `delivery::kafka::client::ClientConfig`.
    ///
    /// ```
    /// use delivery::kafka::KafkaTopology;
    /// use delivery::kafka::client::ClientConfig;
    ///
    /// let mut yours = ClientConfig::new();
    /// yours
    ///     .set("bootstrap.servers", "kafka-1.internal:9093")
    ///     .set("security.protocol", "sasl_ssl")
    ///     .set("sasl.mechanism", "PLAIN")
    ///     .set("client.id", "billing");
    /// let topology = KafkaTopology::new("orders", "billing").with_client_config(&yours);
    /// let every_client = topology.client_config("kafka-1.internal:9093");
    /// assert_eq!(every_client.get("security.protocol"), Some("sasl_ssl"));
    /// assert_eq!(every_client.get("client.id"), Some("billing"));
    /// ```
    pub fn with_client_config(mut self, config: &rdkafka::ClientConfig) -> Self {
        // `config_map` hides secrets (`sasl.password`, ...) behind a placeholder: values are read
        // with `get`, which does not.
        for key in config.config_map().into_keys() {
            if let Some(value) = config.get(key)
                && key != "bootstrap.servers"
            {
                self.client.insert(key.to_owned(), value.to_owned());
            }
        }
        self
    }

    /// A librdkafka configuration for `brokers` with the [`client`](Self::client) properties:
    /// what every client of this transport starts from.
    pub fn client_config(&self, brokers: &str) -> rdkafka::ClientConfig {
        crate::config::config(brokers, &self.client)
    }

    /// Sets the partitions of the topics [`declare`](Self::declare) creates (at least 1).
    pub fn partitions(mut self, n: i32) -> Self {
        self.partitions = n.max(1);
        self
    }

    /// Sets the most deliveries a unit gets (`0` is read as 1).
    pub fn max_deliveries(mut self, n: u32) -> Self {
        self.max_deliveries = n.max(1);
        self
    }

    /// Sets the group's session timeout (at least 1 ms).
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout_ms = u64::try_from(timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        self
    }

    /// Sets how often the watermark is committed (at least 1 ms).
    pub fn commit_interval(mut self, interval: Duration) -> Self {
        self.commit_interval_ms = u64::try_from(interval.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        self
    }

    /// Sets the most returned units the source holds until they are due (`0` is read as 1).
    pub fn max_waiting(mut self, n: usize) -> Self {
        self.max_waiting = n.max(1);
        self
    }

    /// The retry topic's name.
    pub fn retry_topic_name(&self) -> String {
        self.retry_topic
            .clone()
            .unwrap_or_else(|| format!("{}.{}.retry", self.topic, self.group))
    }

    /// The dead-letter topic's name.
    pub fn dead_letter_topic_name(&self) -> String {
        self.dead_letter_topic
            .clone()
            .unwrap_or_else(|| format!("{}.{}.dlq", self.topic, self.group))
    }

    /// The name of the topic that records the dead letters removed.
    pub fn removed_topic_name(&self) -> String {
        self.removed_topic
            .clone()
            .unwrap_or_else(|| format!("{}.removed", self.dead_letter_topic_name()))
    }

    /// The name of the topic that records the deliveries running (the crash-loop count).
    pub fn attempts_topic_name(&self) -> String {
        self.attempts_topic
            .clone()
            .unwrap_or_else(|| format!("{}.{}.attempts", self.topic, self.group))
    }

    /// The declared bound.
    pub fn delivery_bound(&self) -> NonZeroU32 {
        NonZeroU32::new(self.max_deliveries).unwrap_or(NonZeroU32::MIN)
    }

    /// How often the watermark is committed.
    pub fn commit_interval_time(&self) -> Duration {
        Duration::from_millis(self.commit_interval_ms.max(1))
    }

    /// The most returned units held at once, at least 1.
    pub fn waiting_limit(&self) -> usize {
        self.max_waiting.max(1)
    }

    /// Creates the source, retry and dead-letter topics at `brokers` (a bootstrap list such as
    /// `127.0.0.1:9092`), each with [`partitions`](Self::partitions) partitions, and the
    /// [removed topic](Self::removed_topic_name) with one partition, compacted, and the
    /// [attempts topic](Self::attempts_topic_name) with twice as many partitions (one for each
    /// partition of the topic and of the retry topic), compacted. The dead-letter and retry
    /// topics get their retention ([`dead_letter_retention_ms`](Self::dead_letter_retention_ms),
    /// [`retry_retention_ms`](Self::retry_retention_ms) and their `_bytes`). Topics that
    /// already exist are left as they are, but a dead-letter or retry topic that exists with a
    /// shorter retention than declared fails the declaration
    /// ([`Misconfigured`](TransportErrorKind::Misconfigured), naming the topic, the setting and
    /// both values). Brokers that do not create topics on first use (tansu,
    /// most managed Kafka) need this before anything is published.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), delivery_core::TransportError> {
    /// use delivery::kafka::KafkaTopology;
    ///
    /// KafkaTopology::new("orders", "billing").declare("127.0.0.1:9092").await?;
    /// # Ok(()) }
    /// ```
    pub async fn declare(&self, brokers: &str) -> Result<(), TransportError> {
        let admin: AdminClient<DefaultClientContext> = self
            .client_config(brokers)
            .create()
            .map_err(|e| crate::error::RDKAFKA.error("connecting the Kafka admin client", e))?;
        let replication = || TopicReplication::Fixed(self.replication.max(1));
        let removed = self.removed_topic_name();
        let attempts = self.attempts_topic_name();
        let retained = self.retained();
        let retained_values: Vec<[String; 2]> = retained
            .iter()
            .map(|(_, ms, bytes)| [ms.to_string(), bytes.to_string()])
            .collect();
        let partitions = self.partitions.max(1);
        let topics: Vec<NewTopic<'_>> = [NewTopic::new(&self.topic, partitions, replication())]
            .into_iter()
            .chain(
                retained
                    .iter()
                    .zip(&retained_values)
                    .map(|((name, _, _), [ms, bytes])| {
                        NewTopic::new(name, partitions, replication())
                            .set("retention.ms", ms)
                            .set("retention.bytes", bytes)
                    }),
            )
            .chain([
                // One small record per removal, keyed by position: compacted, never trimmed.
                NewTopic::new(&removed, 1, replication()).set("cleanup.policy", "compact"),
                // One record per delivery that starts a partition's run or runs alone: only the
                // last of each partition is read.
                NewTopic::new(&attempts, 2 * self.partitions.max(1), replication())
                    .set("cleanup.policy", "compact"),
            ])
            .collect();
        let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
        let results = admin
            .create_topics(&topics, &options)
            .await
            .map_err(|e| crate::error::RDKAFKA.error("creating the Kafka topics", e))?;
        let mut existing = Vec::new();
        for result in results {
            match result {
                Ok(_) => {}
                Err((topic, RDKafkaErrorCode::TopicAlreadyExists)) => existing.push(topic),
                Err((topic, code)) => {
                    return Err(TransportError::msg(
                        "creating the Kafka topics",
                        format!("topic `{topic}`: {code}"),
                    )
                    .with_kind(TransportErrorKind::Misconfigured));
                }
            }
        }
        let kept: Vec<&(String, i64, i64)> = retained
            .iter()
            .filter(|(name, _, _)| existing.contains(name))
            .collect();
        self.check_retention(&admin, &options, &kept).await
    }

    /// The topics whose records must outlive the broker's default retention, each with the
    /// `retention.ms` and `retention.bytes` declared: the retry and dead-letter topics.
    fn retained(&self) -> [(String, i64, i64); 2] {
        [
            (
                self.retry_topic_name(),
                self.retry_retention_ms,
                self.retry_retention_bytes,
            ),
            (
                self.dead_letter_topic_name(),
                self.dead_letter_retention_ms,
                self.dead_letter_retention_bytes,
            ),
        ]
    }

    /// Fails, naming each, if any of the `topics` that already existed keeps its records for
    /// less than declared: their units would be deleted unread.
    async fn check_retention(
        &self,
        admin: &AdminClient<DefaultClientContext>,
        options: &AdminOptions,
        topics: &[&(String, i64, i64)],
    ) -> Result<(), TransportError> {
        if topics.is_empty() {
            return Ok(());
        }
        const DOING: &str = "checking the retention of the existing Kafka topics";
        let specifiers: Vec<ResourceSpecifier<'_>> = topics
            .iter()
            .map(|(name, _, _)| ResourceSpecifier::Topic(name))
            .collect();
        let described = admin
            .describe_configs(&specifiers, options)
            .await
            .map_err(|e| crate::error::RDKAFKA.error(DOING, e))?;
        let mut shorts = Vec::new();
        for ((name, ms, bytes), result) in topics.iter().zip(described) {
            let config = result.map_err(|code| {
                TransportError::msg(DOING, format!("describing topic `{name}`: {code}"))
            })?;
            for (key, wanted) in [("retention.ms", *ms), ("retention.bytes", *bytes)] {
                let value = config.get(key).and_then(|entry| entry.value.clone());
                let existing = value.as_deref().and_then(|v| v.trim().parse::<i64>().ok());
                if shorter(existing, wanted) {
                    let default = match key {
                        "retention.ms" => {
                            "not set (the broker's default applies: 7 days on a stock Kafka)"
                        }
                        _ => "not set (the broker's default applies)",
                    };
                    let has = value.map_or_else(|| default.to_owned(), |v| format!("`{v}`"));
                    shorts.push(format!(
                        "topic `{name}` has `{key}` {has}, shorter than the `{wanted}` declared"
                    ));
                }
            }
        }
        if shorts.is_empty() {
            return Ok(());
        }
        Err(TransportError::msg(
            DOING,
            format!(
                "{}: its records would be deleted unread. Raise it (kafka-configs.sh --alter \
                 --entity-type topics --entity-name <topic> --add-config \
                 retention.ms=<declared>,retention.bytes=<declared>), or declare the shorter \
                 value on the topology (`dead_letter_retention`, `retry_retention`)",
                shorts.join("; ")
            ),
        )
        .with_kind(TransportErrorKind::Misconfigured))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retention_is_shorter_unless_it_keeps_at_least_as_long() {
        assert!(shorter(None, -1), "the broker's default is no promise");
        assert!(shorter(Some(604_800_000), -1));
        assert!(!shorter(Some(-1), -1));
        assert!(!shorter(Some(-1), 1000));
        assert!(shorter(Some(999), 1000));
        assert!(!shorter(Some(1000), 1000));
        assert_eq!(
            KafkaTopology::new("t", "g")
                .dead_letter_retention(Some(Duration::from_secs(2)))
                .retry_retention(None)
                .retained(),
            [
                ("t.g.retry".to_owned(), -1, -1),
                ("t.g.dlq".to_owned(), 2000, -1)
            ]
        );
    }
}
