//! A snapshot of the dead letter: every unit it holds, taken and held unacknowledged on one
//! channel until the operation is done, then handed back but for those removed.

use std::time::Duration;

use futures_util::StreamExt;
use lapin::Channel;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicGetOptions, BasicNackOptions,
    BasicQosOptions,
};
use lapin::types::FieldTable;
use tokio::time::Instant;

use crate::connector::close_channel;
use delivery_core::transport::TransportError;

use super::lock::{READER, Reading};
use super::queue::RabbitDeadLetters;
use super::record::{Key, Taken};

/// How long an operation waits for the units it handed back to be ready again (the next
/// reader counts on them), and for the broker to end a read.
pub(super) const HANDED_BACK: Duration = Duration::from_secs(60);

/// How long a snapshot waits for the next unit before asking the queue whether any is left.
pub(super) const IDLE: Duration = Duration::from_secs(2);

/// Acknowledgements a pass sends before it waits for the broker to apply them (see
/// [`Pass::barrier`]).
pub(super) const ACKS_IN_FLIGHT: u32 = 8;

impl RabbitDeadLetters {
    /// Runs `work` over a snapshot of the dead letter, then hands back what it did not remove,
    /// whatever `work` returned.
    pub(super) async fn with_pass<T>(
        &self,
        work: impl AsyncFnOnce(&mut Pass) -> Result<T, TransportError>,
    ) -> Result<T, TransportError> {
        let mut pass = self.open_pass().await?;
        let result = work(&mut pass).await;
        pass.end(self).await;
        result
    }

    /// A snapshot of the dead letter, under its lock: [`Pass::end`] hands back what it holds.
    pub(super) async fn open_pass(&self) -> Result<Pass, TransportError> {
        let reading = self.hold().await?;
        let channel = match reading.connection.create_channel().await {
            Ok(channel) => channel,
            Err(error) => {
                reading.release().await;
                return Err(crate::error::LAPIN.error("opening a channel", error));
            }
        };
        let mut pass = Pass {
            reading,
            channel,
            units: Vec::new(),
            last_tag: 0,
            unsettled: 0,
        };
        match pass.take_all(self).await {
            Ok(()) => Ok(pass),
            Err(error) => {
                pass.end(self).await;
                Err(error)
            }
        }
    }
}

/// A snapshot of the dead letter: every unit it held, taken and not acknowledged, in the
/// listing's order.
pub(super) struct Pass {
    pub(super) reading: Reading,
    /// The channel the units are held on.
    pub(super) channel: Channel,
    pub(super) units: Vec<Taken>,
    /// The highest delivery tag taken.
    pub(super) last_tag: u64,
    /// Acknowledgements sent since the last [`barrier`](Pass::barrier).
    pub(super) unsettled: u32,
}

impl Pass {
    /// Takes every unit the dead-letter queue holds: a consumer without a prefetch limit, until
    /// as many as were ready arrived (or none is left), then cancelled; sorts them.
    pub(super) async fn take_all(
        &mut self,
        dead: &RabbitDeadLetters,
    ) -> Result<(), TransportError> {
        let ready = dead.ready(&self.reading.control).await?;
        if ready == 0 {
            return Ok(());
        }
        let reading = |e| crate::error::LAPIN.error("reading the dead letter (basic.consume)", e);
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

    pub(super) fn take(&mut self, delivery: lapin::message::Delivery) {
        self.last_tag = self.last_tag.max(delivery.delivery_tag);
        self.units.push(Taken {
            key: Key::of(&delivery.properties, &delivery.data),
            properties: delivery.properties,
            data: delivery.data,
            acker: Some(delivery.acker),
        });
    }

    /// Acknowledges the unit at `index`: it leaves the dead letter for good.
    pub(super) async fn remove(
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
            Err(error) => {
                Err(crate::error::LAPIN.error("removing from the dead letter (basic.ack)", error))
            }
        }
    }

    /// A `basic.get` on the pass's channel, which the broker answers only once it applied the
    /// acknowledgements sent before it on the channel. (A quorum queue's client in the broker
    /// holds settlements back once 32 commands are in flight, and drops them if the channel
    /// closes first: the units would come back.) A unit it hands over — one dead-lettered since
    /// the snapshot — is held like the others.
    pub(super) async fn barrier(&mut self, dead: &RabbitDeadLetters) -> Result<(), TransportError> {
        let got = self
            .channel
            .basic_get(
                dead.dead_letter_queue.as_str().into(),
                BasicGetOptions { no_ack: false },
            )
            .await
            .map_err(|e| {
                crate::error::LAPIN.error("removing from the dead letter (basic.get)", e)
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
    pub(super) async fn end(mut self, dead: &RabbitDeadLetters) {
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
