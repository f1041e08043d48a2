//! The one confirmed publisher: mandatory publishes under publisher confirms, pipelined on one
//! channel, each settled by its own confirm and its own return only.
//!
//! Used by the consumer source (dead-letter copies, classic-queue return copies), by the dead
//! letter's redrive, and by the outbox relay's [`RabbitSink`](super::RabbitSink).
//!
//! - **Pipelined.** Many publishes (from clones too) share one channel; each awaits its own
//!   confirm, and up to a window of them are outstanding at once. The only section held across an
//!   await is the write of the frames to the socket, never a broker round trip.
//! - **Returns are charged exactly.** AMQP's `basic.return` carries no delivery tag, and lapin
//!   attaches it to whichever confirm it resolves next (with `multiple` acks, maybe a
//!   neighbour's). So a return is charged by the key it carries — (exchange, routing key,
//!   `message_id`) — never by where lapin attached it, and no two publishes with the same key are
//!   in flight on a channel at once: a publish whose key is in flight waits, in order, until that
//!   one is settled. Publishes without a `message_id` share their (exchange, routing key) key and
//!   go one at a time; only they pay.
//! - **Reconnect strategy.** A channel the broker closed (a missing exchange: `404 NOT_FOUND`), a
//!   lost connection, or a confirm that did not come within the timeout retires the channel; the
//!   next publish opens a fresh one (and, for a publisher that dials its own connection, a fresh
//!   connection when the old one is gone). No backoff inside: every failed publish is the caller's
//!   to retry. Publishes in flight on a retired channel fail too.

mod lane;
mod outcome;
mod window;

pub(crate) use outcome::Outcome;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use lapin::BasicProperties;
use lapin::types::ShortString;
use tokio::sync::{Mutex, Semaphore, oneshot};
use tracing::debug;

use crate::connector::{Leased, RabbitConnector};
use delivery_core::transport::TransportError;

use lane::{Lane, retire};
use window::{Key, Publish};

/// How long a publish waits, in all, for the broker's confirm unless told otherwise.
pub const DEFAULT_CONFIRM_TIMEOUT: Duration = Duration::from_secs(30);

/// How many publishes may await their confirm at once unless told otherwise.
pub const DEFAULT_CONFIRM_WINDOW: usize = 1024;

/// Publishes under publisher confirms and reports each publish's own outcome: `Ok` only for a
/// `basic.ack` of a publish the broker did not return (every publish is `mandatory`, so an
/// unroutable one comes back and fails). Cloning is cheap; clones share the channel and window.
///
/// Made with [`new`](Self::new) from a URL or a factory, it keeps its own connection (publishing
/// and consuming on separate connections, so the broker's flow control on one never stalls the
/// other), dialled on first use and redialled after a loss; from your own connection, it publishes
/// on yours ([`RabbitConnector`]). Publishes are pipelined on one confirm channel; returns
/// are charged by (exchange, routing key, `message_id`), and two publishes with the same key are
/// never in flight at once (the second waits for the first), so a returned publish is never
/// reported confirmed because a neighbour's confirm carried its return. Each publish waits at most
/// the confirm timeout (30 s) and then fails, retiring the channel. It spawns one tokio task per
/// channel, so it is used inside a tokio runtime.
#[derive(Clone)]
pub struct ConfirmedPublisher {
    shared: Arc<Shared>,
    window: Arc<Semaphore>,
    timeout: Duration,
}

impl fmt::Debug for ConfirmedPublisher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConfirmedPublisher")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

struct Shared {
    connector: RabbitConnector,
    open: Mutex<Opened>,
    generation: AtomicU64,
}

#[derive(Default)]
struct Opened {
    connection: Option<Leased>,
    lane: Option<Arc<Lane>>,
}

impl ConfirmedPublisher {
    /// A publisher through `connector`; connects on first use. From a URL (or a factory), it
    /// publishes on a connection of its own, redialled after a loss; from your
    /// [`Connection`](lapin::Connection), it opens its confirm channel on yours (see [`RabbitConnector`]).
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// use delivery::lapin::{BasicProperties, Connection};
    /// use delivery::rabbitmq::ConfirmedPublisher;
    /// use std::sync::Arc;
    ///
    /// let url = "amqp://guest:guest@127.0.0.1:5672/%2f";
    /// let own = ConfirmedPublisher::new(url);
    /// // On your own connection:
    /// let connection = Arc::new(Connection::connect(url, Default::default()).await?);
    /// let yours = ConfirmedPublisher::new(connection.clone());
    /// yours.publish("orders", b"{}", BasicProperties::default()).await?;
    /// # let _ = own; Ok(()) }
    /// ```
    pub fn new(connector: impl Into<RabbitConnector>) -> Self {
        ConfirmedPublisher {
            shared: Arc::new(Shared {
                connector: connector.into(),
                open: Mutex::new(Opened::default()),
                generation: AtomicU64::new(0),
            }),
            window: Arc::new(Semaphore::new(DEFAULT_CONFIRM_WINDOW)),
            timeout: DEFAULT_CONFIRM_TIMEOUT,
        }
    }

    /// How long a publish waits, in all, for a window slot, the channel and the confirm.
    pub(crate) fn confirm_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How many publishes may await their confirm at once (at least 1), for this publisher and
    /// the clones made from it afterwards.
    pub(crate) fn window(mut self, publishes: usize) -> Self {
        self.window = Arc::new(Semaphore::new(publishes.clamp(1, Semaphore::MAX_PERMITS)));
        self
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Opens the confirm channel (and the connection, if the publisher dials its own) now.
    pub(crate) async fn open(&self) -> Result<(), TransportError> {
        self.lane().await.map(drop)
    }

    /// Publishes `body` with `properties` to `queue` through the default exchange, and waits for
    /// the broker's confirm.
    pub async fn publish(
        &self,
        queue: &str,
        body: &[u8],
        properties: BasicProperties,
    ) -> Result<(), TransportError> {
        let routing_key = ShortString::try_new(queue)
            .map_err(|e| TransportError::msg("publishing", format!("queue name: {e}")))?;
        let outcome = self
            .send(
                ShortString::default(),
                routing_key,
                Bytes::copy_from_slice(body),
                properties,
            )
            .await;
        let kind = outcome.kind();
        let failed =
            |detail: String| Err(TransportError::msg("publishing", detail).with_kind(kind));
        match outcome {
            Outcome::Confirmed => Ok(()),
            Outcome::Returned { code, text } => failed(format!(
                "the broker returned the unit as unroutable to `{queue}` ({code} {text}): does the queue exist?"
            )),
            Outcome::Nacked => failed(format!(
                "the broker refused the unit (basic.nack) for `{queue}`"
            )),
            Outcome::NotConfirmMode => failed("the channel is not in confirm mode".into()),
            Outcome::Lost(reason) => failed(format!(
                "the channel was lost before the broker confirmed the unit for `{queue}`: {reason}"
            )),
            Outcome::TimedOut(timeout) => Err(TransportError::msg(
                "waiting for the publisher confirm",
                format!("no confirm for the unit to `{queue}` within {timeout:?}"),
            )
            .with_kind(kind)),
            Outcome::Unavailable(error) => Err(error),
        }
    }

    /// Publishes `payload` with `properties` to `exchange` under `routing_key`, `mandatory`, and
    /// waits (at most the confirm timeout) for how the broker settled it.
    pub(crate) async fn send(
        &self,
        exchange: ShortString,
        routing_key: ShortString,
        payload: Bytes,
        properties: BasicProperties,
    ) -> Outcome {
        let key = Key {
            exchange,
            routing_key,
            message_id: properties.message_id().clone(),
        };
        let mut used = None;
        let submitted = self.submit(key, payload, properties, &mut used);
        match tokio::time::timeout(self.timeout, submitted).await {
            Ok(outcome) => outcome,
            Err(_) => {
                if let Some(lane) = used {
                    retire(&lane, "a confirm timed out");
                }
                Outcome::TimedOut(self.timeout)
            }
        }
    }

    async fn submit(
        &self,
        key: Key,
        payload: Bytes,
        properties: BasicProperties,
        used: &mut Option<Arc<Lane>>,
    ) -> Outcome {
        let permit = match Arc::clone(&self.window).acquire_owned().await {
            Ok(permit) => permit,
            Err(e) => {
                return Outcome::Unavailable(
                    crate::error::LAPIN.error("waiting for a window slot", e),
                );
            }
        };
        let lane = match self.lane().await {
            Ok(lane) => lane,
            Err(error) => return Outcome::Unavailable(error),
        };
        // Held until the publish is settled, so the lane's pump outlives it.
        *used = Some(Arc::clone(&lane));
        let (reply, outcome) = oneshot::channel();
        let publish = Publish {
            key,
            payload,
            properties,
            reply,
            permit,
        };
        if lane.requests.send(publish).is_err() {
            retire(&lane, "its pump stopped");
            return Outcome::Lost("the channel's pump stopped".into());
        }
        let outcome = outcome
            .await
            .unwrap_or_else(|_| Outcome::Lost("the channel's pump stopped".into()));
        if let Outcome::Lost(_) = outcome {
            retire(&lane, "its publish failed");
        }
        outcome
    }

    /// The current confirm channel, or a fresh one (and a fresh connection for a publisher that
    /// dials its own) when it is gone. The lock is held only to look or to open, never across a
    /// confirm.
    async fn lane(&self) -> Result<Arc<Lane>, TransportError> {
        let mut opened = self.shared.open.lock().await;
        if let Some(lane) = opened.lane.as_ref()
            && lane.usable()
        {
            return Ok(Arc::clone(lane));
        }
        opened.lane = None;
        let generation = self.shared.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let connection = match opened.connection.take() {
            Some(connection) if connection.status().connected() => connection,
            _ => {
                debug!("opening a connection for a publisher");
                self.shared.connector.open().await?
            }
        };
        let lane = Lane::open(&connection, generation).await;
        opened.connection = Some(connection);
        let lane = lane?;
        debug!(generation, "opened a confirm channel");
        opened.lane = Some(Arc::clone(&lane));
        Ok(lane)
    }

    /// Retires the channel and closes the connection if the publisher dialled it.
    pub async fn close(&self) {
        let mut opened = self.shared.open.lock().await;
        if let Some(lane) = opened.lane.take() {
            retire(&lane, "the publisher was closed");
        }
        if let Some(connection) = opened.connection.take() {
            connection.close("closing").await;
        }
    }
}
