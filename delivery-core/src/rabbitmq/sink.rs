//! RabbitMQ sink: persistent, mandatory publishes under publisher confirms, pipelined.
//!
//! [`RabbitSink::send`] publishes a record to the exchange named by its topic, with its key as the
//! routing key, persistent (`delivery_mode` 2), `mandatory`, with the record id as `message_id`,
//! on a channel in confirm mode; it returns a [`Receipt`] only for a `basic.ack` of a publish the
//! broker did not return (rule 6). Everything else fails as a *retry*: a `basic.nack`, a
//! `basic.return` (unroutable: no queue bound, the queue deleted), the channel or connection lost
//! before the confirm, and no confirm within the timeout.
//!
//! - **Pipelined.** Many `send` calls on one sink (or its clones) share one channel; each awaits its
//!   own confirm, and up to [`window`](RabbitSink::window) publishes are outstanding at once. The
//!   only section held across an await is the write of the frames to the socket, never a broker
//!   round trip.
//! - **Returns are matched by `message_id`.** AMQP does not say which publish a `basic.return`
//!   belongs to, and under pipelining lapin may attach it to a neighbour's confirm. The sink
//!   therefore decides confirms in publish order and charges every returned message to the record
//!   its `message_id` names, so a returned record never gets a receipt because a neighbour carried
//!   its return.
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
use lapin::{
    BasicProperties, Channel, Confirmation, Connection, ConnectionProperties, PublisherConfirm,
};
use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::{Mutex, Notify, OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tracing::debug;

use crate::error::HandlerError;
use crate::outbox::{Receipt, Record, RecordId};
use crate::transport::TransportError;

/// How long [`RabbitSink::send`] waits for the broker's confirm unless told otherwise.
pub const DEFAULT_CONFIRM_TIMEOUT: Duration = Duration::from_secs(30);

/// How many publishes may await their confirm at once unless told otherwise.
pub const DEFAULT_CONFIRM_WINDOW: usize = 1024;

/// Publishes awaited per pass of the pump before it looks at confirms again.
const PUBLISH_BATCH: usize = 64;

/// Sends outbox records to RabbitMQ and returns a [`Receipt`] only once the broker confirmed
/// (publisher confirms), pipelined on one channel. Cloning is cheap; clones share the channel and
/// the window.
///
/// Each record goes to the exchange named by its topic, with its key (or `""`) as the routing key,
/// persistent, `mandatory`, with the record id as `message_id` — the same on every attempt, so
/// the receiver deduplicates. Returned messages are charged by `message_id` to the record they
/// name, never to the neighbour whose confirm lapin attached them to.
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
/// use delivery::outbox::sink::RabbitSink;
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
    shared: Arc<Shared>,
    window: Arc<Semaphore>,
    timeout: Duration,
    content_type: Option<ShortString>,
}

impl fmt::Debug for RabbitSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RabbitSink")
            .field("timeout", &self.timeout)
            .field("content_type", &self.content_type)
            .finish_non_exhaustive()
    }
}

struct Shared {
    origin: Origin,
    open: Mutex<Opened>,
    generation: AtomicU64,
}

enum Origin {
    /// The sink dials the broker itself and redials after a loss.
    Url(Arc<str>, ConnectionProperties),
    /// The caller's connection; the sink opens channels on it.
    Connection(Arc<Connection>),
}

#[derive(Default)]
struct Opened {
    connection: Option<Connection>,
    lane: Option<Arc<Lane>>,
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
        let sink = RabbitSink::with_origin(Origin::Url(url.into(), properties));
        sink.lane().await?;
        Ok(sink)
    }

    /// A sink publishing on `connection` (pass the `Connection`, or an `Arc` of it to keep using
    /// it elsewhere); its confirm channel is opened now and reopened on the next
    /// [`send`](Self::send) after the broker closed it. The connection itself is the caller's: if
    /// it is lost, sends fail until it recovers (enable lapin's
    /// `ConnectionProperties::enable_auto_recover`, or use [`connect`](Self::connect)).
    pub async fn new(connection: impl Into<Arc<Connection>>) -> Result<Self, TransportError> {
        let sink = RabbitSink::with_origin(Origin::Connection(connection.into()));
        sink.lane().await?;
        Ok(sink)
    }

    fn with_origin(origin: Origin) -> Self {
        RabbitSink {
            shared: Arc::new(Shared {
                origin,
                open: Mutex::new(Opened::default()),
                generation: AtomicU64::new(0),
            }),
            window: Arc::new(Semaphore::new(DEFAULT_CONFIRM_WINDOW)),
            timeout: DEFAULT_CONFIRM_TIMEOUT,
            content_type: Some(ShortString::from("application/json")),
        }
    }

    /// How long a send waits, in all, for a window slot, the channel and the broker's confirm
    /// (default [`DEFAULT_CONFIRM_TIMEOUT`]). A send that times out fails as a retry, and the
    /// channel is replaced on the next send.
    pub fn confirm_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How many publishes may await their confirm at once (default [`DEFAULT_CONFIRM_WINDOW`], at least
    /// 1); a send beyond it waits for a slot. Applies to this sink and the clones made from it
    /// afterwards.
    pub fn window(mut self, publishes: usize) -> Self {
        self.window = Arc::new(Semaphore::new(publishes.clamp(1, Semaphore::MAX_PERMITS)));
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
        let publish = self.prepare(record)?;
        let mut used = None;
        let sent =
            tokio::time::timeout(self.timeout, self.submit(record, publish, &mut used)).await;
        match sent {
            Ok(result) => result,
            Err(_) => {
                if let Some(lane) = used {
                    retire(&lane, "a confirm timed out");
                }
                debug!(record = %record.id(), timeout = ?self.timeout, "no publisher confirm in time");
                Err(HandlerError::retry(TransportError::msg(
                    "waiting for the publisher confirm",
                    format!(
                        "no confirm for record {} within {:?}",
                        record.id(),
                        self.timeout
                    ),
                )))
            }
        }
    }

    fn prepare(&self, record: &Record) -> Result<Prepared, HandlerError> {
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
        Ok(Prepared {
            exchange,
            routing_key,
            properties,
        })
    }

    async fn submit(
        &self,
        record: &Record,
        prepared: Prepared,
        used: &mut Option<Arc<Lane>>,
    ) -> Result<Receipt, HandlerError> {
        let permit = Arc::clone(&self.window)
            .acquire_owned()
            .await
            .map_err(|e| {
                HandlerError::retry(TransportError::new("waiting for a window slot", e))
            })?;
        let lane = self.lane().await.map_err(HandlerError::retry)?;
        *used = Some(Arc::clone(&lane));
        let (reply, outcome) = oneshot::channel();
        let publish = Publish {
            id: record.id().clone(),
            exchange: prepared.exchange,
            routing_key: prepared.routing_key,
            payload: record.payload().clone(),
            properties: prepared.properties,
            reply,
            permit,
        };
        if lane.requests.send(publish).is_err() {
            retire(&lane, "its publisher stopped");
            return Err(lost(record, "the channel's publisher stopped"));
        }
        drop(lane);
        let outcome = outcome
            .await
            .unwrap_or_else(|_| Outcome::Lost("the channel's publisher stopped".into()));
        debug!(record = %record.id(), topic = record.topic(), ?outcome, "publish settled");
        match outcome {
            Outcome::Confirmed => Ok(Receipt::confirmed(record.id().clone())),
            Outcome::Returned { code, text } => Err(HandlerError::retry(TransportError::msg(
                "publishing",
                format!(
                    "the broker returned record {} as unroutable ({code} {text}): is a queue bound to exchange `{}` for routing key `{}`?",
                    record.id(),
                    record.topic(),
                    record.key().unwrap_or("")
                ),
            ))),
            Outcome::Nacked => Err(HandlerError::retry(TransportError::msg(
                "publishing",
                format!("the broker refused record {} (basic.nack)", record.id()),
            ))),
            Outcome::NotConfirmMode => Err(HandlerError::retry(TransportError::msg(
                "publishing",
                "the channel is not in confirm mode",
            ))),
            Outcome::Lost(reason) => {
                if let Some(lane) = used.as_ref() {
                    retire(lane, "its publish failed");
                }
                Err(lost(record, &reason))
            }
        }
    }

    /// The current confirm channel, or a fresh one (and a fresh connection for a sink that dials
    /// its own) when it is gone. The lock is held only to look or to open, never across a confirm.
    async fn lane(&self) -> Result<Arc<Lane>, TransportError> {
        let mut opened = self.shared.open.lock().await;
        if let Some(lane) = opened.lane.as_ref()
            && lane.usable()
        {
            return Ok(Arc::clone(lane));
        }
        opened.lane = None;
        let generation = self.shared.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let lane = match &self.shared.origin {
            Origin::Connection(connection) => Lane::open(connection, generation).await?,
            Origin::Url(url, properties) => {
                let connection = match opened.connection.take() {
                    Some(connection) if connection.status().connected() => connection,
                    _ => {
                        debug!("dialling RabbitMQ for the sink");
                        Connection::connect(url, properties.clone())
                            .await
                            .map_err(|e| TransportError::new("connecting to RabbitMQ", e))?
                    }
                };
                let lane = Lane::open(&connection, generation).await;
                opened.connection = Some(connection);
                lane?
            }
        };
        debug!(generation, "opened a confirm channel for the sink");
        opened.lane = Some(Arc::clone(&lane));
        Ok(lane)
    }
}

fn lost(record: &Record, reason: &str) -> HandlerError {
    HandlerError::retry(TransportError::msg(
        "publishing",
        format!(
            "the channel was lost before the broker confirmed record {}: {reason}",
            record.id()
        ),
    ))
}

fn retire(lane: &Lane, why: &str) {
    if !lane.broken.swap(true, Ordering::AcqRel) {
        debug!(
            generation = lane.generation,
            why, "retiring the sink's channel"
        );
    }
}

struct Prepared {
    exchange: ShortString,
    routing_key: ShortString,
    properties: BasicProperties,
}

/// One publish handed to a channel's pump.
struct Publish {
    id: RecordId,
    exchange: ShortString,
    routing_key: ShortString,
    payload: Bytes,
    properties: BasicProperties,
    reply: oneshot::Sender<Outcome>,
    /// The window slot, released once the publish is settled.
    permit: OwnedSemaphorePermit,
}

/// How the broker settled one publish.
#[derive(Debug)]
enum Outcome {
    Confirmed,
    Returned { code: u16, text: String },
    Nacked,
    NotConfirmMode,
    Lost(String),
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
            .map_err(|e| TransportError::new("opening the sink's channel", e))?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(|e| TransportError::new("enabling publisher confirms", e))?;
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
/// delivery-tag order) and settles their confirms in that order. Ends once the lane is dropped;
/// its channel then closes.
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
        let mut published = 0;
        while channel.is_some() && published < PUBLISH_BATCH {
            match requests.try_recv() {
                Ok(publish) => {
                    if let Some(channel) = channel.as_ref() {
                        publish_one(channel, publish, &mut window, &wakes, &broken).await;
                    }
                    published += 1;
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => channel = None,
            }
        }
        window.poll_ready(&wakes);
        window.settle();
        let Some(open) = channel.as_ref() else {
            // Every `Lane` is gone, and a sender holds its lane until its publish is settled: no
            // one awaits what is left. Dropping the last handle closes the channel.
            window.abandon();
            break;
        };
        if published == PUBLISH_BATCH {
            tokio::task::yield_now().await;
            continue;
        }
        tokio::select! {
            request = requests.recv() => match request {
                Some(publish) => publish_one(open, publish, &mut window, &wakes, &broken).await,
                None => channel = None,
            },
            () = wakes.notify.notified() => {}
        }
    }
    debug!(generation, "the sink's channel publisher stopped");
}

async fn publish_one(
    channel: &Channel,
    publish: Publish,
    window: &mut Window,
    wakes: &Arc<Wakes>,
    broken: &AtomicBool,
) {
    let Publish {
        id,
        exchange,
        routing_key,
        payload,
        properties,
        reply,
        permit,
    } = publish;
    if reply.is_closed() {
        // The sender gave up (timed out) before its turn: nothing to publish for it.
        return;
    }
    let options = BasicPublishOptions {
        mandatory: true,
        immediate: false,
    };
    match channel
        .basic_publish(exchange, routing_key, options, &payload, properties)
        .await
    {
        Ok(confirm) => window.push(id, confirm, reply, permit, wakes),
        Err(error) => {
            broken.store(true, Ordering::Release);
            let _ = reply.send(Outcome::Lost(error.to_string()));
        }
    }
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
    id: RecordId,
    confirm: PublisherConfirm,
    waker: Waker,
    settled: Option<lapin::Result<Confirmation>>,
    reply: oneshot::Sender<Outcome>,
    _permit: OwnedSemaphorePermit,
}

/// A lane's outstanding publishes in publish order, and the returned messages not yet charged to
/// a publish, by `message_id`.
///
/// lapin hands a `basic.return` to whichever confirm it resolves next, which under pipelining
/// (and with `multiple` acks) may be a neighbour's. A return always reaches the client before the
/// ack of its own publish, and lapin attaches it to a confirm resolved no later than the last of
/// the confirms up to that publish; so by settling confirms strictly in publish order, after
/// polling every confirm lapin woke so far, each return has been seen before its own publish is
/// settled, and is charged by `message_id` instead of by where lapin attached it.
#[derive(Default)]
struct Window {
    first: u64,
    slots: VecDeque<InFlight>,
    returned: HashMap<String, (u32, u16, String)>,
}

impl Window {
    /// Gives up on what is still outstanding (its senders are gone), releasing the window.
    fn abandon(&mut self) {
        for slot in self.slots.drain(..) {
            let _ = slot
                .reply
                .send(Outcome::Lost("the sink's channel was retired".into()));
        }
        self.returned.clear();
    }

    fn push(
        &mut self,
        id: RecordId,
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
            id,
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
                let owner = returned
                    .delivery
                    .properties
                    .message_id()
                    .as_ref()
                    .map(|id| id.as_str().to_owned())
                    .unwrap_or_default();
                let entry = self.returned.entry(owner).or_insert((0, 0, String::new()));
                entry.0 += 1;
                entry.1 = returned.reply_code;
                entry.2 = returned.reply_text.as_str().to_owned();
            }
            slot.settled = Some(result);
        }
    }

    fn take_return(&mut self, id: &RecordId) -> Option<(u16, String)> {
        let entry = self.returned.get_mut(id.as_str())?;
        entry.0 -= 1;
        let found = (entry.1, entry.2.clone());
        if entry.0 == 0 {
            self.returned.remove(id.as_str());
        }
        Some(found)
    }

    /// Settles the settled prefix, in publish order.
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
            let returned = self.take_return(&slot.id);
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
            debug!(ids = ?self.returned.keys().collect::<Vec<_>>(), "returns for no outstanding publish");
            self.returned.clear();
        }
    }
}
