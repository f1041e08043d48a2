//! Redriving: each selected unit published back to its subject under its own id, its dead-letter
//! copy deleted once JetStream confirmed it.

use std::time::{Duration, SystemTime};

use async_nats::header::NATS_MESSAGE_ID;
use bytes::Bytes;

use super::read::{NatsDeadLetters, Stored};
use crate::codec::{self, last};
use delivery_core::dead_letter::{DeadLetter, Page, RedriveLog, Republished};
use delivery_core::transport::TransportError;
use delivery_core::unit::UnitId;

/// The longest duplicate window a redrive waits out for a unit JetStream refused as a duplicate.
const SHORT_WINDOW: Duration = Duration::from_secs(2);

/// What became of a unit published back to its subject.
enum Published {
    /// Stored in the source stream at this sequence.
    Stored(u64),
    /// Refused as a duplicate of the unit stored at this sequence.
    Duplicate(u64),
    /// Not published, for this reason.
    Refused(String),
}

impl NatsDeadLetters {
    /// `stream`'s duplicate window, if it is at most [`SHORT_WINDOW`].
    async fn short_duplicate_window(
        &self,
        stream: &str,
    ) -> Result<Option<Duration>, TransportError> {
        let window = self
            .context
            .get_stream(stream)
            .await
            .map_err(|e| crate::error::NATS.error("reading a stream's configuration", e))?
            .cached_info()
            .config
            .duplicate_window;
        Ok((window <= SHORT_WINDOW).then_some(window))
    }

    /// Publishes `stored` back to the subject it came from under its unit's id `id` — edited to
    /// `edit`, if given — and waits for JetStream's confirmation.
    async fn publish_back(
        &self,
        stored: &Stored,
        id: &UnitId,
        edit: Option<&Bytes>,
    ) -> Result<Published, TransportError> {
        let subject = last(
            Some(&stored.headers),
            delivery_core::headers::DEAD_LETTER_SUBJECT,
        )
        .map(str::to_owned)
        .or_else(|| {
            // Published by something else than this transport: its first literal subject.
            self.subjects
                .iter()
                .find(|s| !s.contains(['*', '>']))
                .cloned()
        });
        let Some(subject) = subject else {
            return Ok(Published::Refused(format!(
                "no subject recorded, and `{}` has no literal subject to publish it to",
                self.stream
            )));
        };
        let mut headers = codec::without_dead_letter_headers(Some(&stored.headers));
        headers.insert(NATS_MESSAGE_ID, id.as_str());
        // For the durable consumer that dead-lettered it alone: the others skip it.
        if let Some(group) = last(
            Some(&stored.headers),
            delivery_core::headers::DEAD_LETTER_GROUP,
        ) {
            headers.insert(delivery_core::headers::REDRIVE_GROUP, group);
        }
        let payload = match edit {
            None => stored.payload.clone(),
            Some(payload) => {
                for (name, value) in delivery_core::transport::edit_headers(&stored.payload) {
                    headers.insert(name, value.as_str());
                }
                payload.clone()
            }
        };
        let ack = self
            .context
            .publish_with_headers(subject.clone(), headers, payload)
            .await
            .map_err(|e| crate::error::NATS.error("redriving", e))?
            .await
            .map_err(|e| {
                TransportError::msg("redriving", format!("not confirmed on `{subject}`: {e}"))
            })?;
        Ok(if ack.duplicate {
            Published::Duplicate(ack.sequence)
        } else {
            Published::Stored(ack.sequence)
        })
    }
}

/// What a redrive holds: what it sent back, and the duplicate windows it waits out.
pub struct Pass {
    /// Source sequences this redrive stored, by unit id: a later copy of one of them refused as a
    /// duplicate is already back in the source.
    sent: Vec<(UnitId, u64)>,
    /// The source's duplicate window, where short enough to wait out.
    source_window: Option<Duration>,
    /// The dead letter's duplicate window, where short enough to wait out.
    dead_letter_window: Option<Duration>,
}

/// A redrive's primitives: every stored unit read at once, published back under a confirm (see
/// the [type docs](NatsDeadLetters) for the duplicate windows), the dead-letter copy deleted by
/// sequence.
impl RedriveLog for NatsDeadLetters {
    type Pass = Pass;
    type Entry = Stored;

    async fn open(&self) -> Result<Pass, TransportError> {
        Ok(Pass {
            sent: Vec::new(),
            source_window: self.short_duplicate_window(&self.stream).await?,
            dead_letter_window: self
                .short_duplicate_window(&self.dead_letter_stream)
                .await?,
        })
    }

    /// Every unit at once.
    async fn next_page(&self, _: &mut Pass) -> Result<Page<Stored>, TransportError> {
        let all = self.all().await?.into_iter().map(|stored| {
            let record = self.record(&stored);
            (stored, record)
        });
        Ok((all.collect(), false))
    }

    async fn republish(
        &self,
        pass: &mut Pass,
        stored: &Stored,
        record: &DeadLetter,
        edit: Option<&Bytes>,
    ) -> Result<Republished, TransportError> {
        let id = record.id();
        if let Some(window) = pass.dead_letter_window {
            // The dead letter refuses the same id within its window (JetStream forgets an id up to
            // one more window late): redriven from a copy younger than that, the unit refused
            // again at once could not come back to the dead letter.
            let age = SystemTime::now()
                .duration_since(stored.time)
                .unwrap_or_default();
            if let Some(wait) = (window * 2 + Duration::from_millis(50)).checked_sub(age) {
                tokio::time::sleep(wait).await;
            }
        }
        let mut published = self.publish_back(stored, id, edit).await?;
        for _ in 0..3 {
            match (&published, pass.source_window) {
                (Published::Duplicate(at), Some(window))
                    if !pass.sent.contains(&(id.clone(), *at)) =>
                {
                    tokio::time::sleep(window).await;
                    published = self.publish_back(stored, id, edit).await?;
                }
                _ => break,
            }
        }
        Ok(match published {
            Published::Stored(at) => {
                pass.sent.push((id.clone(), at));
                Republished::Confirmed
            }
            Published::Duplicate(at) if pass.sent.contains(&(id.clone(), at)) => {
                Republished::Confirmed
            }
            Published::Duplicate(_) => Republished::Left(format!(
                "refused as a duplicate: its id is still inside `{}`'s duplicate window",
                self.stream
            )),
            Published::Refused(why) => Republished::Left(why),
        })
    }

    async fn remove(&self, _: &mut Pass, stored: Stored) -> Result<(), TransportError> {
        self.delete(stored.sequence).await
    }
}
