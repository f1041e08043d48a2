//! A lane's window: its outstanding publishes in publish order, the keys in flight, and the
//! returns not yet charged, settled strictly in publish order.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::sync::{Arc, Mutex as StdMutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};

use bytes::Bytes;
use lapin::types::ShortString;
use lapin::{BasicProperties, Confirmation, PublisherConfirm};
use tokio::sync::{Notify, OwnedSemaphorePermit, oneshot};
use tracing::debug;

use super::outcome::Outcome;

/// What a `basic.return` names its message by. At most one publish per key is in flight on a
/// channel, so a return names exactly one publish.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Key {
    pub(super) exchange: ShortString,
    pub(super) routing_key: ShortString,
    pub(super) message_id: Option<ShortString>,
}

/// One publish handed to a channel's pump.
pub(super) struct Publish {
    pub(super) key: Key,
    pub(super) payload: Bytes,
    pub(super) properties: BasicProperties,
    pub(super) reply: oneshot::Sender<Outcome>,
    /// The window slot, released once the publish is settled.
    pub(super) permit: OwnedSemaphorePermit,
}

/// Which in-flight confirms were woken, in the order lapin resolved them.
#[derive(Default)]
pub(super) struct Wakes {
    pub(super) ready: StdMutex<Vec<u64>>,
    pub(super) notify: Notify,
}

pub(super) struct SlotWake {
    pub(super) seq: u64,
    pub(super) wakes: Arc<Wakes>,
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

pub(super) struct InFlight {
    pub(super) key: Key,
    pub(super) confirm: PublisherConfirm,
    pub(super) waker: Waker,
    pub(super) settled: Option<lapin::Result<Confirmation>>,
    pub(super) reply: oneshot::Sender<Outcome>,
    pub(super) _permit: OwnedSemaphorePermit,
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
pub(super) struct Window {
    pub(super) first: u64,
    pub(super) slots: VecDeque<InFlight>,
    /// Every key in flight (or about to be), with the publishes waiting for it, in order.
    pub(super) keys: HashMap<Key, VecDeque<Publish>>,
    /// Publishes let go, to publish next.
    pub(super) released: VecDeque<Publish>,
    pub(super) returned: HashMap<Key, (u16, String)>,
}

impl Window {
    /// Lets `publish` go if its key is not in flight, or queues it behind the one that is.
    pub(super) fn admit(&mut self, publish: Publish) {
        match self.keys.entry(publish.key.clone()) {
            Entry::Occupied(mut waiting) => waiting.get_mut().push_back(publish),
            Entry::Vacant(free) => {
                free.insert(VecDeque::new());
                self.released.push_back(publish);
            }
        }
    }

    /// The publish with `key` is settled (or was never made): lets the next one with it go.
    pub(super) fn free(&mut self, key: &Key) {
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
    pub(super) fn abandon(&mut self) {
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

    pub(super) fn push(
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

    pub(super) fn poll_ready(&mut self, wakes: &Wakes) {
        let ready =
            std::mem::take(&mut *wakes.ready.lock().unwrap_or_else(PoisonError::into_inner));
        for seq in ready {
            self.poll(seq);
        }
    }

    pub(super) fn poll(&mut self, seq: u64) {
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
    pub(super) fn settle(&mut self) {
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
