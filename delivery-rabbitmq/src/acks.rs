//! Coalesced acknowledgements of one channel: `basic.ack(tag, multiple = true)` up to the highest
//! delivery tag below which every unit of the channel is settled.
//!
//! A multiple ack confirms every delivery up to its tag at once, like an offset commit, so it is
//! rule 1's acknowledgement for all of them: **it never passes a unit whose disposition is not
//! final** — still running, being given back, or being copied to the dead letter. The rule is
//! [`Watermark`]'s, the one Kafka's commits use, here over the channel's delivery tags: a unit is
//! tracked when received and finished once acknowledged (here, not yet sent) or once its return
//! (`basic.reject`) was sent, which settles it on the broker by itself.
//!
//! The ack sent is the highest *acknowledged* tag the watermark passed, never a returned one: the
//! broker no longer holds a returned delivery, and a multiple ack naming a tag it does not hold
//! is a protocol error that closes the channel. Acks wait in [`Book::acked`] until a flush sends
//! them:
//!
//! - on a timer, [`AckMode::Coalesced`]'s `flush_every` after the first ack not yet sent;
//! - at once when half the prefetch is waiting, so the broker's window of unacknowledged
//!   deliveries never fills with units already done. If those are held behind a unit still
//!   running (a slow handler), they are acknowledged one by one instead: the slow unit holds the
//!   watermark, not the consumer;
//! - one by one too once acks have waited [`AckMode::Coalesced`]'s `hold_for` behind a unit not
//!   settled, however few they are: a unit that kills the process after running that long (poison
//!   in a crash loop) takes no unit applied meanwhile down with it, to be delivered again and
//!   counted with it towards the delivery limit;
//! - at shutdown ([`RabbitSource::stop`](super::RabbitSource)), after which every ack is sent as
//!   it comes.
//!
//! Tags are those of one channel *incarnation*: a new channel (a reconnect) is a new tag space and
//! a new `ChannelAcks`, and so is lapin's auto-recovery (`ConnectionProperties::enable_auto_recover`)
//! of the same `Channel`: it consumes again there, its tags starting over at 1, and an ack of the
//! lost incarnation sent by number would settle units of the new one that nobody handled. So every
//! ack goes out through the lapin `Acker` of its own delivery — a multiple ack through the one of
//! its highest tag — which lapin poisons when the incarnation ends: an ack of a lost incarnation is
//! sent nowhere. The acks the old one had not sent are void with it, and the broker delivers those
//! units again, which their idempotent effect makes harmless (rule 3).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lapin::options::BasicAckOptions;
use lapin::{Acker, Channel};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};

use delivery_core::offset::Watermark;
use delivery_core::transport::{TransportError, TransportErrorKind};

/// The acknowledgements of one consuming channel in [`AckMode::Coalesced`].
pub(super) struct ChannelAcks {
    /// Kept open while units of it are in flight, so that their acks still count.
    channel: Channel,
    book: Mutex<Book>,
    /// Serializes flushes, so multiple acks go out in increasing order.
    flushing: tokio::sync::Mutex<()>,
    /// An ack waits to be sent: starts the flush timer.
    due: Notify,
    /// Half the prefetch waits: flush without waiting out the timer.
    urgent: Notify,
    /// After [`stop`](Self::stop): every ack is sent as it comes.
    eager: AtomicBool,
    flush_every: Duration,
    /// How long acks may wait behind a unit not settled before they are sent one by one.
    hold_for: Duration,
    /// How many acks may wait before a flush is urgent: half the prefetch.
    urgent_at: usize,
}

/// What the channel's units have settled, and which of their acks are not sent yet (each with
/// the handle `A` that sends it: its delivery's `Acker`).
struct Book<A = Acker> {
    /// Every delivery tag received, finished once its unit is settled.
    watermark: Watermark,
    /// Tags acknowledged by the runtime and not yet sent to the broker, each with its delivery's
    /// `Acker`, which sends nothing once the channel incarnation it came on is gone.
    acked: BTreeMap<u64, A>,
    /// Since when acks wait behind a unit not settled (as first seen by a flush).
    held_since: Option<Instant>,
    /// The flush timer was started for the acks waiting.
    timer_started: bool,
    /// An urgent flush was asked for.
    urgent_asked: bool,
}

impl<A> Default for Book<A> {
    fn default() -> Self {
        Book {
            watermark: Watermark::default(),
            acked: BTreeMap::new(),
            held_since: None,
            timer_started: false,
            urgent_asked: false,
        }
    }
}

/// The acks a flush sends, each through its delivery's `Acker`: one multiple ack, then single acks
/// of units held behind a unit that is not settled.
struct Flush<A = Acker> {
    up_to: Option<(u64, A)>,
    one_by_one: Vec<(u64, A)>,
}

impl ChannelAcks {
    /// The acks of `channel`, flushed by a task that ends when the returned guard is dropped
    /// (with the channel).
    pub(super) fn start(
        channel: Channel,
        (flush_every, hold_for): (Duration, Duration),
        prefetch: u16,
    ) -> (Arc<Self>, DropGuard) {
        let acks = Arc::new(ChannelAcks {
            channel,
            book: Mutex::default(),
            flushing: tokio::sync::Mutex::new(()),
            due: Notify::new(),
            urgent: Notify::new(),
            eager: AtomicBool::new(false),
            flush_every,
            hold_for,
            urgent_at: usize::from(prefetch / 2).max(1),
        });
        let stopped = CancellationToken::new();
        tokio::spawn(acks.clone().flush_on_timer(stopped.clone()));
        (acks, stopped.drop_guard())
    }

    /// A delivery with `tag` was received on this channel.
    pub(super) fn track(&self, tag: u64) -> Result<(), TransportError> {
        self.book()
            .watermark
            .track(tag)
            .map_err(|e| crate::error::LAPIN.error("tracking the delivery tag", e))
    }

    /// The unit with `tag` is acknowledged through `acker`, its delivery's: the ack waits for the
    /// next flush. Fails as a per-unit ack does when the channel incarnation it came on is gone —
    /// closed, or lost (and perhaps recovered by lapin since): the broker delivers the unit again.
    pub(super) async fn ack(&self, tag: u64, acker: Acker) -> Result<(), TransportError> {
        if acker.poisoned() || !self.channel.status().connected() {
            return Err(not_sent());
        }
        let urgent = {
            let mut book = self.book();
            if book.finish(tag) {
                book.acked.insert(tag, acker);
            }
            self.start_timer(&mut book);
            let urgent = book.acked.len() >= self.urgent_at && !book.urgent_asked;
            book.urgent_asked |= urgent;
            urgent
        };
        if self.eager.load(Ordering::Acquire) {
            return self.flush().await;
        }
        if urgent {
            self.urgent.notify_one();
        }
        Ok(())
    }

    /// The unit with `tag` was given back (its `basic.reject` sent): settled on the broker, it no
    /// longer holds the watermark, and the acks it held go out with the next flush — at once once
    /// the consumer is stopping (a return held for its backoff is given back last).
    pub(super) async fn returned(&self, tag: u64) {
        let waiting = {
            let mut book = self.book();
            book.finish(tag);
            if !book.acked.is_empty() {
                self.start_timer(&mut book);
            }
            !book.acked.is_empty()
        };
        if waiting && self.eager.load(Ordering::Acquire) {
            let _ = self.flush().await;
        }
    }

    /// Sends what waits now, and every later ack as it comes: the consumer is stopping.
    pub(super) async fn stop(&self) {
        self.eager.store(true, Ordering::Release);
        let _ = self.flush().await;
    }

    /// Sends the acks the watermark allows, and single acks of units held behind one that is not
    /// settled once half the prefetch waits or they have waited `hold_for`.
    pub(super) async fn flush(&self) -> Result<(), TransportError> {
        let _flushing = self.flushing.lock().await;
        let Flush { up_to, one_by_one } = {
            let mut book = self.book();
            book.timer_started = false;
            book.urgent_asked = false;
            book.take(self.urgent_at, Instant::now(), self.hold_for)
        };
        let mut sent = Ok(());
        if let Some((_, acker)) = up_to {
            sent = send(&acker, true).await;
        }
        for (_, acker) in one_by_one {
            if sent.is_err() {
                break;
            }
            sent = send(&acker, false).await;
        }
        if let Err(error) = &sent {
            tracing::debug!(%error, "acknowledgements not sent; the broker will deliver their units again");
        }
        sent
    }

    /// Flushes `flush_every` after an ack starts the timer, at once when it is urgent, and
    /// `hold_for` after acks were first seen held behind a unit not settled. Once `stopped` (the
    /// source moved to another channel, or is gone), what waits is sent, and any later ack of a
    /// unit of this channel is sent as it comes — if the channel is still open.
    async fn flush_on_timer(self: Arc<Self>, stopped: CancellationToken) {
        loop {
            let held_until = self.book().held_since.map(|since| since + self.hold_for);
            let held_over = async {
                match held_until {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            let timer = tokio::select! {
                () = stopped.cancelled() => break,
                () = self.due.notified() => true,
                () = held_over => false,
            };
            if timer {
                tokio::select! {
                    () = stopped.cancelled() => break,
                    () = tokio::time::sleep(self.flush_every) => {}
                    () = self.urgent.notified() => {}
                }
            }
            let _ = self.flush().await;
        }
        if self.channel.status().connected() {
            self.stop().await;
        } else {
            self.eager.store(true, Ordering::Release);
        }
    }

    fn start_timer(&self, book: &mut Book) {
        if !book.timer_started {
            book.timer_started = true;
            self.due.notify_one();
        }
    }

    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<A> Book<A> {
    /// Records the unit with `tag` settled; `false` for a tag not in flight, which is not sent.
    fn finish(&mut self, tag: u64) -> bool {
        match self.watermark.finish(tag) {
            Ok(()) => true,
            Err(error) => {
                // Each handle settles its unit once: this would be a bug, and sending nothing for
                // the tag is the safe side of it (the broker delivers the unit again).
                tracing::error!(%error, tag, "a delivery tag settled twice or never received");
                false
            }
        }
    }

    /// The acks to send `now`: up to the highest acknowledged tag the watermark passed, and, when
    /// `hold_at` or more acks are held behind a unit not settled or they have been held for
    /// `hold_for` (since a flush first saw them held), those one by one.
    fn take(&mut self, hold_at: usize, now: Instant, hold_for: Duration) -> Flush<A> {
        let mut flush = Flush {
            up_to: None,
            one_by_one: Vec::new(),
        };
        if let Some(next) = self.watermark.committable() {
            let held = self.acked.split_off(&next);
            flush.up_to = std::mem::replace(&mut self.acked, held).pop_last();
        }
        if self.acked.is_empty() {
            self.held_since = None;
            return flush;
        }
        let since = *self.held_since.get_or_insert(now);
        if self.acked.len() >= hold_at || now.duration_since(since) >= hold_for {
            flush.one_by_one = std::mem::take(&mut self.acked).into_iter().collect();
            self.held_since = None;
        }
        flush
    }
}

/// Sends the ack of `acker`'s delivery (and, `multiple`, of every one before it on the channel)
/// — unless the channel incarnation it came on is gone: then nothing is sent.
async fn send(acker: &Acker, multiple: bool) -> Result<(), TransportError> {
    match acker.ack(BasicAckOptions { multiple }).await {
        Ok(true) => Ok(()),
        Ok(false) => Err(not_sent()),
        Err(e) => Err(crate::error::LAPIN
            .error("acknowledging (basic.ack)", e)
            .with_kind(TransportErrorKind::ConnectionLost)),
    }
}

fn not_sent() -> TransportError {
    TransportError::msg(
        "acknowledging (basic.ack)",
        "not sent: the channel was closed or lost; the broker will deliver the unit again",
    )
    .with_kind(TransportErrorKind::ConnectionLost)
}

/// How a [`RabbitSource`](super::RabbitSource) acknowledges its units, set with
/// [`RabbitSource::ack_mode`](super::RabbitSource::ack_mode). Either way a unit is acknowledged
/// only once its handler succeeded (rule 1), and a failed one is given back at once, on its own.
///
/// **Coalesced** (the default): acks are sent as one `basic.ack(tag, multiple = true)` up to the
/// highest delivery tag below which every unit of the channel is settled — never past a unit still
/// running, being given back or being copied to the dead letter — a short while after the first
/// one waits (`flush_every`), at once when half the prefetch waits, and at shutdown. Units held
/// behind a slow one are acknowledged one by one once half the prefetch waits or once they have
/// waited `hold_for`, so a slow unit never stalls the consumer, and a unit that kills the process
/// (poison in a crash loop) never takes the units applied while it ran down with it. One frame
/// acknowledges many units: less work for the broker and the client on every unit.
///
/// Every ack goes out through its own delivery's lapin `Acker`, so an ack of a channel that was
/// lost is never sent, also when lapin recovered the channel since (`enable_auto_recover` on your
/// own connection): the broker delivers that unit again.
///
/// **The trade-off**: an ack not yet sent when the process dies (or its connection is lost) is
/// lost with it, and the broker delivers that unit again — units applied within the last
/// `flush_every`, or behind a unit still running within the last `hold_for`, at most half the
/// prefetch of them. Rule 3 makes that harmless (a second delivery of a unit already applied
/// changes nothing), and a graceful shutdown sends every ack first. On a quorum queue such a
/// redelivery counts towards the delivery limit, as it does for any unit in flight at a crash:
/// a unit that crashes the process within `hold_for` of others finishing behind it takes them
/// with it, so keep `hold_for` well below the time a poison unit runs before it crashes.
///
/// **Per unit**: each unit's `basic.ack` is sent before its settle returns — a redelivery after a
/// crash only for units whose ack had not been sent yet, at the cost of a frame per unit.
///
/// ```no_run
/// use std::time::Duration;
/// use delivery::rabbitmq::{AckMode, RabbitSource, RabbitTopology};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let url = "amqp://guest:guest@127.0.0.1:5672/%2f";
/// let coalesced = RabbitSource::connect(url, RabbitTopology::new("orders")).await?;
/// let sooner = RabbitSource::connect(url, RabbitTopology::new("invoices"))
///     .await?
///     .ack_mode(AckMode::Coalesced {
///         flush_every: Duration::from_millis(1),
///         hold_for: Duration::from_millis(20),
///     });
/// let per_unit = RabbitSource::connect(url, RabbitTopology::new("refunds"))
///     .await?
///     .ack_mode(AckMode::PerUnit);
/// # let _ = (coalesced, sooner, per_unit); Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AckMode {
    /// A multiple ack up to the settled watermark of delivery tags, sent `flush_every` after the
    /// first ack waiting (5 ms by default), sooner when half the prefetch waits; acks held behind
    /// a unit not settled go one by one after `hold_for` (100 ms by default).
    Coalesced {
        /// How long an ack may wait for others to join it.
        flush_every: Duration,
        /// How long acks may wait behind a unit not settled (still running, being given back or
        /// copied to the dead letter) before each is sent on its own (`basic.ack` without
        /// `multiple`). Past it, a unit that then kills the process takes none of them with it
        /// to be delivered again and counted towards the delivery limit; below it, it does.
        hold_for: Duration,
    },
    /// A `basic.ack` per unit, sent before its settle returns.
    PerUnit,
}

impl AckMode {
    /// [`AckMode::Coalesced`], flushed 5 ms after the first ack waiting, acks held behind a unit
    /// not settled sent one by one after 100 ms: the default.
    pub const fn coalesced() -> Self {
        AckMode::Coalesced {
            flush_every: Duration::from_millis(5),
            hold_for: Duration::from_millis(100),
        }
    }

    /// `flush_every` and `hold_for` of [`AckMode::Coalesced`].
    pub(super) fn coalesced_timing(self) -> Option<(Duration, Duration)> {
        match self {
            AckMode::Coalesced {
                flush_every,
                hold_for,
            } => Some((flush_every, hold_for)),
            AckMode::PerUnit => None,
        }
    }
}

impl Default for AckMode {
    fn default() -> Self {
        AckMode::coalesced()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Long enough never to pass in a test that does not mean it to.
    const LONG: Duration = Duration::from_secs(3600);

    fn book(tags: impl IntoIterator<Item = u64>) -> Book<()> {
        let mut book = Book::default();
        for tag in tags {
            book.watermark.track(tag).unwrap();
        }
        book
    }

    fn ack(book: &mut Book<()>, tag: u64) {
        assert!(book.finish(tag));
        book.acked.insert(tag, ());
    }

    /// The tags of what a flush sends now: the multiple ack's, and the single ones.
    fn take(book: &mut Book<()>, hold_at: usize) -> (Option<u64>, Vec<u64>) {
        take_at(book, hold_at, Instant::now(), LONG)
    }

    fn take_at(
        book: &mut Book<()>,
        hold_at: usize,
        now: Instant,
        hold_for: Duration,
    ) -> (Option<u64>, Vec<u64>) {
        let flush = book.take(hold_at, now, hold_for);
        (
            flush.up_to.map(|(tag, ())| tag),
            flush.one_by_one.into_iter().map(|(tag, ())| tag).collect(),
        )
    }

    #[test]
    fn never_acks_past_a_unit_still_running() {
        let mut book = book(1..=5);
        for tag in [2, 3, 4, 5] {
            ack(&mut book, tag);
        }
        assert_eq!(take(&mut book, 100), (None, vec![]), "tag 1 still runs");
        ack(&mut book, 1);
        assert_eq!(take(&mut book, 100).0, Some(5));
    }

    #[test]
    fn a_returned_unit_settles_but_is_never_the_tag_acked() {
        let mut book = book(1..=4);
        ack(&mut book, 1);
        ack(&mut book, 2);
        assert!(book.finish(4)); // returned: the broker no longer holds it
        assert_eq!(take(&mut book, 100).0, Some(2), "3 still runs");
        assert!(book.finish(3)); // returned too
        assert_eq!(
            take(&mut book, 100),
            (None, vec![]),
            "nothing acknowledged left to send"
        );
        assert!(book.acked.is_empty());
    }

    #[test]
    fn a_tag_never_received_or_settled_twice_is_never_sent() {
        let mut book = book([1]);
        assert!(!book.finish(7));
        ack(&mut book, 1);
        assert!(!book.finish(1));
        assert_eq!(take(&mut book, 100).0, Some(1));
        assert_eq!(take(&mut book, 100).0, None);
    }

    #[test]
    fn units_held_behind_a_slow_one_are_acked_one_by_one() {
        let mut book = book(1..=10);
        for tag in 2..=10 {
            ack(&mut book, tag);
        }
        assert_eq!(take(&mut book, 10), (None, vec![]));
        assert_eq!(
            take(&mut book, 9),
            (None, (2..=10).collect()),
            "tag 1 still holds the watermark"
        );
        // Once the slow unit is acked, only it is left to send.
        ack(&mut book, 1);
        assert_eq!(take(&mut book, 9).0, Some(1));
    }

    #[test]
    fn acks_held_for_hold_for_go_one_by_one_however_few() {
        let hold_for = Duration::from_millis(100);
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let mut book = book(1..=6);
        ack(&mut book, 2);
        ack(&mut book, 3);
        assert_eq!(take_at(&mut book, 100, at(0), hold_for), (None, vec![]));
        assert_eq!(book.held_since, Some(at(0)), "held since this flush");
        ack(&mut book, 4);
        assert_eq!(take_at(&mut book, 100, at(99), hold_for), (None, vec![]));
        assert_eq!(
            take_at(&mut book, 100, at(100), hold_for),
            (None, vec![2, 3, 4]),
            "held 100 ms behind tag 1: sent on their own"
        );
        assert_eq!(book.held_since, None);
        // Held again: counted from the flush that sees them held.
        ack(&mut book, 5);
        assert_eq!(take_at(&mut book, 100, at(150), hold_for), (None, vec![]));
        assert_eq!(book.held_since, Some(at(150)));
        // The slow unit settles: the multiple ack passes it, nothing is held any more.
        ack(&mut book, 1);
        assert_eq!(
            take_at(&mut book, 100, at(160), hold_for),
            (Some(5), vec![])
        );
        assert_eq!(book.held_since, None);
    }
}
