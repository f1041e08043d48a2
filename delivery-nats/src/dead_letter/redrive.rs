//! Redriving: each selected unit published back to its subject under its own id, its dead-letter
//! copy deleted once JetStream confirmed it.

use std::time::{Duration, SystemTime};

use async_nats::header::NATS_MESSAGE_ID;
use bytes::Bytes;

use super::read::{NatsDeadLetters, Stored};
use crate::codec::{self, last};
use delivery_core::dead_letter::{RedriveReport, Selection};
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
            .map_err(|e| crate::error::transport_error("reading a stream's configuration", e))?
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
            .map_err(|e| crate::error::transport_error("redriving", e))?
            .await
            .map_err(|e| {
                TransportError::msg(
                    "redriving",
                    format!(
                        "{id} was not confirmed on `{subject}` and stays in the dead letter: {e}"
                    ),
                )
            })?;
        Ok(if ack.duplicate {
            Published::Duplicate(ack.sequence)
        } else {
            Published::Stored(ack.sequence)
        })
    }
}

impl NatsDeadLetters {
    /// Publishes each selected unit back to its subject — edited to `edit`, if given — and
    /// deletes its dead-letter copy once JetStream confirmed it (see the [type docs](Self)).
    pub(super) async fn redrive_selected(
        &self,
        selection: Selection<'_>,
        edit: Option<&Bytes>,
    ) -> Result<RedriveReport, TransportError> {
        let mut redriven = Vec::new();
        // Source sequences this redrive stored, by unit id: a later copy of one of them refused
        // as a duplicate is already back in the source.
        let mut sent: Vec<(UnitId, u64)> = Vec::new();
        let mut left: Vec<String> = Vec::new();
        // Both duplicate windows, where short enough to wait out.
        let source_window = self.short_duplicate_window(&self.stream).await?;
        let dead_letter_window = self
            .short_duplicate_window(&self.dead_letter_stream)
            .await?;
        for stored in self.all().await? {
            let record = self.record(&stored);
            let id = record.id();
            if !selection.contains(id) {
                continue;
            }
            if let Some(window) = dead_letter_window {
                // The dead letter refuses the same id within its window (JetStream forgets an id
                // up to one more window late): redriven from a copy younger than that, the unit
                // refused again at once could not come back to the dead letter.
                let age = SystemTime::now()
                    .duration_since(stored.time)
                    .unwrap_or_default();
                if let Some(wait) = (window * 2 + Duration::from_millis(50)).checked_sub(age) {
                    tokio::time::sleep(wait).await;
                }
            }
            let mut published = self.publish_back(&stored, id, edit).await?;
            for _ in 0..3 {
                match (&published, source_window) {
                    (Published::Duplicate(at), Some(window))
                        if !sent.contains(&(id.clone(), *at)) =>
                    {
                        tokio::time::sleep(window).await;
                        published = self.publish_back(&stored, id, edit).await?;
                    }
                    _ => break,
                }
            }
            match published {
                Published::Stored(at) => sent.push((id.clone(), at)),
                Published::Duplicate(at) if sent.contains(&(id.clone(), at)) => {}
                Published::Duplicate(_) => {
                    left.push(format!(
                        "{id} (refused as a duplicate: its id is still inside `{}`'s duplicate window)",
                        self.stream
                    ));
                    continue;
                }
                Published::Refused(why) => {
                    left.push(format!("{id} ({why})"));
                    continue;
                }
            }
            self.delete(stored.sequence).await.map_err(|e| {
                TransportError::msg(
                    "redriving",
                    format!("{id} is back in `{}` but its dead-letter copy was not deleted ({e}); it is in both", self.stream),
                )
            })?;
            redriven.push(id.clone());
        }
        if !left.is_empty() {
            return Err(TransportError::msg(
                "redriving",
                format!(
                    "redriven: [{}]; left in the dead letter: {} — redrive them again later",
                    redriven
                        .iter()
                        .map(UnitId::as_str)
                        .collect::<Vec<_>>()
                        .join(", "),
                    left.join(", ")
                ),
            ));
        }
        Ok(RedriveReport::of(selection, redriven))
    }
}
