//! A pull consumer of one stream, and the sweep of units stranded on their last delivery. (Units
//! waiting in the pull's buffer are kept in progress by the pull, see [`super::pull`]; long
//! handlers by the runtime, through [`Source::keep_alive`].)

use std::num::NonZeroU32;
use std::sync::{Arc, Weak};
use std::time::Duration;

use async_nats::jetstream;
use async_nats::jetstream::consumer::{AckPolicy, PullConsumer};
use async_nats::{Client, Subject};

use super::codec;
use super::connect;
use super::dead_letter::NatsDeadLetters;
use super::pull::{self, Pull};
use super::settle::NatsHandle;
use super::shared::Shared;
use super::topology::NatsTopology;
use delivery_core::transport::{KeepAlive, Source, TransportError, TransportErrorKind};
use delivery_core::unit::{DeliveryCount, Unit};

/// A consumer of one JetStream stream through its durable pull consumer (see the
/// [module docs](super)).
///
/// Units are pulled at most `batch` at a time and kept buffered in the source, in progress
/// (`+WPI`), until the runtime takes them, so [`receive`](Source::receive) is cancel safe and a
/// unit waiting behind slow handlers is not delivered again meanwhile (see the [module docs](super)). A
/// pull that fails is reported once and tried again after a backoff; the client reconnects by
/// itself, a pull request sent before a reconnect is sent again, and JetStream delivers again
/// whatever was not acknowledged.
pub struct NatsSource {
    topology: NatsTopology,
    /// The durable consumer's own settings, as the server holds them (not as the topology says).
    bound: NonZeroU32,
    ack_wait: Duration,
    consumer: PullConsumer,
    /// Started by the first `receive`.
    pull: Option<Pull>,
    shared: Arc<Shared>,
}

/// Sweeps the units stranded on their last delivery into the dead letter, at once and then every
/// `every`, until the source and all its handles are gone.
async fn sweep_stranded(shared: Weak<Shared>, dead_letters: NatsDeadLetters, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if shared.strong_count() == 0 {
            return;
        }
        match dead_letters.sweep().await {
            Ok(report) if !report.is_empty() => {
                tracing::info!(stream = %dead_letters.source(), moved = report.moved.len(),
                    already = report.already.len(), missing = report.missing.len(),
                    malformed = report.malformed, "swept units stranded on their last delivery");
            }
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(stream = %dead_letters.source(), %error,
                    "could not sweep units stranded on their last delivery; trying again later");
            }
        }
    }
}

/// The durable consumer's settings the rules rest on, read from the server rather than trusted:
/// explicit acknowledgement (with `all`, an acknowledgement covers earlier units still being
/// handled; with `none`, every unit counts as acknowledged on receipt — either loses units), and
/// its own `max_deliver` and `ack_wait`.
fn checked(
    consumer: &PullConsumer,
    topology: &NatsTopology,
) -> Result<(NonZeroU32, Duration), TransportError> {
    let config = &consumer.cached_info().config;
    if config.ack_policy != AckPolicy::Explicit {
        return Err(TransportError::msg(
            "checking the durable consumer",
            format!(
                "`{}` on stream `{}` has ack policy `{:?}`, and delivery needs `explicit`: with \
                 `all` an acknowledgement covers earlier units still being handled, with `none` \
                 every unit counts as acknowledged on receipt. Recreate it with \
                 `AckPolicy::Explicit` (`delivery::nats::declare` does)",
                topology.durable, topology.stream, config.ack_policy
            ),
        )
        .with_kind(TransportErrorKind::Misconfigured));
    }
    let bound = u32::try_from(config.max_deliver)
        .ok()
        .and_then(NonZeroU32::new)
        .unwrap_or_else(|| topology.max_deliveries());
    if bound != topology.max_deliveries() {
        tracing::warn!(stream = %topology.stream, durable = %topology.durable,
            server = bound.get(), topology = topology.max_deliver,
            "the durable consumer's max_deliver differs from the topology's; the server's is the bound");
    }
    Ok((bound, config.ack_wait))
}

impl NatsSource {
    /// A source of `topology`'s durable consumer at `url`, connected before it returns, so a wrong
    /// URL or a missing consumer fails at start. Declare the topology first ([`super::declare`]).
    pub async fn connect(url: &str, topology: NatsTopology) -> Result<Self, TransportError> {
        let client = connect::connect(url).await?;
        Self::with_client(client, topology).await
    }

    /// A source over an existing client connection.
    pub async fn with_client(
        client: Client,
        topology: NatsTopology,
    ) -> Result<Self, TransportError> {
        let context = jetstream::new(client.clone());
        let consumer: PullConsumer = context
            .get_consumer_from_stream(&topology.durable, &topology.stream)
            .await
            .map_err(|e| crate::error::NATS.error("looking up the durable consumer", e))?;
        let (bound, ack_wait) = checked(&consumer, &topology)?;
        let shared = Arc::new(Shared {
            client,
            context,
            stream: topology.stream.clone(),
            durable: topology.durable.clone(),
            dead_letter_stream: topology.dead_letter_stream_name(),
            dead_letter_subject: Subject::from(topology.dead_letter_subject_name()),
            confirm_acks: topology.confirm_acks,
        });
        if !topology.sweep_every.is_zero() {
            let dead_letters = NatsDeadLetters::new(shared.client.clone(), &topology);
            tokio::spawn(sweep_stranded(
                Arc::downgrade(&shared),
                dead_letters,
                topology.sweep_every,
            ));
        }
        Ok(NatsSource {
            topology,
            bound,
            ack_wait,
            consumer,
            pull: None,
            shared,
        })
    }

    /// The topology this source consumes.
    pub fn topology(&self) -> &NatsTopology {
        &self.topology
    }

    fn unit_of(&self, message: jetstream::Message) -> Option<(Unit, NatsHandle)> {
        let (delivered, sequence) = match message.info() {
            Ok(info) => (info.delivered, info.stream_sequence),
            Err(error) => {
                tracing::warn!(stream = %self.topology.stream, %error, subject = %message.subject,
                    "a message without JetStream metadata on the pull subscription; skipped");
                return None;
            }
        };
        let message = message.message;
        let reply = message.reply?;
        let headers = message.headers;
        let id = codec::unit_id(headers.as_ref(), &self.shared.stream, sequence);
        let count = u32::try_from(delivered.max(1)).unwrap_or(u32::MAX);
        let mut unit = Unit::new(id, message.payload)
            .with_delivery_count(DeliveryCount::new(count))
            .with_headers(codec::unit_headers(headers.as_ref()));
        if let Some(stamp) = codec::stamp(headers.as_ref(), sequence) {
            unit = unit.with_stamp(stamp);
        }
        let handle = NatsHandle {
            reply: Some(reply),
            subject: message.subject,
            headers,
            sequence,
            shared: self.shared.clone(),
        };
        Some((unit, handle))
    }
}

impl Source for NatsSource {
    type Handle = NatsHandle;

    /// Cancel safe: a message leaves the pull's buffer only when it is returned.
    async fn receive(&mut self) -> Result<Option<(Unit, NatsHandle)>, TransportError> {
        if self.pull.is_none() {
            self.pull = Some(Pull::start(
                self.consumer.clone(),
                self.shared.clone(),
                pull::Settings {
                    stream: self.topology.stream.clone(),
                    batch: self.topology.batch.max(1),
                    ack_wait: self.ack_wait,
                    in_progress_limit: self.topology.in_progress_limit,
                },
            ));
        }
        let pull = self.pull.as_ref().expect("started above");
        loop {
            let message = pull.next().await?;
            let shared = self.shared.clone();
            if shared.redriven_for_another(&message).await {
                continue;
            }
            if let Some(received) = self.unit_of(message) {
                return Ok(Some(received));
            }
        }
    }

    /// The durable consumer's `max_deliver` as the server holds it (the topology's when the
    /// server's is unlimited).
    fn max_deliveries(&self) -> Option<NonZeroU32> {
        Some(self.bound)
    }

    fn name(&self) -> &str {
        &self.topology.stream
    }

    fn messaging(&self) -> delivery_core::trace::Messaging {
        delivery_core::trace::Messaging::new("nats", &self.topology.stream)
            .consumer_group(&self.topology.durable)
    }

    /// `+WPI` every third of the server's `ack_wait` while the handler runs, up to
    /// `in_progress_limit`.
    fn keep_alive(&self) -> Option<KeepAlive> {
        Some(KeepAlive::within(
            self.ack_wait,
            self.topology.in_progress_limit,
        ))
    }

    /// Stops pulling: no more units are asked for or kept in progress; those still buffered are
    /// left for JetStream to deliver again after their `ack_wait`.
    async fn stop(&mut self) {
        if let Some(pull) = &self.pull {
            pull.stop();
        }
    }
}
