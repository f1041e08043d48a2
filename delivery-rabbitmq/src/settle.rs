//! The handle of one RabbitMQ delivery and its primitives: `basic.ack`, a return (a requeue, or
//! on a classic queue a confirmed copy carrying the count; the runtime waits out the backoff
//! first), and a confirmed copy to the dead-letter queue. `consumer::settle` decides when each
//! runs. In [`AckMode::Coalesced`](super::AckMode) an ack waits for the channel's next flush
//! (`acks.rs`), and a return, sent at once, is recorded there as settled.

use crate::codec::{self, text_value};
use delivery_core::dead_letter::DeadLetterStamp;
use delivery_core::disposition::DeadLetterReason;
use delivery_core::transport::{Settle, TransportError, TransportErrorKind};
use delivery_core::unit::Unit;
use lapin::Acker;
use lapin::BasicProperties;
use lapin::options::{BasicAckOptions, BasicRejectOptions};
use lapin::types::AMQPValue;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::acks::ChannelAcks;
use crate::shared::Shared;

/// The handle of one delivery from a [`RabbitSource`](super::RabbitSource). Only the runtime holds it.
///
/// Dropped unsettled, its delivery is rejected with `requeue = true` by the source's next
/// `receive`; if the source is gone too, its connection's close hands the delivery back.
pub struct RabbitHandle {
    pub(super) acker: Option<Acker>,
    pub(super) properties: BasicProperties,
    pub(super) shared: Arc<Shared>,
    /// The channel's coalesced acks and this delivery's tag there; `None` acks per unit.
    pub(super) coalesced: Option<(Arc<ChannelAcks>, u64)>,
}

impl std::fmt::Debug for RabbitHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RabbitHandle")
            .field("queue", &self.shared.queue)
            .finish_non_exhaustive()
    }
}

impl delivery_core::marker::AckHandle for RabbitHandle {}

/// `Ok(true)` is the only answer that says the frame was sent.
fn sent(what: &'static str, result: lapin::Result<bool>) -> Result<(), TransportError> {
    match result {
        Ok(true) => Ok(()),
        Ok(false) => Err(TransportError::msg(
            what,
            "not sent: the channel is closed or the delivery was already settled; the broker will deliver the unit again",
        )
        .with_kind(TransportErrorKind::ConnectionLost)),
        Err(error) => Err(crate::error::LAPIN.error(what, error)),
    }
}

/// Returns the delivery (`basic.reject`, requeue), then records it settled in its channel's
/// coalesced acks: only once the reject is sent may a multiple ack pass its tag.
pub(super) async fn requeue(
    acker: &Acker,
    coalesced: Option<&(Arc<ChannelAcks>, u64)>,
) -> Result<(), TransportError> {
    let requeued = sent(
        "returning the unit (basic.reject requeue)",
        acker.reject(BasicRejectOptions { requeue: true }).await,
    );
    if requeued.is_ok()
        && let Some((acks, tag)) = coalesced
    {
        acks.returned(*tag).await;
    }
    requeued
}

/// Acknowledges the delivery: at once, or in its channel's next coalesced flush.
async fn acknowledge(
    acker: Acker,
    coalesced: Option<&(Arc<ChannelAcks>, u64)>,
    what: &'static str,
) -> Result<(), TransportError> {
    match coalesced {
        Some((acks, tag)) => acks.ack(*tag, acker).await,
        None => sent(what, acker.ack(BasicAckOptions::default()).await),
    }
}

impl RabbitHandle {
    fn acker(&mut self) -> Acker {
        self.acker.take().expect("a handle is settled once")
    }
}

impl Settle for RabbitHandle {
    async fn ack(mut self, _unit: &Unit) -> Result<(), TransportError> {
        let acker = self.acker();
        acknowledge(acker, self.coalesced.as_ref(), "acknowledging (basic.ack)").await
    }

    /// RabbitMQ has no delayed requeue: the runtime waits out the backoff, holding the delivery
    /// (and its prefetch slot), then gives it back here at once.
    const DELAYS_REDELIVERY: bool = false;

    async fn give_back(mut self, unit: &Unit, _after: Duration) -> Result<(), TransportError> {
        let acker = self.acker();
        if self.shared.classic {
            // The count travels with the unit: a copy carrying it goes to the back of the
            // queue, confirmed, and only then is the original acknowledged.
            let properties = std::mem::take(&mut self.properties);
            let so_far = unit.delivery_count().get();
            return return_copy(&self, unit, so_far, properties, acker).await;
        }
        requeue(&acker, self.coalesced.as_ref()).await
    }

    /// A classic queue: a confirmed copy carrying the deliveries before this one, then the
    /// original acknowledged — this delivery not counted. A quorum queue counts the requeue.
    async fn release(mut self, unit: &Unit) -> Result<(), TransportError> {
        let acker = self.acker();
        if self.shared.classic {
            let properties = std::mem::take(&mut self.properties);
            let before = unit.delivery_count().get() - 1;
            return return_copy(&self, unit, before, properties, acker).await;
        }
        requeue(&acker, self.coalesced.as_ref()).await
    }

    async fn copy_to_dead_letter(
        &mut self,
        unit: &Unit,
        reason: &DeadLetterReason,
    ) -> Result<(), TransportError> {
        let stamp = DeadLetterStamp::new(reason, Some(&self.shared.queue), unit.delivery_count());
        let stamp = stamp.headers();
        let headers = codec::rewrite(
            self.properties.headers().as_ref(),
            stamp
                .iter()
                .map(|(name, value)| (*name, text_value(value)))
                .chain([(
                    delivery_core::headers::DEAD_LETTER_AT,
                    AMQPValue::LongLongInt(codec::now_millis()),
                )]),
        );
        let properties = self.properties.clone().with_headers(headers);
        self.shared
            .publisher
            .publish(&self.shared.dead_letter_queue, unit.payload(), properties)
            .await
    }
}

/// Returns a unit of a classic queue: publishes a copy carrying `deliveries_so_far` (the
/// deliveries that count) under a confirm, then acknowledges the original. If the copy is not
/// confirmed, the original is requeued instead: it arrives redelivered, and the source counts
/// that delivery then; nothing is lost.
async fn return_copy(
    handle: &RabbitHandle,
    unit: &Unit,
    deliveries_so_far: u32,
    properties: BasicProperties,
    acker: Acker,
) -> Result<(), TransportError> {
    let shared = &handle.shared;
    let headers = codec::rewrite(
        properties.headers().as_ref(),
        [(
            delivery_core::headers::DELIVERY_COUNT,
            AMQPValue::LongLongInt(i64::from(deliveries_so_far)),
        )],
    );
    let copied = shared
        .publisher
        .publish(
            &shared.queue,
            unit.payload(),
            properties.with_headers(headers),
        )
        .await;
    match copied {
        Ok(()) => {
            acknowledge(
                acker,
                handle.coalesced.as_ref(),
                "acknowledging a returned unit's original (basic.ack)",
            )
            .await
        }
        Err(error) => {
            let requeued = requeue(&acker, handle.coalesced.as_ref()).await;
            Err(TransportError::msg(
                "returning the unit as a copy",
                match requeued {
                    Ok(()) => format!("{error}; the original was requeued instead"),
                    Err(e) => format!(
                        "{error}; requeueing failed too ({e}); the broker will deliver it again"
                    ),
                },
            ))
        }
    }
}

impl Drop for RabbitHandle {
    fn drop(&mut self) {
        let Some(acker) = self.acker.take() else {
            return;
        };
        if acker.usable() {
            self.shared
                .dropped
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((acker, self.coalesced.take()));
            self.shared.any_dropped.store(true, Ordering::Release);
        }
    }
}
