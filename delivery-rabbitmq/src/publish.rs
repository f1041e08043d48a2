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

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use bytes::Bytes;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::ShortString;
use lapin::{BasicProperties, Channel, Confirmation, Connection, PublisherConfirm};
use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::{Mutex, Notify, OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tracing::debug;

use crate::connector::{Leased, RabbitConnector};
use delivery_core::transport::{TransportError, TransportErrorKind};

/// How long a publish waits, in all, for the broker's confirm unless told otherwise.
pub const DEFAULT_CONFIRM_TIMEOUT: Duration = Duration::from_secs(30);

/// How many publishes may await their confirm at once unless told otherwise.
pub const DEFAULT_CONFIRM_WINDOW: usize = 1024;

/// Publishes made per pass of the pump before it looks at confirms again.
const PUBLISH_BATCH: usize = 64;

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

/// How the broker settled one publish.
#[derive(Debug)]
pub(crate) enum Outcome {
    Confirmed,
    Returned {
        code: u16,
        text: String,
    },
    Nacked,
    NotConfirmMode,
    /// The channel or connection was lost before the confirm.
    Lost(String),
    /// No confirm within the timeout.
    TimedOut(Duration),
    /// No channel could be opened to publish on.
    Unavailable(TransportError),
}

impl Outcome {
    /// The kind of failure a publish settled this way is: anything but a confirm leaves the
    /// sender holding its copy.
    pub(crate) fn kind(&self) -> TransportErrorKind {
        match self {
            Outcome::Lost(_) => TransportErrorKind::ConnectionLost,
            Outcome::NotConfirmMode => TransportErrorKind::Misconfigured,
            Outcome::Unavailable(error) => error.kind(),
            Outcome::Confirmed
            | Outcome::Returned { .. }
            | Outcome::Nacked
            | Outcome::TimedOut(_) => TransportErrorKind::NotConfirmed,
        }
    }
}

impl ConfirmedPublisher {
    /// A publisher through `connector`; connects on first use. From a URL (or a factory), it
    /// publishes on a connection of its own, redialled after a loss; from your
    /// [`Connection`], it opens its confirm channel on yours (see [`RabbitConnector`]).
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
                return Outcome::Unavailable(crate::error::transport_error(
                    "waiting for a window slot",
                    e,
                ));
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

fn retire(lane: &Lane, why: &str) {
    if !lane.broken.swap(true, Ordering::AcqRel) {
        debug!(
            generation = lane.generation,
            why, "retiring a publisher's channel"
        );
    }
}

/// What a `basic.return` names its message by. At most one publish per key is in flight on a
/// channel, so a return names exactly one publish.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    exchange: ShortString,
    routing_key: ShortString,
    message_id: Option<ShortString>,
}

/// One publish handed to a channel's pump.
struct Publish {
    key: Key,
    payload: Bytes,
    properties: BasicProperties,
    reply: oneshot::Sender<Outcome>,
    /// The window slot, released once the publish is settled.
    permit: OwnedSemaphorePermit,
}

/// A confirm channel and the task that publishes on it and settles its confirms in order.
struct Lane {
    generation: u64,
    channel: Channel,
    requests: mpsc::UnboundedSender<Publish>,
    broken: Arc<AtomicBool>,
}

impl Lane {
    async fn open(connection: &Connection, generation: u64) -> Result<Arc<Lane>, TransportError> {
        let channel = connection
            .create_channel()
            .await
            .map_err(|e| crate::error::transport_error("opening a publishing channel", e))?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(|e| crate::error::transport_error("enabling publisher confirms", e))?;
        let (requests, received) = mpsc::unbounded_channel();
        let broken = Arc::new(AtomicBool::new(false));
        tokio::spawn(pump(
            channel.clone(),
            received,
            Arc::clone(&broken),
            generation,
        ));
        Ok(Arc::new(Lane {
            generation,
            channel,
            requests,
            broken,
        }))
    }

    fn usable(&self) -> bool {
        !self.broken.load(Ordering::Acquire) && self.channel.status().connected()
    }
}

/// Publishes a lane's requests one after another (so the window's order is the broker's
/// delivery-tag order), holding back one whose key is in flight until that one is settled, and
/// settles their confirms in that order. Ends once the lane is dropped; its channel then closes.
async fn pump(
    channel: Channel,
    mut requests: mpsc::UnboundedReceiver<Publish>,
    broken: Arc<AtomicBool>,
    generation: u64,
) {
    let wakes = Arc::new(Wakes::default());
    let mut window = Window::default();
    let mut channel = Some(channel);
    loop {
        // The requests waiting are admitted first and then written together (see `flush`).
        let mut published = 0;
        while channel.is_some() && published < PUBLISH_BATCH {
            match requests.try_recv() {
                Ok(publish) => {
                    window.admit(publish);
                    published += 1;
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => channel = None,
            }
        }
        if let Some(open) = channel.as_ref() {
            flush(open, &mut window, &wakes, &broken).await;
        }
        window.poll_ready(&wakes);
        window.settle();
        let Some(open) = channel.as_ref() else {
            // Every `Lane` is gone, and a sender holds its lane until its publish is settled: no
            // one awaits what is left. Dropping the last handle closes the channel.
            window.abandon();
            break;
        };
        // The publishes whose key the settled ones freed; a confirm that was already there when
        // one of them was pushed woke nothing, so the next pass settles it.
        if flush(open, &mut window, &wakes, &broken).await {
            continue;
        }
        if published == PUBLISH_BATCH {
            tokio::task::yield_now().await;
            continue;
        }
        tokio::select! {
            request = requests.recv() => match request {
                Some(publish) => {
                    window.admit(publish);
                    flush(open, &mut window, &wakes, &broken).await;
                }
                None => channel = None,
            },
            () = wakes.notify.notified() => {}
        }
    }
    debug!(generation, "a publisher's channel pump stopped");
}

/// Publishes what the window let go: admitted with a free key, or freed by a settled publish.
/// Whether there was any.
///
/// All of them are handed to lapin before any write is awaited: a publish takes its delivery tag
/// and queues its frames on its first poll, so polling each once, in order, keeps the window's
/// order the broker's, and lapin's I/O loop writes the lot in one go rather than one publish per
/// wake-up. Their confirms then join the window in that same order.
async fn flush(
    channel: &Channel,
    window: &mut Window,
    wakes: &Arc<Wakes>,
    broken: &AtomicBool,
) -> bool {
    let any = !window.released.is_empty();
    let mut writing = VecDeque::with_capacity(window.released.len());
    while let Some(publish) = window.released.pop_front() {
        let Publish {
            key,
            payload,
            properties,
            reply,
            permit,
        } = publish;
        if reply.is_closed() {
            // The sender gave up (timed out) before its turn: nothing to publish for it.
            window.free(&key);
            continue;
        }
        let options = BasicPublishOptions {
            mandatory: true,
            immediate: false,
        };
        let (exchange, routing_key) = (key.exchange.clone(), key.routing_key.clone());
        let mut write = Box::pin(async move {
            channel
                .basic_publish(exchange, routing_key, options, &payload, properties)
                .await
        });
        // The first poll: the tag is taken and the frames are queued now, in this order.
        let first = std::future::poll_fn(|cx| Poll::Ready(write.as_mut().poll(cx))).await;
        writing.push_back((key, reply, permit, first, write));
    }
    for (key, reply, permit, first, write) in writing {
        let published = match first {
            Poll::Ready(published) => published,
            Poll::Pending => write.await,
        };
        match published {
            Ok(confirm) => window.push(key, confirm, reply, permit, wakes),
            Err(error) => {
                broken.store(true, Ordering::Release);
                let _ = reply.send(Outcome::Lost(error.to_string()));
                window.free(&key);
            }
        }
    }
    any
}

/// Which in-flight confirms were woken, in the order lapin resolved them.
#[derive(Default)]
struct Wakes {
    ready: StdMutex<Vec<u64>>,
    notify: Notify,
}

struct SlotWake {
    seq: u64,
    wakes: Arc<Wakes>,
}

impl Wake for SlotWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.wakes
            .ready
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(self.seq);
        self.wakes.notify.notify_one();
    }
}

struct InFlight {
    key: Key,
    confirm: PublisherConfirm,
    waker: Waker,
    settled: Option<lapin::Result<Confirmation>>,
    reply: oneshot::Sender<Outcome>,
    _permit: OwnedSemaphorePermit,
}

/// A lane's outstanding publishes in publish order, the keys in flight with the publishes waiting
/// for each, and the returned messages not yet charged to a publish, by key.
///
/// lapin hands a `basic.return` to whichever confirm it resolves next, which under pipelining
/// (and with `multiple` acks) may be a neighbour's. A return always reaches the client before the
/// ack of its own publish, and lapin attaches it to a confirm resolved no later than the last of
/// the confirms up to that publish; so by settling confirms strictly in publish order, after
/// polling every confirm lapin woke so far, each return has been seen before its own publish is
/// settled, and is charged by its key (exchange, routing key, `message_id`) instead of by where
/// lapin attached it. That is exact because a key is never in flight twice: [`admit`](Self::admit)
/// holds back a publish whose key is in flight until [`free`](Self::free) lets it go.
#[derive(Default)]
struct Window {
    first: u64,
    slots: VecDeque<InFlight>,
    /// Every key in flight (or about to be), with the publishes waiting for it, in order.
    keys: HashMap<Key, VecDeque<Publish>>,
    /// Publishes let go, to publish next.
    released: VecDeque<Publish>,
    returned: HashMap<Key, (u16, String)>,
}

impl Window {
    /// Lets `publish` go if its key is not in flight, or queues it behind the one that is.
    fn admit(&mut self, publish: Publish) {
        match self.keys.entry(publish.key.clone()) {
            Entry::Occupied(mut waiting) => waiting.get_mut().push_back(publish),
            Entry::Vacant(free) => {
                free.insert(VecDeque::new());
                self.released.push_back(publish);
            }
        }
    }

    /// The publish with `key` is settled (or was never made): lets the next one with it go.
    fn free(&mut self, key: &Key) {
        let Some(waiting) = self.keys.get_mut(key) else {
            return;
        };
        match waiting.pop_front() {
            Some(next) => self.released.push_back(next),
            None => {
                self.keys.remove(key);
            }
        }
    }

    /// Gives up on what is still outstanding (its senders are gone), releasing the window.
    fn abandon(&mut self) {
        let lost = || Outcome::Lost("the channel was retired".into());
        for slot in self.slots.drain(..) {
            let _ = slot.reply.send(lost());
        }
        for publish in self.released.drain(..) {
            let _ = publish.reply.send(lost());
        }
        for (_, waiting) in self.keys.drain() {
            for publish in waiting {
                let _ = publish.reply.send(lost());
            }
        }
        self.returned.clear();
    }

    fn push(
        &mut self,
        key: Key,
        confirm: PublisherConfirm,
        reply: oneshot::Sender<Outcome>,
        permit: OwnedSemaphorePermit,
        wakes: &Arc<Wakes>,
    ) {
        let seq = self.first + self.slots.len() as u64;
        let waker = Waker::from(Arc::new(SlotWake {
            seq,
            wakes: Arc::clone(wakes),
        }));
        self.slots.push_back(InFlight {
            key,
            confirm,
            waker,
            settled: None,
            reply,
            _permit: permit,
        });
        // The first poll registers the waker (or finds the confirm already there).
        self.poll(seq);
    }

    fn poll_ready(&mut self, wakes: &Wakes) {
        let ready =
            std::mem::take(&mut *wakes.ready.lock().unwrap_or_else(PoisonError::into_inner));
        for seq in ready {
            self.poll(seq);
        }
    }

    fn poll(&mut self, seq: u64) {
        let Some(index) = seq.checked_sub(self.first) else {
            return;
        };
        let Some(slot) = usize::try_from(index)
            .ok()
            .and_then(|index| self.slots.get_mut(index))
        else {
            return;
        };
        if slot.settled.is_some() {
            return;
        }
        let mut cx = Context::from_waker(&slot.waker);
        if let Poll::Ready(result) = Pin::new(&mut slot.confirm).poll(&mut cx) {
            if let Ok(Confirmation::Ack(Some(returned)) | Confirmation::Nack(Some(returned))) =
                &result
            {
                let owner = Key {
                    exchange: returned.delivery.exchange.clone(),
                    routing_key: returned.delivery.routing_key.clone(),
                    message_id: returned.delivery.properties.message_id().clone(),
                };
                let charge = (returned.reply_code, returned.reply_text.as_str().to_owned());
                if self.returned.insert(owner, charge).is_some() {
                    debug!("a second return for one key in flight");
                }
            }
            slot.settled = Some(result);
        }
    }

    /// Settles the settled prefix, in publish order, freeing each one's key.
    fn settle(&mut self) {
        while self
            .slots
            .front()
            .is_some_and(|slot| slot.settled.is_some())
        {
            let Some(slot) = self.slots.pop_front() else {
                break;
            };
            self.first += 1;
            let returned = self.returned.remove(&slot.key);
            self.free(&slot.key);
            let outcome = match (slot.settled, returned) {
                (Some(Ok(Confirmation::Ack(_))), None) => Outcome::Confirmed,
                (Some(Ok(Confirmation::Ack(_))), Some((code, text))) => {
                    Outcome::Returned { code, text }
                }
                (Some(Ok(Confirmation::Nack(_))), _) => Outcome::Nacked,
                (Some(Ok(Confirmation::NotRequested)), _) => Outcome::NotConfirmMode,
                (Some(Err(error)), _) => Outcome::Lost(error.to_string()),
                (None, _) => Outcome::Lost("unsettled".into()),
            };
            let _ = slot.reply.send(outcome);
        }
        if self.slots.is_empty() && !self.returned.is_empty() {
            // Every publish is settled, so these returns name no publish of this window.
            debug!(keys = ?self.returned.keys().collect::<Vec<_>>(), "returns for no outstanding publish");
            self.returned.clear();
        }
    }
}
