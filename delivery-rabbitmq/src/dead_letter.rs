//! The operator's view of a queue's dead letter: [`DeadLetters`] over the dead-letter queue,
//! read as a snapshot held unacknowledged on one channel, and the depth gauge.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, LazyLock, Mutex as StdMutex};
use std::time::{Duration, UNIX_EPOCH};

use bytes::Bytes;
use futures_util::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicGetOptions, BasicNackOptions,
    BasicQosOptions, QueueDeclareOptions,
};
use lapin::protocol::{AMQPErrorKind, AMQPSoftError};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Acker, BasicProperties, Channel, ErrorKind};
use sha2::{Digest, Sha256};
use tokio::sync::OwnedMutexGuard;
use tokio::time::Instant;

use crate::codec::{self, as_text, as_u64, get};
use crate::connector::{Leased, RabbitConnector, close_channel};
use crate::publish::ConfirmedPublisher;
use crate::topology::RabbitTopology;
use delivery_core::dead_letter::{
    Cursor, DeadLetter, DeadLetters, Listing, RedriveReport, Selection,
};
use delivery_core::disposition::ReasonKind;
use delivery_core::headers;
use delivery_core::transport::TransportError;
use delivery_core::unit::{DeliveryCount, Unit, UnitId};

/// The dead letter of one queue, for an operator: it implements [`DeadLetters`].
///
/// A RabbitMQ queue (quorum or classic) has no read that leaves a message where it is, so every
/// operation reads a **snapshot**: on a channel of its own — on a connection of its own when made
/// from a URL, or on your connection ([`RabbitConnector`]), left open — it takes every unit the
/// dead-letter queue holds, with a consumer that acknowledges nothing, and holds them all until
/// the operation is done; those removed (redriven or purged) are acknowledged, and the others are
/// handed back at once with one `basic.nack(multiple, requeue)`. Nothing is lost if an operation
/// dies: the broker hands back whatever it had not acknowledged.
///
/// - **Order and cursors do not depend on the queue's order** (a quorum queue puts handed-back
///   units back in an order of its own): the records are sorted by a key read from the unit
///   itself — when it was dead-lettered ([`dead_lettered_at`](DeadLetter::dead_lettered_at);
///   units without a recorded time, dead-lettered by an earlier version, come first), then its
///   id, then a digest
///   of its body and headers, then its place among identical copies. A record's
///   [`position`](DeadLetter::position) is that key as text, and a [`Cursor`] points after it:
///   pages follow one another exactly across reads, and a unit removed between two pages does
///   not shift the next page. A cursor of another version (a place from the head) is refused.
/// - **One reader at a time**: every operation, [`count`](DeadLetters::count) included, first
///   takes the dead letter's lock — the exclusive consumer of the queue
///   `<dead-letter queue>.reader` (declared where missing, not durable, dropped by the broker an
///   hour after its last use; the broker refuses a second exclusive consumer, and ends it with
///   its connection if the reader dies), and a lock in the process — and releases it once the
///   units it handed back are ready again. So a count is exact, and a bulk action sees every
///   unit: none is held by another reader at that moment. An operation waits up to a minute for
///   another reader before it fails. Credentials without the permissions on that name read
///   without the broker's lock (with a warning).
/// - The unit is the message as published: its `message_id` (or the digest the source uses for a
///   unit without one), body, and own headers — without this crate's `x-dead-letter-*` and
///   `x-delivery-count`, and the broker's `x-acquired-count`, `x-death`, `x-first-death-*`,
///   `x-last-death-*`.
/// - Its [`reason`](DeadLetter::reason), [`detail`](DeadLetter::detail),
///   [`source`](DeadLetter::source) and delivery count are the `x-dead-letter-*` headers the
///   consumer recorded. A unit the broker dead-lettered itself (past the quorum queue's
///   `x-delivery-limit`) is read from its `x-death` header: `exhausted`, on the topology's last
///   delivery, from the queue named there; for the broker's other reasons (`rejected`, `expired`,
///   `maxlen`) the reason is `None` and the detail names the broker's reason.
/// - [`dead_lettered_at`](DeadLetter::dead_lettered_at) is the consumer's `x-dead-letter-at`
///   header (milliseconds since the epoch, written when it dead-letters a unit), else the latest
///   `x-death` entry's time when the broker dead-lettered the unit, else the message's
///   `timestamp` property if its publisher set one, else `None` (a unit dead-lettered by a
///   version before the header). The broker's and the publisher's are whole seconds.
/// - A redrive publishes each selected unit, in the listing's order, to its source queue under a
///   publisher confirm (same `message_id`, body and properties, without the headers above, so
///   the source counts its deliveries afresh) and acknowledges the dead-letter copy only once the
///   broker confirmed it; if the acknowledgement is lost, the unit is in both, never in neither.
///   An edited redrive does the same with the operator's body and the edit's headers, and sets
///   the `message_id` to the unit's id (a unit published without one keeps the id its first body
///   gave it). If a publish fails, the error names the unit and how many were redriven before it.
/// - A purge acknowledges the matching units: they are gone for good.
///
/// **Deliveries.** A quorum queue counts a handed-back unit: on RabbitMQ 3.x its
/// `x-delivery-count` header grows by one with every read (the record leaves it out, and the topology
/// declares the dead-letter queue without a delivery limit, so nothing comes of it). RabbitMQ 4.3
/// and later count only failed deliveries, and a `basic.nack` with requeue is not one. RabbitMQ
/// 4.0 to 4.2 give every quorum queue a delivery limit of 20 by default and count every hand-back
/// against it: there, set the dead-letter queue's limit off with a policy
/// (`rabbitmqctl set_policy dlq-unlimited '\.dlq$' '{"delivery-limit": -1}' --apply-to quorum_queues`),
/// or the 21st read drops its units.
///
/// **Cost.** Every operation holds the whole dead letter in memory for its duration, and every
/// page is a read of the whole dead letter (the broker delivers it at once: a list of 1 000
/// units took 0.12-0.40 s on a local RabbitMQ 3.10, quorum or classic, and ten pages of 100
/// 1.4-4.6 s, on a loaded two-core machine).
///
/// ```no_run
/// # async fn run() -> Result<(), delivery::TransportError> {
/// use delivery::dead_letter::{DeadLetters, Selection};
/// use delivery::rabbitmq::{RabbitDeadLetters, RabbitTopology};
/// use delivery::UnitId;
///
/// let url = "amqp://guest:guest@127.0.0.1:5672/%2f";
/// let dead = RabbitDeadLetters::new(url, &RabbitTopology::new("orders"));
/// for record in dead.list(10, None).await?.records {
///     println!("{record}");
/// }
/// let report = dead.redrive(Selection::Ids(&[UnitId::new("order-42")])).await?;
///
/// // The same through a connection of yours (reads open channels on it; it stays open):
/// let connection = delivery::rabbitmq::connect(url).await?; // or `lapin::Connection::connect`
/// let yours = RabbitDeadLetters::new(connection, &RabbitTopology::new("orders"));
/// println!("{} dead", yours.count().await?);
/// # let _ = report; Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RabbitDeadLetters {
    connector: RabbitConnector,
    queue: String,
    dead_letter_queue: String,
    /// The most deliveries the topology allows: the delivery on which the broker dead-letters a
    /// unit past its `x-delivery-limit`.
    max_deliveries: NonZeroU32,
}

/// How long an operation waits for the units it handed back to be ready again (the next
/// reader counts on them), and for the broker to end a read.
const HANDED_BACK: Duration = Duration::from_secs(60);

/// How long an operation waits for another reader to release the dead letter.
const LOCK_WAIT: Duration = Duration::from_secs(60);

/// How long a snapshot waits for the next unit before asking the queue whether any is left.
const IDLE: Duration = Duration::from_secs(2);

/// Acknowledgements a pass sends before it waits for the broker to apply them (see
/// [`Pass::barrier`]).
const ACKS_IN_FLIGHT: u32 = 8;

/// The consumer tag of a snapshot, and of the lock.
const READER: &str = "delivery-dead-letter-reader";

/// How long the lock queue outlives its last use (`x-expires`): one hour.
const LOCK_EXPIRES_MS: i64 = 3_600_000;

/// The readers of this process, one per dead-letter queue at a time: the broker's lock is held
/// by a connection, and operations on your connection share it.
static LOCAL: LazyLock<StdMutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>> =
    LazyLock::new(StdMutex::default);

impl RabbitDeadLetters {
    /// The dead letter of `topology.queue` through `connector`: a URL, your own lapin
    /// `Connection` or a factory ([`RabbitConnector`]).
    pub fn new(connector: impl Into<RabbitConnector>, topology: &RabbitTopology) -> Self {
        RabbitDeadLetters {
            connector: connector.into(),
            queue: topology.queue.clone(),
            dead_letter_queue: topology.dead_letter_queue_name(),
            max_deliveries: topology.max_deliveries(),
        }
    }

    /// Keeps the `delivery_dead_letter_depth` gauge current, reading the depth every `every`,
    /// until the returned task is aborted.
    pub fn watch_depth(&self, every: Duration) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        delivery_core::transport::watch_depth(self.dead_letter_queue.clone(), every, move || {
            let this = this.clone();
            async move { DeadLetters::count(&this).await }
        })
    }

    /// The queue whose exclusive consumer is the dead letter's one reader.
    fn lock_queue(&self) -> String {
        format!("{}.reader", self.dead_letter_queue)
    }

    /// Takes the dead letter's lock: this process's, then the broker's (see the type docs),
    /// waiting up to [`LOCK_WAIT`] for another reader.
    async fn hold(&self) -> Result<Reading, TransportError> {
        let local = Arc::clone(
            LOCAL
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(self.dead_letter_queue.clone())
                .or_default(),
        );
        let guard = local.lock_owned().await;
        let connection = self.connector.open().await?;
        let lock = self.lock_queue();
        let deadline = Instant::now() + LOCK_WAIT;
        loop {
            let control = match connection.create_channel().await {
                Ok(channel) => channel,
                Err(error) => {
                    connection.close("done").await;
                    return Err(crate::error::transport_error("opening a channel", error));
                }
            };
            // A refusal closes the channel that asked: each step that may be refused is tried
            // on a channel of its own.
            let taken = match self.lock_exists(&connection, &lock).await {
                Ok(()) => {
                    let options = BasicConsumeOptions {
                        exclusive: true,
                        no_ack: true,
                        ..BasicConsumeOptions::default()
                    };
                    control
                        .basic_consume(
                            lock.as_str().into(),
                            READER.into(),
                            options,
                            FieldTable::default(),
                        )
                        .await
                }
                Err(error) => Err(error),
            };
            let error = match taken {
                Ok(consumer) => {
                    return Ok(Reading {
                        _local: guard,
                        _lock: Some(consumer),
                        connection,
                        control,
                    });
                }
                Err(error) => error,
            };
            let held = soft(&error, AMQPSoftError::ACCESSREFUSED)
                && error.to_string().contains("exclusive use");
            // The lock queue expired between the two steps: declare it again.
            let gone = soft(&error, AMQPSoftError::NOTFOUND);
            if (held || gone) && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            if soft(&error, AMQPSoftError::ACCESSREFUSED) && !held {
                // Credentials without the permissions on the lock's name: read without the
                // broker's lock rather than not at all.
                tracing::warn!(
                    dead_letter = self.dead_letter_queue,
                    %error,
                    "the dead letter's lock queue `{lock}` may not be used with these \
                     credentials: reading without it, so a reader in another process may make \
                     a count or a listing miss the units it holds"
                );
                return match connection.create_channel().await {
                    Ok(control) => Ok(Reading {
                        _local: guard,
                        _lock: None,
                        connection,
                        control,
                    }),
                    Err(error) => {
                        connection.close("done").await;
                        Err(crate::error::transport_error("opening a channel", error))
                    }
                };
            }
            connection.close("done").await;
            return Err(if held {
                TransportError::msg(
                    "reading the dead letter",
                    format!(
                        "another reader has held `{}` for {}s (its lock is the exclusive \
                         consumer of `{lock}`): try again once it is done",
                        self.dead_letter_queue,
                        LOCK_WAIT.as_secs()
                    ),
                )
            } else {
                crate::error::transport_error("taking the dead letter's lock", error)
            });
        }
    }

    /// Makes sure the lock queue exists: looked up (a passive declare, which changes nothing on
    /// the broker), declared where it is missing — not durable, and dropped by the broker once
    /// no reader used it for [`LOCK_EXPIRES_MS`].
    async fn lock_exists(&self, connection: &Leased, lock: &str) -> Result<(), lapin::Error> {
        let declare = async |passive: bool| {
            let channel = connection.create_channel().await?;
            let mut arguments = FieldTable::default();
            if !passive {
                arguments.insert("x-expires".into(), AMQPValue::LongLongInt(LOCK_EXPIRES_MS));
            }
            let options = QueueDeclareOptions {
                passive,
                ..QueueDeclareOptions::default()
            };
            let declared = channel
                .queue_declare(lock.into(), options, arguments)
                .await
                .map(drop);
            close_channel(&channel, "done").await;
            declared
        };
        match declare(true).await {
            Err(error) if soft(&error, AMQPSoftError::NOTFOUND) => declare(false).await,
            looked_up => looked_up,
        }
    }

    /// The units ready in the dead-letter queue (a passive `queue.declare`).
    async fn ready(&self, channel: &Channel) -> Result<u64, TransportError> {
        let queue = channel
            .queue_declare(
                self.dead_letter_queue.as_str().into(),
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(|e| crate::error::transport_error("reading the dead letter's depth", e))?;
        Ok(u64::from(queue.message_count()))
    }

    /// Runs `work` over a snapshot of the dead letter, then hands back what it did not remove,
    /// whatever `work` returned.
    async fn with_pass<T>(
        &self,
        work: impl AsyncFnOnce(&mut Pass) -> Result<T, TransportError>,
    ) -> Result<T, TransportError> {
        let reading = self.hold().await?;
        let channel = match reading.connection.create_channel().await {
            Ok(channel) => channel,
            Err(error) => {
                reading.release().await;
                return Err(crate::error::transport_error("opening a channel", error));
            }
        };
        let mut pass = Pass {
            reading,
            channel,
            units: Vec::new(),
            last_tag: 0,
            unsettled: 0,
        };
        let result = match pass.take_all(self).await {
            Ok(()) => work(&mut pass).await,
            Err(error) => Err(error),
        };
        pass.end(self).await;
        result
    }

    /// The record of a unit a pass took (its body moves into the record).
    fn record(&self, taken: &mut Taken) -> DeadLetter {
        let properties = &taken.properties;
        let table = properties.headers().as_ref();
        let text = |name: &str| get(table, name).and_then(as_text);
        // The latest time the broker dead-lettered it, if it did.
        let death = latest_death(table);
        let by_broker_past_limit = death
            .as_ref()
            .is_some_and(|d| d.reason == "delivery_limit" && d.queue == self.queue);
        let count = get(table, headers::DEAD_LETTER_DELIVERY_COUNT)
            .and_then(as_u64)
            .map(|c| DeliveryCount::new(u32::try_from(c).unwrap_or(u32::MAX)))
            .or_else(|| by_broker_past_limit.then(|| DeliveryCount::new(self.max_deliveries.get())))
            .unwrap_or(DeliveryCount::FIRST);
        let mut unit = Unit::new(taken.key.id.clone(), std::mem::take(&mut taken.data))
            .with_headers(codec::own_headers(table))
            .with_delivery_count(count);
        if let Some(stamp) = codec::stamp(table) {
            unit = unit.with_stamp(stamp);
        }
        let source = text(headers::DEAD_LETTER_SOURCE)
            .or_else(|| death.as_ref().map(|d| d.queue.clone()))
            .unwrap_or_else(|| self.queue.clone());
        let mut record = DeadLetter::new(unit, source, taken.key.position());
        record.reason = text(headers::DEAD_LETTER_REASON)
            .and_then(|r| ReasonKind::parse(&r))
            .or_else(|| by_broker_past_limit.then_some(ReasonKind::Exhausted));
        record.detail = text(headers::DEAD_LETTER_DETAIL)
            .or_else(|| {
                death.as_ref().map(|d| {
                    format!(
                        "dead-lettered by the broker from `{}`: {}",
                        d.queue, d.reason
                    )
                })
            })
            .unwrap_or_default();
        record.dead_lettered_at = dead_lettered_at(properties, death.as_ref())
            .map(|millis| UNIX_EPOCH + Duration::from_millis(millis));
        record
    }
}

/// Whether the broker refused with `kind` (`ACCESS_REFUSED`: another reader holds the lock, or
/// the credentials may not use it; `NOT_FOUND`: the lock queue expired).
fn soft(error: &lapin::Error, kind: AMQPSoftError) -> bool {
    matches!(error.kind(), ErrorKind::ProtocolError(e) if *e.kind() == AMQPErrorKind::Soft(kind))
}

/// When the unit was dead-lettered, in milliseconds since the epoch, where that is recorded:
/// the consumer's `x-dead-letter-at`, else the broker's `x-death` time, else the message's
/// `timestamp` (both whole seconds).
fn dead_lettered_at(properties: &BasicProperties, death: Option<&Death>) -> Option<u64> {
    get(properties.headers().as_ref(), headers::DEAD_LETTER_AT)
        .and_then(as_u64)
        .or_else(|| {
            let seconds = death.and_then(|d| d.time).or(*properties.timestamp())?;
            Some(seconds.saturating_mul(1000))
        })
}

/// An operation's hold on the dead letter (see [`RabbitDeadLetters::hold`]).
struct Reading {
    _local: OwnedMutexGuard<()>,
    /// The exclusive consumer of the lock queue (dropped, lapin cancels it), unless the
    /// credentials may not use it.
    _lock: Option<lapin::Consumer>,
    connection: Leased,
    /// The channel whose exclusive consumer of the lock queue is the lock (closing it releases
    /// the lock); it also reads the depth.
    control: Channel,
}

impl Reading {
    /// Closes the lock's channel, which ends its consumer (your connection stays open; a
    /// connection of its own is closed).
    async fn release(self) {
        close_channel(&self.control, "done").await;
        self.connection.close("done").await;
    }
}

/// Where a record stands: the order of the listing and what a cursor points after.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    /// When it was dead-lettered, in milliseconds since the epoch; 0 where that is not recorded.
    at: u64,
    id: UnitId,
    /// Of its body and headers, without the broker's counts (16 hex digits).
    digest: String,
    /// Its place among identical copies (0 first).
    copy: u32,
}

impl Key {
    fn position(&self) -> String {
        format!("{}.{}.{}.{}", self.at, self.digest, self.copy, self.id)
    }

    fn parse(position: &str) -> Option<Key> {
        let mut parts = position.splitn(4, '.');
        let at = parts.next()?.parse().ok()?;
        let digest = parts.next()?;
        let copy = parts.next()?.parse().ok()?;
        let id = parts.next()?;
        (digest.len() == 16 && digest.bytes().all(|b| b.is_ascii_hexdigit())).then(|| Key {
            at,
            id: UnitId::new(id),
            digest: digest.to_owned(),
            copy,
        })
    }

    /// The key of a unit as delivered (its place among copies is set once all are taken).
    fn of(properties: &BasicProperties, data: &[u8]) -> Key {
        let table = properties.headers().as_ref();
        let mut digest = Sha256::new();
        digest.update((data.len() as u64).to_be_bytes());
        digest.update(data);
        for (name, value) in table.map(FieldTable::inner).into_iter().flatten() {
            // The counts a quorum queue raises on every hand-back are not the unit's.
            if matches!(name.as_str(), "x-delivery-count" | "x-acquired-count") {
                continue;
            }
            digest.update(name.as_str().as_bytes());
            digest.update([0]);
            digest.update(format!("{value:?}").as_bytes());
            digest.update([0]);
        }
        Key {
            at: dead_lettered_at(properties, latest_death(table).as_ref()).unwrap_or(0),
            id: codec::unit_id(properties, data),
            digest: hex::encode(&digest.finalize()[..8]),
            copy: 0,
        }
    }
}

/// A snapshot of the dead letter: every unit it held, taken and not acknowledged, in the
/// listing's order.
struct Pass {
    reading: Reading,
    /// The channel the units are held on.
    channel: Channel,
    units: Vec<Taken>,
    /// The highest delivery tag taken.
    last_tag: u64,
    /// Acknowledgements sent since the last [`barrier`](Pass::barrier).
    unsettled: u32,
}

/// A unit a pass took, until it is acknowledged or handed back.
struct Taken {
    key: Key,
    properties: BasicProperties,
    data: Vec<u8>,
    /// `None` once acknowledged.
    acker: Option<Acker>,
}

impl Pass {
    /// Takes every unit the dead-letter queue holds: a consumer without a prefetch limit, until
    /// as many as were ready arrived (or none is left), then cancelled; sorts them.
    async fn take_all(&mut self, dead: &RabbitDeadLetters) -> Result<(), TransportError> {
        let ready = dead.ready(&self.reading.control).await?;
        if ready == 0 {
            return Ok(());
        }
        let reading =
            |e| crate::error::transport_error("reading the dead letter (basic.consume)", e);
        self.channel
            .basic_qos(0, BasicQosOptions::default())
            .await
            .map_err(reading)?;
        let mut consumer = self
            .channel
            .basic_consume(
                dead.dead_letter_queue.as_str().into(),
                READER.into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(reading)?;
        while (self.units.len() as u64) < ready {
            match tokio::time::timeout(IDLE, consumer.next()).await {
                Ok(Some(delivery)) => self.take(delivery.map_err(reading)?),
                Ok(None) => break,
                // Fewer than were ready came, and none is left: the rest is on its way (below)
                // or with someone else.
                Err(_) if dead.ready(&self.reading.control).await? == 0 => break,
                Err(_) => {}
            }
        }
        self.channel
            .basic_cancel(READER.into(), BasicCancelOptions::default())
            .await
            .map_err(reading)?;
        // Every unit the broker sent before its `cancel-ok` comes before the stream's end (units
        // dead-lettered meanwhile are held too).
        let drained = tokio::time::timeout(HANDED_BACK, async {
            while let Some(delivery) = consumer.next().await {
                self.take(delivery.map_err(reading)?);
            }
            Ok(())
        })
        .await;
        drained.unwrap_or_else(|_| {
            Err(TransportError::msg(
                "reading the dead letter",
                format!(
                    "the broker did not end the read within {}s",
                    HANDED_BACK.as_secs()
                ),
            ))
        })?;
        self.units.sort_by(|a, b| a.key.cmp(&b.key));
        for i in 1..self.units.len() {
            let (before, this) = self.units.split_at_mut(i);
            let previous = &before[i - 1].key;
            let key = &mut this[0].key;
            if (previous.at, &previous.id, &previous.digest) == (key.at, &key.id, &key.digest) {
                key.copy = previous.copy + 1;
            }
        }
        Ok(())
    }

    fn take(&mut self, delivery: lapin::message::Delivery) {
        self.last_tag = self.last_tag.max(delivery.delivery_tag);
        self.units.push(Taken {
            key: Key::of(&delivery.properties, &delivery.data),
            properties: delivery.properties,
            data: delivery.data,
            acker: Some(delivery.acker),
        });
    }

    /// Acknowledges the unit at `index`: it leaves the dead letter for good.
    async fn remove(
        &mut self,
        dead: &RabbitDeadLetters,
        index: usize,
    ) -> Result<(), TransportError> {
        let Some(acker) = self.units[index].acker.take() else {
            return Ok(());
        };
        match acker.ack(BasicAckOptions::default()).await {
            Ok(true) => {
                self.unsettled += 1;
                if self.unsettled >= ACKS_IN_FLIGHT {
                    self.barrier(dead).await?;
                }
                Ok(())
            }
            Ok(false) => Err(TransportError::msg(
                "removing from the dead letter (basic.ack)",
                "the delivery was already settled",
            )),
            Err(error) => Err(crate::error::transport_error(
                "removing from the dead letter (basic.ack)",
                error,
            )),
        }
    }

    /// A `basic.get` on the pass's channel, which the broker answers only once it applied the
    /// acknowledgements sent before it on the channel. (A quorum queue's client in the broker
    /// holds settlements back once 32 commands are in flight, and drops them if the channel
    /// closes first: the units would come back.) A unit it hands over — one dead-lettered since
    /// the snapshot — is held like the others.
    async fn barrier(&mut self, dead: &RabbitDeadLetters) -> Result<(), TransportError> {
        let got = self
            .channel
            .basic_get(
                dead.dead_letter_queue.as_str().into(),
                BasicGetOptions { no_ack: false },
            )
            .await
            .map_err(|e| {
                crate::error::transport_error("removing from the dead letter (basic.get)", e)
            })?;
        if let Some(message) = got {
            self.take(message.delivery);
        }
        self.unsettled = 0;
        Ok(())
    }

    /// Ends the pass: makes sure its acknowledgements are applied, hands back the units held
    /// (`basic.nack`, multiple, requeue: on RabbitMQ 4.3 and later not a failed delivery), waits
    /// until the broker shows them ready again, closes the channel, and releases the lock.
    async fn end(mut self, dead: &RabbitDeadLetters) {
        if self.unsettled > 0
            && let Err(error) = self.barrier(dead).await
        {
            tracing::warn!(%error, "the last removals of a read may not be applied");
        }
        let held = self.units.iter().filter(|t| t.acker.is_some()).count() as u64;
        if held > 0 {
            let options = BasicNackOptions {
                multiple: true,
                requeue: true,
            };
            if let Err(error) = self.channel.basic_nack(self.last_tag, options).await {
                // Closing the channel hands them back.
                tracing::debug!(%error, "handing back by closing the channel instead");
                close_channel(&self.channel, "read").await;
            }
        }
        if held > 0 {
            let deadline = Instant::now() + HANDED_BACK;
            loop {
                match dead.ready(&self.reading.control).await {
                    Ok(ready) if ready >= held => break,
                    Ok(_) if Instant::now() < deadline => {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    _ => {
                        tracing::warn!(
                            dead_letter = dead.dead_letter_queue,
                            held,
                            "the units a read handed back are not all ready again yet: the next \
                             read may miss some"
                        );
                        break;
                    }
                }
            }
        }
        close_channel(&self.channel, "read").await;
        self.reading.release().await;
    }
}

impl DeadLetters for RabbitDeadLetters {
    /// The dead-letter queue's name.
    fn name(&self) -> &str {
        &self.dead_letter_queue
    }

    /// The units in the dead-letter queue (a passive `queue.declare`, under the dead letter's
    /// lock, so no other reader holds any at that moment).
    async fn count(&self) -> Result<u64, TransportError> {
        let reading = self.hold().await?;
        let ready = self.ready(&reading.control).await;
        reading.release().await;
        let depth = ready?;
        delivery_core::transport::record_depth(&self.dead_letter_queue, depth);
        Ok(depth)
    }

    /// A snapshot of every unit, keeping the page's.
    async fn list(&self, limit: usize, after: Option<&Cursor>) -> Result<Listing, TransportError> {
        let start = match after {
            None => None,
            Some(cursor) => Some(Key::parse(cursor.as_str()).ok_or_else(|| {
                TransportError::msg(
                    "listing the dead letter",
                    format!(
                        "`{}` is not a cursor of a RabbitMQ dead letter (a record's position)",
                        cursor.as_str()
                    ),
                )
            })?),
        };
        self.with_pass(async |pass| {
            let mut records = Vec::new();
            let mut more = false;
            let after = |t: &&mut Taken| start.as_ref().is_none_or(|s| t.key > *s);
            for taken in pass.units.iter_mut().filter(after) {
                if records.len() == limit {
                    more = true;
                    break;
                }
                records.push(self.record(taken));
            }
            Ok(Listing::page(records, more))
        })
        .await
    }

    /// A snapshot of every unit, keeping the first with `id`.
    async fn peek(&self, id: &UnitId) -> Result<Option<DeadLetter>, TransportError> {
        self.with_pass(async |pass| {
            Ok(pass
                .units
                .iter_mut()
                .find(|t| t.key.id == *id)
                .map(|taken| self.record(taken)))
        })
        .await
    }

    async fn redrive(&self, selection: Selection<'_>) -> Result<RedriveReport, TransportError> {
        let redriven = self.redrive_selected(selection, None).await?;
        Ok(RedriveReport::of(selection, redriven))
    }

    async fn purge(&self, ids: &[UnitId]) -> Result<u64, TransportError> {
        if ids.is_empty() {
            return Ok(0);
        }
        self.with_pass(async |pass| {
            let mut purged = 0;
            for index in 0..pass.units.len() {
                if ids.contains(&pass.units[index].key.id) {
                    pass.remove(self, index).await.map_err(|e| {
                        TransportError::msg(
                            "purging",
                            format!("{e} ({purged} units were purged before it)"),
                        )
                    })?;
                    purged += 1;
                }
            }
            Ok(purged)
        })
        .await
    }

    async fn redrive_edited(&self, id: &UnitId, payload: Bytes) -> Result<bool, TransportError> {
        let selection = Selection::Ids(std::slice::from_ref(id));
        let redriven = self.redrive_selected(selection, Some(&payload)).await?;
        Ok(!redriven.is_empty())
    }
}

impl RabbitDeadLetters {
    /// A snapshot in which each selected unit, in the listing's order, is published back to its
    /// source — edited to `edit`, if given, under its own `message_id` — and its dead-letter copy
    /// acknowledged once the broker confirmed it. Returns the ids redriven.
    async fn redrive_selected(
        &self,
        selection: Selection<'_>,
        edit: Option<&Bytes>,
    ) -> Result<Vec<UnitId>, TransportError> {
        let publisher = ConfirmedPublisher::new(self.connector.clone());
        let redriven = self
            .with_pass(async |pass| {
                let mut redriven = Vec::new();
                for index in 0..pass.units.len() {
                    let taken = &mut pass.units[index];
                    if !selection.contains(&taken.key.id) {
                        continue;
                    }
                    let id = taken.key.id.clone();
                    let record = self.record(taken);
                    let target = &record.source;
                    let table = taken.properties.headers().as_ref();
                    let (payload, headers, properties) = match edit {
                        None => (
                            record.unit.payload(),
                            codec::rewrite(table, []),
                            taken.properties.clone(),
                        ),
                        // An edited unit keeps its id even where it was a digest of its body.
                        Some(payload) => (
                            payload,
                            codec::rewrite_edited(table, record.unit.payload()),
                            taken.properties.clone().with_message_id(id.as_str().into()),
                        ),
                    };
                    let before = redriven.len();
                    publisher
                        .publish(target, payload, properties.with_headers(headers))
                        .await
                        .map_err(|e| {
                            TransportError::msg(
                                "redriving",
                                format!(
                                    "{id} was not moved to `{target}` and stays in the dead letter \
                                     ({before} units were redriven before it): {e}"
                                ),
                            )
                        })?;
                    pass.remove(self, index).await.map_err(|e| {
                        TransportError::msg(
                            "redriving",
                            format!(
                                "{id} was copied to `{target}` but its dead-letter copy was not \
                                 acknowledged ({e}); it is in both ({before} units were redriven \
                                 before it)"
                            ),
                        )
                    })?;
                    redriven.push(id);
                }
                Ok(redriven)
            })
            .await;
        publisher.close().await;
        redriven
    }
}

/// The latest entry of the broker's `x-death` header (the first), when the broker dead-lettered
/// the unit.
struct Death {
    queue: String,
    /// `delivery_limit`, `rejected`, `expired` or `maxlen`.
    reason: String,
    /// Seconds since the Unix epoch.
    time: Option<u64>,
}

fn latest_death(table: Option<&FieldTable>) -> Option<Death> {
    let Some(AMQPValue::FieldArray(entries)) = get(table, "x-death") else {
        return None;
    };
    entries.as_slice().iter().find_map(|entry| match entry {
        AMQPValue::FieldTable(t) => {
            let field = |name: &str| get(Some(t), name).and_then(as_text).unwrap_or_default();
            Some(Death {
                queue: field("queue"),
                reason: field("reason"),
                time: match get(Some(t), "time") {
                    Some(AMQPValue::Timestamp(seconds)) => Some(*seconds),
                    _ => None,
                },
            })
        }
        _ => None,
    })
}

impl From<RabbitDeadLetters> for delivery_core::dead_letter::AnyDeadLetters {
    fn from(dead_letters: RabbitDeadLetters) -> Self {
        delivery_core::dead_letter::AnyDeadLetters::new(dead_letters)
    }
}
