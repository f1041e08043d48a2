//! Redis Streams consumer groups (feature `redis`): a [`Source`](delivery_core::Source) over one stream
//! read by a consumer group, the topology helper that creates the group, a publish helper, and
//! the operator's view of the dead-letter stream ([`RedisDeadLetters`], a
//! [`DeadLetters`](delivery_core::DeadLetters)).
//!
//! - **Acknowledgement**: new entries are read with `XREADGROUP ... >`; an entry is `XACK`ed only
//!   once its handler resolved `Ok` (the runtime's [`Disposition::Ack`](delivery_core::Disposition::Ack)),
//!   and its settle returns only once Redis answered that `XACK`. At most one `XACK` of a source
//!   is in flight: the entries settled while it is go together in the next one
//!   (`XACK <stream> <group> <id1> … <idN>`), so units in flight cost one command per round trip
//!   instead of one each; one unit at a time, each `XACK` carries one id.
//! - **Return**: a failed entry is left pending in the group. The source claims pending entries
//!   back itself with `XAUTOCLAIM` once they have been idle for the topology's
//!   [`claim_idle`](RedisTopology::claim_idle), and it is what brings a failed entry back until
//!   it reaches the bound (rule 1's last sentence). The runtime's backoff is kept up to that idle
//!   time: the entry given back has its idle time set (`XCLAIM … IDLE … JUSTID`, no delivery
//!   counted) so that it is claimed back once its backoff passed, and the source's next claim
//!   scan is brought forward to then; a backoff longer than the claim idle time is cut to it. Entries `XAUTOCLAIM` reports as deleted (trimmed
//!   away while pending) are logged with `tracing::warn!` and counted in
//!   `delivery_pending_deleted_total{source}`, never dropped silently.
//! - **The bound is Redis's count**: a unit's [`DeliveryCount`](delivery_core::DeliveryCount) is the
//!   pending entry's *times delivered* as Redis keeps it. An entry read with `XREADGROUP ... >`
//!   is on its first delivery (Redis sets the counter to 1); an entry claimed back is read with
//!   `XPENDING <stream> <group> <id> <id> 1 <consumer>` (the extended form) right after the
//!   claim, which incremented it. Nothing is counted in the process, so a restart or another
//!   replica continues the same count. [`Source::max_deliveries`](delivery_core::Source::max_deliveries)
//!   is the topology's [`max_deliveries`](RedisTopology::max_deliveries); an entry claimed with a
//!   count already past it (its consumers kept dying on it) goes to the dead letter as
//!   `exhausted` without reaching a handler again.
//! - **Dead letter**: past the bound, malformed or rejected, the entry is `XADD`ed to the
//!   dead-letter stream with all its fields as read, plus [`delivery_core::headers::DEAD_LETTER_REASON`],
//!   [`delivery_core::headers::DEAD_LETTER_DETAIL`], [`delivery_core::headers::DEAD_LETTER_SOURCE`], [`delivery_core::headers::DEAD_LETTER_ENTRY_ID`]
//!   and [`delivery_core::headers::DEAD_LETTER_DELIVERY_COUNT`]; only once Redis answered the `XADD` is it `XACK`ed.
//!   A failed `XADD` leaves it pending (returned), never acknowledged. A crash between the two
//!   leaves a duplicate in the dead letter, never a loss.
//! - **Blocking reads** run on a connection of their own with no client response timeout (the
//!   client's default 500 ms would cut every `BLOCK` short); the source bounds them itself
//!   (`BLOCK` plus a margin). Acknowledgements and dead-lettering use a second connection.
//! - **Your own client**: the source, [`declare`] and [`RedisDeadLetters`] take a
//!   [`RedisConnector`] — a URL, your `redis::Client`, or your own `ConnectionManager` /
//!   `MultiplexedConnection` (on which the source polls instead of blocking).
//!
//! # The entry layout and the unit id
//!
//! A unit is one stream entry. Its payload is the field [`FIELD_PAYLOAD`] (`payload`, bytes as
//! they are; an entry without it has an empty payload, which a `Json` handler refuses as
//! malformed, so it goes to the dead letter intact). Every other field except [`FIELD_ID`] is a
//! header of the unit.
//!
//! The [`UnitId`](delivery_core::UnitId) is the producer-supplied field [`FIELD_ID`] (`id`) when present
//! (and non-empty UTF-8), otherwise the stream entry id. Prefer the `id` field: an entry id is
//! minted by Redis per `XADD`, so the same unit published twice, or redriven from the dead letter,
//! gets a new entry id; the `id` field travels with the entry. A redrive writes the unit id into
//! the `id` field when the entry had none, so a redriven unit keeps the id it was dead-lettered
//! under. [`publish`] writes the layout.
//!
//! ```no_run
//! use delivery::{consumer, Consumer, HandlerError, Json};
//! use delivery::redis::{RedisSource, RedisTopology};
//!
//! #[derive(serde::Deserialize)]
//! struct Order { order_id: String }
//!
//! #[consumer]
//! async fn handle(Json(order): Json<Order>) -> Result<(), HandlerError> {
//!     let _ = order.order_id;
//!     Ok(())
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let url = "redis://127.0.0.1:6379";
//! let topology = RedisTopology::new("orders", "billing")
//!     .max_deliveries(5)
//!     .claim_idle(std::time::Duration::from_secs(30));
//! delivery::redis::declare(url, &topology).await?;
//! let source = RedisSource::connect(url, topology).await?;
//! Consumer::new(source).concurrency(16).run(handle).await;
//! # Ok(()) }
//! ```

#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod error;
mod ack;
mod codec;
mod dead_letter;
mod publish;
mod settle;
mod source;
mod topology;

pub use dead_letter::RedisDeadLetters;
pub use publish::publish;
pub use settle::RedisHandle;
pub use source::RedisSource;
pub use topology::RedisTopology;

/// The Redis client (crate `redis`, 1.x), re-exported so its version always matches the
/// connections [`connect`], [`publish`] and [`RedisConnector`] take: name its types as
/// `delivery::redis::client::...`.
pub use ::redis as client;

use std::sync::Mutex;
use std::time::Duration;

use ::redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use ::redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisError, RedisFuture, Value};

use delivery_core::transport::TransportError;

/// The field holding the unit's payload.
pub const FIELD_PAYLOAD: &str = "payload";
/// The field holding the producer-supplied unit id.
pub const FIELD_ID: &str = "id";

/// How long a command on the non-blocking connection may take before it counts as failed.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

/// How often a source reading through your own connection asks for new entries while there are
/// none (it does not block there: see [`RedisConnector`]).
const POLL: Duration = Duration::from_millis(50);

/// Where the Redis transport gets its connections: a URL, **your own** [`redis::Client`]
/// (its TLS, credentials and protocol kept), or **your own** connection — a
/// [`ConnectionManager`] (reconnecting), a [`MultiplexedConnection`], or anything
/// [`ConnectionLike`] + `Clone` ([`shared`](Self::shared)). [`RedisSource::connect`],
/// [`declare`] and [`RedisDeadLetters::new`] take one (`impl Into<RedisConnector>`); a `&str` or
/// `String` is a URL. [`publish`] and [`RedisTopology::declare`] take your connection directly.
///
/// | made from | connections |
/// |---|---|
/// | a URL, or your `Client` | the transport opens its own from it: one for blocking reads (`XREADGROUP … BLOCK`, no response timeout) and one for everything else (10 s response timeout); both reopened after a loss |
/// | your connection | every command goes on yours; a [`ConnectionManager`] reconnects by itself, a [`MultiplexedConnection`] that dropped stays dropped (each receive then fails) |
///
/// **On your connection the source does not block.** A blocking `XREADGROUP` would hold up every
/// other command sent on a multiplexed connection — your own, and the source's acknowledgements —
/// for up to the block time. So the source reads without `BLOCK` and, while the stream has
/// nothing new, asks again every 50 ms until the topology's [`block`](RedisTopology::block) time
/// is up: one cheap command per 50 ms per idle source. Hand over your `Client` instead to keep
/// the blocking reads on connections of the source's own.
///
/// ```no_run
/// use delivery::redis::client::aio::ConnectionManager;
/// use delivery::redis::{RedisDeadLetters, RedisSource, RedisTopology};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let client = delivery::redis::client::Client::open("redis://127.0.0.1:6379")?;
/// let manager = ConnectionManager::new(client.clone()).await?;
/// let topology = RedisTopology::new("orders", "billing");
/// delivery::redis::declare(manager.clone(), &topology).await?;
/// let on_yours = RedisSource::connect(manager.clone(), topology.clone()).await?;
/// let from_your_client = RedisSource::connect(client, topology.clone()).await?;
/// let dead = RedisDeadLetters::new(manager, &topology)?;
/// # let _ = (on_yours, from_your_client, dead); Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisConnector(Origin);

#[derive(Clone)]
enum Origin {
    Url(String),
    Client(::redis::Client),
    Shared(Conn),
}

impl RedisConnector {
    /// The server at `url` (`redis://host:port/db`, `rediss://` with a TLS feature of `redis`).
    pub fn url(url: impl Into<String>) -> Self {
        RedisConnector(Origin::Url(url.into()))
    }

    /// Your `client`: the transport opens its connections from it, so its TLS configuration,
    /// credentials, database and protocol are kept.
    pub fn client(client: ::redis::Client) -> Self {
        RedisConnector(Origin::Client(client))
    }

    /// Your `connection`: every command goes on it (clones of it), none blocks (see the type
    /// docs). A [`ConnectionManager`] reconnects by itself after a loss; a connection that does
    /// not stays lost.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// use delivery::redis::RedisConnector;
    ///
    /// let client = delivery::redis::client::Client::open("redis://127.0.0.1:6379")?;
    /// let connection = client.get_multiplexed_async_connection().await?;
    /// let connector = RedisConnector::shared(connection);
    /// # let _ = connector; Ok(()) }
    /// ```
    pub fn shared<C>(connection: C) -> Self
    where
        C: ConnectionLike + Clone + Send + Sync + 'static,
    {
        RedisConnector(Origin::Shared(Conn(Box::new(connection))))
    }

    /// The URL parsed: what the transport opens its connections from.
    pub(crate) fn resolve(self) -> Result<Connections, TransportError> {
        Ok(match self.0 {
            Origin::Url(url) => Connections::Own(client(&url)?),
            Origin::Client(client) => Connections::Own(client),
            Origin::Shared(connection) => Connections::Shared(connection),
        })
    }
}

impl std::fmt::Debug for RedisConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0 {
            Origin::Url(_) => "RedisConnector::Url",
            Origin::Client(_) => "RedisConnector::Client",
            Origin::Shared(_) => "RedisConnector::Shared",
        })
    }
}

impl From<&str> for RedisConnector {
    fn from(url: &str) -> Self {
        RedisConnector::url(url)
    }
}

impl From<&String> for RedisConnector {
    fn from(url: &String) -> Self {
        RedisConnector::url(url.as_str())
    }
}

impl From<String> for RedisConnector {
    fn from(url: String) -> Self {
        RedisConnector::url(url)
    }
}

impl From<::redis::Client> for RedisConnector {
    fn from(client: ::redis::Client) -> Self {
        RedisConnector::client(client)
    }
}

impl From<ConnectionManager> for RedisConnector {
    fn from(connection: ConnectionManager) -> Self {
        RedisConnector::shared(connection)
    }
}

impl From<MultiplexedConnection> for RedisConnector {
    fn from(connection: MultiplexedConnection) -> Self {
        RedisConnector::shared(connection)
    }
}

/// A connection of any kind, cloned as its kind clones (a multiplexed connection: a handle on
/// the same socket).
pub(crate) struct Conn(Box<dyn Shareable>);

trait Shareable: ConnectionLike + Send + Sync {
    fn boxed(&self) -> Box<dyn Shareable>;
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Shareable for C {
    fn boxed(&self) -> Box<dyn Shareable> {
        Box::new(self.clone())
    }
}

impl Clone for Conn {
    fn clone(&self) -> Self {
        Conn(self.0.boxed())
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.0.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.0.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.0.get_db()
    }
}

/// Where the transport's connections come from, resolved.
#[derive(Clone)]
pub(crate) enum Connections {
    /// Opened by the transport from a client (a URL's, or the caller's).
    Own(::redis::Client),
    /// The caller's connection.
    Shared(Conn),
}

impl Connections {
    /// Whether the source may block on its reader (it has one of its own).
    pub(crate) fn blocks(&self) -> bool {
        matches!(self, Connections::Own(_))
    }

    /// A connection for reading: without a response timeout when it is the transport's own, so
    /// a `BLOCK` is not cut short (the reader bounds each command itself).
    pub(crate) async fn reader(&self) -> Result<Conn, TransportError> {
        self.open(None).await
    }

    async fn open(&self, response_timeout: Option<Duration>) -> Result<Conn, TransportError> {
        match self {
            Connections::Own(client) => Ok(Conn(Box::new(open(client, response_timeout).await?))),
            Connections::Shared(connection) => Ok(connection.clone()),
        }
    }
}

/// A connection for commands that do not block, opened on first use and opened again after a
/// failure of the connection itself.
pub(crate) struct Commands {
    connections: Connections,
    cached: Mutex<Option<Conn>>,
}

impl Commands {
    pub(crate) fn new(connections: Connections) -> Self {
        Commands {
            connections,
            cached: Mutex::new(None),
        }
    }

    pub(crate) async fn connection(&self) -> Result<Conn, TransportError> {
        if let Some(connection) = self
            .cached
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            return Ok(connection.clone());
        }
        let connection = self.connections.open(Some(COMMAND_TIMEOUT)).await?;
        *self.cached.lock().unwrap_or_else(|p| p.into_inner()) = Some(connection.clone());
        Ok(connection)
    }

    /// Forgets the connection after a failure of the connection itself.
    pub(crate) fn failed(&self, what: &'static str, error: RedisError) -> TransportError {
        if error.is_unrecoverable_error() || error.is_connection_dropped() || error.is_timeout() {
            *self.cached.lock().unwrap_or_else(|p| p.into_inner()) = None;
        }
        crate::error::transport_error(what, error)
    }

    /// Runs `command`, forgetting the connection after a failure of the connection itself.
    pub(crate) async fn run<T: ::redis::FromRedisValue>(
        &self,
        what: &'static str,
        command: &Cmd,
    ) -> Result<T, TransportError> {
        let mut connection = self.connection().await?;
        command
            .query_async(&mut connection)
            .await
            .map_err(|error| self.failed(what, error))
    }
}

fn client(url: &str) -> Result<::redis::Client, TransportError> {
    ::redis::Client::open(url).map_err(|e| crate::error::transport_error("parsing the Redis URL", e))
}

async fn open(
    client: &::redis::Client,
    response_timeout: Option<Duration>,
) -> Result<MultiplexedConnection, TransportError> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(5)))
        .set_response_timeout(response_timeout);
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| crate::error::transport_error("connecting to Redis", e))
}

/// A connection to `url` (`redis://host:port/db`) for commands that do not block — a handler's
/// effects, publishing, the topology — connected before it returns, with a 10 s response
/// timeout. Cloning is cheap; clones share it.
///
/// It reconnects by itself (redis' [`ConnectionManager`]): after a restart, a failover or a
/// dropped connection, a command in flight when it dropped fails (a handler returning that error
/// has its unit returned and delivered again), and the next command goes on a fresh connection —
/// a few seconds without Redis cost some retries, never a stream of units failing to their bound.
pub async fn connect(url: &str) -> Result<ConnectionManager, TransportError> {
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(5)))
        .set_response_timeout(Some(COMMAND_TIMEOUT))
        .set_min_delay(Duration::from_millis(100))
        .set_max_delay(Duration::from_secs(2))
        .set_number_of_retries(3);
    ConnectionManager::new_with_config(client(url)?, config)
        .await
        .map_err(|e| crate::error::transport_error("connecting to Redis", e))
}

/// Declares `topology` ([`RedisTopology::declare`]) through `connector`: a URL, your `Client`,
/// or your own connection ([`RedisConnector`]).
///
/// ```no_run
/// # async fn run() -> Result<(), delivery::TransportError> {
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
