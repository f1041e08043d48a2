//! Where the transport gets its connections ([`RedisConnector`]), resolved into the blocking
//! reader and the connection for every other command ([`Connections`], [`Commands`]), and
//! [`connect`].

use std::sync::Mutex;
use std::time::Duration;

use ::redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use ::redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisError, RedisFuture, Value};

use delivery_core::transport::TransportError;

/// How long a command on the non-blocking connection may take before it counts as failed.
pub(crate) const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the Redis transport gets its connections: a URL, **your own** [`redis::Client`]
/// (its TLS, credentials and protocol kept), or **your own** connection — a
/// [`ConnectionManager`] (reconnecting), a [`MultiplexedConnection`], or anything
/// [`ConnectionLike`] + `Clone` ([`shared`](Self::shared)). [`RedisSource::connect`](crate::RedisSource::connect),
/// [`declare`](crate::declare) and [`RedisDeadLetters::new`](crate::RedisDeadLetters::new) take one (`impl Into<RedisConnector>`); a `&str` or
/// `String` is a URL. [`publish`](crate::publish()) and [`RedisTopology::declare`](crate::RedisTopology::declare) take your connection directly.
///
/// | made from | connections |
/// |---|---|
/// | a URL, or your `Client` | the transport opens its own from it: one for blocking reads (`XREADGROUP … BLOCK`, no response timeout) and one for everything else (10 s response timeout); both reopened after a loss |
/// | your connection | every command goes on yours; a [`ConnectionManager`] reconnects by itself, a [`MultiplexedConnection`] that dropped stays dropped (each receive then fails) |
///
/// **On your connection the source does not block.** A blocking `XREADGROUP` would hold up every
/// other command sent on a multiplexed connection — your own, and the source's acknowledgements —
/// for up to the block time. So the source reads without `BLOCK` and, while the stream has
/// nothing new, asks again every 50 ms until the topology's [`block`](crate::RedisTopology::block) time
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

    pub(crate) async fn open(
        &self,
        response_timeout: Option<Duration>,
    ) -> Result<Conn, TransportError> {
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
        crate::error::REDIS.error(what, error)
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
    ::redis::Client::open(url).map_err(|e| crate::error::REDIS.error("parsing the Redis URL", e))
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
        .map_err(|e| crate::error::REDIS.error("connecting to Redis", e))
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
        .map_err(|e| crate::error::REDIS.error("connecting to Redis", e))
}
