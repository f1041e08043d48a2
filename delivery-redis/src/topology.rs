//! The consumer group a Redis Streams consumer relies on, declared with the deployment from a
//! settings struct that can live in the application's configuration.

use std::num::NonZeroU32;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::connector::{COMMAND_TIMEOUT, RedisConnector};
use delivery_core::transport::TransportError;

/// The settings of one consumed stream: its consumer group, this consumer's name, the bound on
/// deliveries and the dead-letter stream (rule 2: Redis keeps the count, the consumer enforces the
/// bound and moves the unit).
///
/// ```
/// use delivery::redis::RedisTopology;
///
/// let topology: RedisTopology = serde_json::from_str(
///     r#"{"stream": "orders", "group": "billing", "max_deliveries": 4, "claim_idle_ms": 5000}"#,
/// ).unwrap();
/// assert_eq!(topology.dead_letter_stream_name(), "orders.dlq");
/// assert_eq!(topology.delivery_bound().get(), 4);
/// assert_eq!(topology.claim_idle_time(), std::time::Duration::from_secs(5));
/// assert_eq!(topology.batch, 32);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RedisTopology {
    /// The stream consumed.
    pub stream: String,
    /// The consumer group reading it.
    pub group: String,
    /// This consumer's name within the group. Default: `delivery-<pid>-<n>`, a new name per
    /// source. A stable name (a pod or host name) keeps the group's consumer list short; pending
    /// entries are claimed back whatever the name, so either is safe.
    #[serde(default)]
    pub consumer: Option<String>,
    /// The dead-letter stream. Default `<stream>.dlq`.
    #[serde(default)]
    pub dead_letter_stream: Option<String>,
    /// The most deliveries a unit gets, counted by Redis (times delivered). Default 5.
    #[serde(default = "default_max_deliveries")]
    pub max_deliveries: u32,
    /// How long an entry stays pending (unacknowledged since its last delivery) before the
    /// consumer claims it back with `XAUTOCLAIM`, in milliseconds: the time after which a dead
    /// consumer's units are taken over, and the longest backoff before a failed unit is delivered
    /// again (a returned unit's idle time is set so that it is claimed back after its backoff,
    /// when that is shorter).
    /// A unit whose handler still runs is kept from being claimed: its consumer claims it again
    /// itself every third of this (`XCLAIM … JUSTID`, which resets the idle time and counts no
    /// delivery), up to `in_progress_limit_ms`. Default 30 000.
    #[serde(default = "default_claim_idle_ms")]
    pub claim_idle_ms: u64,
    /// How long, in milliseconds, a unit whose handler still runs is kept from being claimed by
    /// another consumer; past it, a hung handler's unit is claimed back (counting a delivery)
    /// while the first run may still go on. Default 300 000 (5 min).
    #[serde(default = "default_in_progress_limit_ms")]
    pub in_progress_limit_ms: u64,
    /// Entries read (`COUNT`) per `XREADGROUP` and per `XAUTOCLAIM`. Default 32.
    #[serde(default = "default_batch")]
    pub batch: usize,
    /// How long one `XREADGROUP` waits for new entries (`BLOCK`), in milliseconds; capped at half
    /// the claim idle time so claims are not held up. Default 2 000.
    #[serde(default = "default_block_ms")]
    pub block_ms: u64,
}

fn default_max_deliveries() -> u32 {
    5
}

fn default_in_progress_limit_ms() -> u64 {
    300_000
}

fn default_claim_idle_ms() -> u64 {
    30_000
}

fn default_batch() -> usize {
    32
}

fn default_block_ms() -> u64 {
    2_000
}

impl RedisTopology {
    /// The topology of `stream` read by `group`, with the defaults: a generated consumer name,
    /// dead letter `<stream>.dlq`, 5 deliveries, claim idle 30 s, batch 32, block 2 s.
    pub fn new(stream: impl Into<String>, group: impl Into<String>) -> Self {
        RedisTopology {
            stream: stream.into(),
            group: group.into(),
            consumer: None,
            dead_letter_stream: None,
            max_deliveries: default_max_deliveries(),
            claim_idle_ms: default_claim_idle_ms(),
            in_progress_limit_ms: default_in_progress_limit_ms(),
            batch: default_batch(),
            block_ms: default_block_ms(),
        }
    }

    /// Sets this consumer's name within the group.
    pub fn consumer(mut self, name: impl Into<String>) -> Self {
        self.consumer = Some(name.into());
        self
    }

    /// Sets the dead-letter stream's name.
    pub fn dead_letter_stream(mut self, name: impl Into<String>) -> Self {
        self.dead_letter_stream = Some(name.into());
        self
    }

    /// Sets the most deliveries a unit gets (`0` is read as 1).
    pub fn max_deliveries(mut self, n: u32) -> Self {
        self.max_deliveries = n.max(1);
        self
    }

    /// Sets the claim idle time (at least 1 ms).
    pub fn claim_idle(mut self, idle: Duration) -> Self {
        self.claim_idle_ms = u64::try_from(idle.as_millis()).unwrap_or(u64::MAX).max(1);
        self
    }

    /// Sets how long a unit whose handler still runs is kept from being claimed.
    pub fn in_progress_limit(mut self, limit: Duration) -> Self {
        self.in_progress_limit_ms = u64::try_from(limit.as_millis()).unwrap_or(u64::MAX);
        self
    }

    /// Sets the batch size (at least 1).
    pub fn batch(mut self, n: usize) -> Self {
        self.batch = n.max(1);
        self
    }

    /// Sets how long one read waits for new entries (at least 1 ms).
    pub fn block(mut self, wait: Duration) -> Self {
        self.block_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1);
        self
    }

    /// The dead-letter stream's name.
    pub fn dead_letter_stream_name(&self) -> String {
        self.dead_letter_stream
            .clone()
            .unwrap_or_else(|| format!("{}.dlq", self.stream))
    }

    /// The most deliveries a unit gets.
    pub fn delivery_bound(&self) -> NonZeroU32 {
        NonZeroU32::new(self.max_deliveries).unwrap_or(NonZeroU32::MIN)
    }

    /// The claim idle time.
    pub fn claim_idle_time(&self) -> Duration {
        Duration::from_millis(self.claim_idle_ms.max(1))
    }

    /// How often pending entries are looked at: half the claim idle time, at least 10 ms.
    pub(crate) fn claim_interval(&self) -> Duration {
        (self.claim_idle_time() / 2).max(Duration::from_millis(10))
    }

    /// One read's `BLOCK`, in milliseconds: the setting, capped by the claim interval.
    pub(crate) fn block_millis(&self) -> u64 {
        let interval = u64::try_from(self.claim_interval().as_millis()).unwrap_or(u64::MAX);
        self.block_ms.clamp(1, interval.max(1))
    }

    /// Creates the consumer group (`XGROUP CREATE <stream> <group> 0 MKSTREAM`), and the stream
    /// if it does not exist. The group starts at the beginning of the stream, so entries added
    /// before the first consumer started are consumed too. A group that already exists
    /// (`BUSYGROUP`) is left as it is. The dead-letter stream is created by its first entry.
    pub async fn declare(
        &self,
        connection: &mut (impl ::redis::aio::ConnectionLike + Send),
    ) -> Result<(), TransportError> {
        let created = ::redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(&self.stream)
            .arg(&self.group)
            .arg("0")
            .arg("MKSTREAM")
            .exec_async(connection)
            .await;
        match created {
            Ok(()) => Ok(()),
            Err(error) if error.code() == Some("BUSYGROUP") => Ok(()),
            Err(error) => Err(TransportError::msg(
                "creating the consumer group (XGROUP CREATE)",
                format!(
                    "group `{}` on stream `{}`: {error}",
                    self.group, self.stream
                ),
            )
            .with_kind(crate::error::REDIS.kind_of(&error))),
        }
    }
}

/// Declares `topology` ([`RedisTopology::declare`]) through `connector`: a URL, your `Client`,
/// or your own connection ([`RedisConnector`]).
///
/// ```no_run
/// # async fn run() -> Result<(), delivery::transport::TransportError> {
/// use delivery::redis::RedisTopology;
///
/// let topology = RedisTopology::new("orders", "billing");
/// delivery::redis::declare("redis://127.0.0.1:6379", &topology).await?;
/// // The same on your own (reconnecting) connection:
/// let manager = delivery::redis::connect("redis://127.0.0.1:6379").await?;
/// delivery::redis::declare(manager, &topology).await?;
/// # Ok(()) }
/// ```
pub async fn declare(
    connector: impl Into<RedisConnector>,
    topology: &RedisTopology,
) -> Result<(), TransportError> {
    let connections = connector.into().resolve()?;
    let mut connection = connections.open(Some(COMMAND_TIMEOUT)).await?;
    topology.declare(&mut connection).await
}
