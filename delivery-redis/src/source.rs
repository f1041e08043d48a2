//! A consumer of one stream through a consumer group, and the handle that settles each entry.

use std::collections::VecDeque;
use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use ::redis::Value;
use tokio::time::Instant;

use crate::acks::Acks;
use crate::codec::{self, Entry, Read};
use crate::connector::{COMMAND_TIMEOUT, Commands, Conn, Connections, RedisConnector};
use crate::settle::RedisHandle;
use crate::shared::Shared;
use crate::topology::RedisTopology;
use delivery_core::transport::{KeepAlive, Source, TransportError};
use delivery_core::unit::{DeliveryCount, Unit};

/// A consumer of one Redis stream through a consumer group (see the [module docs](super)).
///
/// Each [`receive`](Source::receive) hands out the next entry of a batch; when the batch is used
/// up it first claims back entries pending longer than the claim idle time (`XAUTOCLAIM`, every
/// half claim idle time, and again at once while the scan has more), then reads new ones
/// (`XREADGROUP ... BLOCK`). A lost connection is reported once by `receive` and reopened on the
/// next call, after the consumer runtime's wait between failed receives; entries read and not acknowledged
/// stay pending in the group and are claimed back.
///
/// Entries read ahead and not yet handed to a handler are pending too: if the source is dropped
/// with some (a shutdown, a crash), they are claimed back after the claim idle time, and that
/// claim counts as a delivery. [`RedisTopology::batch`] bounds how many that can be.
///
/// Made from your own connection ([`RedisConnector`]), it sends every command on yours and reads
/// without blocking, asking again every 50 ms while the stream has nothing new.
pub struct RedisSource {
    shared: Arc<Shared>,
    connections: Connections,
    reader: Option<Conn>,
    ready: VecDeque<(Entry, DeliveryCount)>,
    fetching: Option<Fetching>,
    claim_cursor: String,
    claim_at: Instant,
    claim_interval: Duration,
    /// The connection was lost and is being reopened (for the log line once it is back).
    reconnecting: bool,
}

/// How often a source reading through your own connection asks for new entries while there are
/// none (it does not block there: see [`RedisConnector`]).
const POLL: Duration = Duration::from_millis(50);

type Fetching = Pin<Box<dyn Future<Output = Result<Fetched, TransportError>> + Send>>;

/// What one fetch brought: entries to deliver, and where the claim scan stands if it ran.
struct Fetched {
    entries: Vec<(Entry, DeliveryCount)>,
    claim_cursor: Option<String>,
}

fn next_consumer_name() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "delivery-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

impl RedisSource {
    /// A source of `topology.stream` read by `topology.group` through `connector` — a URL, your
    /// `redis::Client`, or your own `ConnectionManager` / `MultiplexedConnection`
    /// ([`RedisConnector`]) — connected before it returns, so a wrong URL or a missing group
    /// fails at start. Declare the topology first ([`super::declare`]).
    ///
    /// ```no_run
    /// use delivery::redis::{RedisSource, RedisTopology};
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// let topology = RedisTopology::new("orders", "billing");
    /// let from_url = RedisSource::connect("redis://127.0.0.1:6379", topology.clone()).await?;
    /// // Your own reconnecting connection (reads poll instead of blocking on it):
    /// let manager = delivery::redis::connect("redis://127.0.0.1:6379").await?;
    /// let on_yours = RedisSource::connect(manager, topology).await?;
    /// # let _ = (from_url, on_yours); Ok(()) }
    /// ```
    pub async fn connect(
        connector: impl Into<RedisConnector>,
        topology: RedisTopology,
    ) -> Result<Self, TransportError> {
        let connections = connector.into().resolve()?;
        let mut source = RedisSource::new(connections, topology);
        let mut reader = source.connections.reader().await?;
        // `XPENDING` in its summary form fails with NOGROUP if the stream or the group is missing.
        ::redis::cmd("XPENDING")
            .arg(&source.shared.stream)
            .arg(&source.shared.group)
            .query_async::<Value>(&mut reader)
            .await
            .map_err(|e| {
                TransportError::msg(
                    "checking the consumer group (XPENDING)",
                    format!(
                        "group `{}` on stream `{}`: {e}; declare the topology first",
                        source.shared.group, source.shared.stream
                    ),
                )
            })?;
        source.reader = Some(reader);
        Ok(source)
    }

    fn new(connections: Connections, topology: RedisTopology) -> Self {
        let source_label = topology.stream.clone();
        let shared = Shared {
            consumer: topology.consumer.clone().unwrap_or_else(next_consumer_name),
            dead_letter_stream: topology.dead_letter_stream_name(),
            max_deliveries: topology.delivery_bound().get(),
            claim_idle_ms: topology.claim_idle_ms.max(1),
            in_progress_limit_ms: topology.in_progress_limit_ms,
            batch: topology.batch.max(1),
            block_ms: topology.block_millis(),
            blocks: connections.blocks(),
            deleted: metrics::counter!(delivery_core::observe::PENDING_DELETED, "source" => source_label.clone()),
            stream: topology.stream.clone(),
            group: topology.group.clone(),
            commands: Commands::new(connections.clone()),
            acks: Acks::default(),
            claim_by: std::sync::Mutex::new(None),
        };
        RedisSource {
            shared: Arc::new(shared),
            connections,
            reader: None,
            ready: VecDeque::new(),
            fetching: None,
            claim_cursor: "0-0".to_owned(),
            claim_at: Instant::now(),
            claim_interval: topology.claim_interval(),
            reconnecting: false,
        }
    }

    /// This consumer's name within the group.
    pub fn consumer(&self) -> &str {
        &self.shared.consumer
    }

    /// The dead-letter stream's name.
    pub fn dead_letter_stream(&self) -> &str {
        &self.shared.dead_letter_stream
    }

    fn lost(&mut self, error: TransportError) -> TransportError {
        self.reader = None;
        self.reconnecting = true;
        error
    }
}

impl Source for RedisSource {
    type Handle = RedisHandle;

    /// Cancel safe: a fetch in progress is kept in the source and resumed by the next call, so
    /// a reply Redis sends for a cancelled call is still read; entries already read wait in the
    /// source.
    async fn receive(&mut self) -> Result<Option<(Unit, RedisHandle)>, TransportError> {
        loop {
            if let Some((entry, count)) = self.ready.pop_front() {
                let shared = self.shared.clone();
                if shared.redriven_for_another(&entry).await {
                    continue;
                }
                let unit = codec::unit(&entry, count);
                let handle = RedisHandle {
                    entry,
                    shared: self.shared.clone(),
                };
                return Ok(Some((unit, handle)));
            }
            if self.fetching.is_none() {
                let reader = match &self.reader {
                    Some(reader) => reader.clone(),
                    None => match self.connections.reader().await {
                        Ok(reader) => {
                            if std::mem::take(&mut self.reconnecting) {
                                tracing::info!(stream = %self.shared.stream, "reconnected; reading again");
                            }
                            self.reader = Some(reader.clone());
                            reader
                        }
                        Err(error) => return Err(self.lost(error)),
                    },
                };
                if let Some(at) = self.shared.take_claim_by() {
                    self.claim_at = self.claim_at.min(at);
                }
                let claim = (Instant::now() >= self.claim_at).then(|| self.claim_cursor.clone());
                self.fetching = Some(Box::pin(fetch(self.shared.clone(), reader, claim)));
            }
            let fetching = self.fetching.as_mut().expect("set above");
            let fetched = fetching.await;
            self.fetching = None;
            match fetched {
                Ok(fetched) => {
                    if let Some(cursor) = fetched.claim_cursor {
                        let now = Instant::now();
                        // A scan that has more goes on at once; a finished one waits.
                        self.claim_at = if cursor == "0-0" {
                            now + self.claim_interval
                        } else {
                            now
                        };
                        self.claim_cursor = cursor;
                    }
                    self.ready.extend(fetched.entries);
                }
                Err(error) => return Err(self.lost(error)),
            }
        }
    }

    fn max_deliveries(&self) -> Option<NonZeroU32> {
        NonZeroU32::new(self.shared.max_deliveries)
    }

    fn name(&self) -> &str {
        &self.shared.stream
    }

    fn messaging(&self) -> delivery_core::trace::Messaging {
        delivery_core::trace::Messaging::new("redis", &*self.shared.stream)
            .consumer_group(&*self.shared.group)
    }

    /// `XCLAIM … JUSTID` every third of the claim idle time while the handler runs, up to
    /// `in_progress_limit_ms`.
    fn keep_alive(&self) -> Option<KeepAlive> {
        Some(KeepAlive::within(
            Duration::from_millis(self.shared.claim_idle_ms),
            Duration::from_millis(self.shared.in_progress_limit_ms),
        ))
    }
}

/// Runs a command on the reader (which has no client response timeout) within `limit`.
async fn on_reader<T: ::redis::FromRedisValue>(
    what: &'static str,
    limit: Duration,
    reader: &mut Conn,
    command: &::redis::Cmd,
) -> Result<T, TransportError> {
    match tokio::time::timeout(limit, command.query_async::<T>(reader)).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(crate::error::REDIS.error(what, error)),
        Err(_) => Err(TransportError::msg(
            what,
            format!("no reply within {limit:?}; reconnecting"),
        )),
    }
}

/// One fetch: claim back idle pending entries if `claim` holds a cursor, and, when that brought
/// nothing and the scan is done, read new entries.
async fn fetch(
    shared: Arc<Shared>,
    mut reader: Conn,
    claim: Option<String>,
) -> Result<Fetched, TransportError> {
    let mut claim_cursor = None;
    if let Some(cursor) = claim {
        let (next, claimed) = claim_pending(&shared, &mut reader, &cursor).await?;
        let more = next != "0-0";
        claim_cursor = Some(next);
        if more || !claimed.is_empty() {
            return Ok(Fetched {
                entries: claimed,
                claim_cursor,
            });
        }
    }
    const READ: &str = "reading new entries (XREADGROUP)";
    let mut read = ::redis::cmd("XREADGROUP");
    read.arg("GROUP")
        .arg(&shared.group)
        .arg(&shared.consumer)
        .arg("COUNT")
        .arg(shared.batch);
    // On the caller's connection a `BLOCK` would hold up every command behind it: the read
    // polls instead, until the block time is up.
    if shared.blocks {
        read.arg("BLOCK").arg(shared.block_ms);
    }
    read.arg("STREAMS").arg(&shared.stream).arg(">");
    let limit = Duration::from_millis(shared.block_ms) + COMMAND_TIMEOUT;
    let until = Instant::now() + Duration::from_millis(shared.block_ms);
    loop {
        let reply: Value = on_reader(READ, limit, &mut reader, &read).await?;
        let shape = codec::Shape::of("XREADGROUP", &reply);
        let read =
            codec::read_group(reply).ok_or_else(|| TransportError::msg(READ, shape.to_string()))?;
        let entries: Vec<_> = read
            .into_iter()
            .filter_map(|read| match read {
                // New entries are on their first delivery: Redis set their counter to 1.
                Read::Entry(entry) => Some((entry, DeliveryCount::FIRST)),
                Read::Deleted(_) => None,
            })
            .collect();
        if !entries.is_empty() || shared.blocks || Instant::now() >= until {
            return Ok(Fetched {
                entries,
                claim_cursor,
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

/// `XAUTOCLAIM` from `cursor`, then each claimed entry's times-delivered from `XPENDING`.
/// Entries past the bound go to the dead letter here, without reaching a handler.
async fn claim_pending(
    shared: &Shared,
    reader: &mut Conn,
    cursor: &str,
) -> Result<(String, Vec<(Entry, DeliveryCount)>), TransportError> {
    const CLAIM: &str = "claiming pending entries (XAUTOCLAIM)";
    let mut claim = ::redis::cmd("XAUTOCLAIM");
    claim
        .arg(&shared.stream)
        .arg(&shared.group)
        .arg(&shared.consumer)
        .arg(shared.claim_idle_ms)
        .arg(cursor)
        .arg("COUNT")
        .arg(shared.batch);
    let reply: Value = on_reader(CLAIM, COMMAND_TIMEOUT, reader, &claim).await?;
    let shape = codec::Shape::of("XAUTOCLAIM", &reply);
    let (next, claimed) =
        codec::auto_claim(reply).ok_or_else(|| TransportError::msg(CLAIM, shape.to_string()))?;
    let mut entries = Vec::with_capacity(claimed.len());
    for read in claimed {
        match read {
            Read::Entry(entry) => entries.push(entry),
            Read::Deleted(id) => {
                shared.deleted.increment(1);
                tracing::warn!(stream = %shared.stream, group = %shared.group, entry.id = %id,
                    "a pending entry was deleted from the stream (trimmed?) before it was \
                     acknowledged; Redis dropped it from the pending list and it cannot be delivered");
            }
        }
    }
    if entries.is_empty() {
        return Ok((next, Vec::new()));
    }
    // The claim incremented each entry's counter; read it back for this consumer.
    let mut pipe = ::redis::pipe();
    for entry in &entries {
        pipe.cmd("XPENDING")
            .arg(&shared.stream)
            .arg(&shared.group)
            .arg(&entry.id)
            .arg(&entry.id)
            .arg(1)
            .arg(&shared.consumer);
    }
    const COUNT: &str = "reading the delivery counts (XPENDING)";
    let counts: Vec<Value> =
        match tokio::time::timeout(COMMAND_TIMEOUT, pipe.query_async(reader)).await {
            Ok(Ok(counts)) => counts,
            Ok(Err(error)) => return Err(crate::error::REDIS.error(COUNT, error)),
            Err(_) => return Err(TransportError::msg(COUNT, "no reply; reconnecting")),
        };
    if counts.len() != entries.len() {
        return Err(TransportError::msg(COUNT, "fewer replies than commands"));
    }
    let mut out = Vec::with_capacity(entries.len());
    for (entry, reply) in entries.into_iter().zip(counts) {
        let shape = codec::Shape::of("XPENDING", &reply);
        let count = codec::pending_count(reply)
            .ok_or_else(|| TransportError::msg(COUNT, shape.to_string()))?;
        let Some(count) = count else {
            // Acknowledged or claimed by another consumer since: not ours to deliver.
            tracing::debug!(stream = %shared.stream, entry.id = %entry.id, "claimed entry no longer pending for this consumer");
            continue;
        };
        // Past the bound (its consumers crashed on every delivery) it is handed out too: the
        // runtime dead-letters it before any handler runs.
        out.push((entry, DeliveryCount::new(count)));
    }
    Ok((next, out))
}

impl Shared {
    /// Whether `entry` is a unit redriven from the dead letter of another group
    /// ([`delivery_core::headers::REDRIVE_GROUP`]): this group applied it when it was first delivered,
    /// so it is acknowledged, not handled.
    pub(super) async fn redriven_for_another(&self, entry: &Entry) -> bool {
        let Some(group) = codec::field(&entry.fields, delivery_core::headers::REDRIVE_GROUP) else {
            return false;
        };
        if group.as_ref() == self.group.as_bytes() {
            return false;
        }
        if let Err(error) = self.ack(entry.id.clone()).await {
            // Pending still: claimed back after the claim idle time, and skipped again.
            tracing::warn!(stream = %self.stream, entry.id = %entry.id, %error,
                "acknowledging an entry redriven for another group failed");
        }
        tracing::debug!(stream = %self.stream, group = %self.group, entry.id = %entry.id,
            redriven_for = %String::from_utf8_lossy(group),
            "an entry redriven for another group; acknowledged, not handled");
        true
    }

    /// When the source must scan for an entry given back, if one was since it last looked.
    fn take_claim_by(&self) -> Option<Instant> {
        self.claim_by
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }
}
