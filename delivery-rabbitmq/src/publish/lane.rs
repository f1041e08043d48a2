//! A confirm channel ([`Lane`]) and its pump, which publishes its requests and settles their
//! confirms in order.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::{Channel, Connection};
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TryRecvError;
use tracing::debug;

use delivery_core::transport::TransportError;

use super::outcome::Outcome;
use super::window::{Publish, Wakes, Window};

/// Publishes made per pass of the pump before it looks at confirms again.
const PUBLISH_BATCH: usize = 64;

pub(super) fn retire(lane: &Lane, why: &str) {
    if !lane.broken.swap(true, Ordering::AcqRel) {
        debug!(
            generation = lane.generation,
            why, "retiring a publisher's channel"
        );
    }
}

/// A confirm channel and the task that publishes on it and settles its confirms in order.
pub(super) struct Lane {
    pub(super) generation: u64,
    pub(super) channel: Channel,
    pub(super) requests: mpsc::UnboundedSender<Publish>,
    pub(super) broken: Arc<AtomicBool>,
}

impl Lane {
    pub(super) async fn open(
        connection: &Connection,
        generation: u64,
    ) -> Result<Arc<Lane>, TransportError> {
        let channel = connection
            .create_channel()
            .await
            .map_err(|e| crate::error::LAPIN.error("opening a publishing channel", e))?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(|e| crate::error::LAPIN.error("enabling publisher confirms", e))?;
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

    pub(super) fn usable(&self) -> bool {
        !self.broken.load(Ordering::Acquire) && self.channel.status().connected()
    }
}

/// Publishes a lane's requests one after another (so the window's order is the broker's
/// delivery-tag order), holding back one whose key is in flight until that one is settled, and
/// settles their confirms in that order. Ends once the lane is dropped; its channel then closes.
pub(super) async fn pump(
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
pub(super) async fn flush(
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
