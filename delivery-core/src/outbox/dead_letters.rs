//! An outbox store's dead records as a [`DeadLetters`]: the same operator API as every
//! transport's dead letter. A record is dead once the relay gave up on it (rejected by the
//! receiver, malformed, or out of attempts); a redrive makes it pending again under its own id
//! with its attempts back to 0, and the relay sends it again. An edited redrive does the same
//! with the operator's payload written over the record's, and the edit recorded in the record's
//! headers (which the relay sends with it).
//!
//! The record: the unit's id is the record id, its payload the record's, its delivery count the
//! attempts made; the reason and detail are read back from the record's `last_error`; the source
//! is the record's topic; the position is the record's order in the table. The table keeps no
//! time a record died, so `dead_lettered_at` is `None`. Written once here over a few SQL
//! primitives each store provides.

use std::future::Future;

use bytes::Bytes;

use super::record::{RecordId, row_unit};
use super::store::{Store, StoredRecord};
use crate::dead_letter::{Cursor, DeadLetter, DeadLetters, Listing, RedriveReport, Selection};
use crate::disposition::ReasonKind;
use crate::transport_error::TransportError;
use crate::unit::{DeliveryCount, Headers, Stamp, Unit, UnitId};

/// The SQL a store provides for its dead records; the rest is [`DeadLetters`], written once.
pub trait DeadRecords: Store {
    /// How many records are dead.
    fn count_dead(&self) -> impl Future<Output = Result<u64, TransportError>> + Send;

    /// Up to `limit` dead records after position `after`, in order, with their positions.
    fn dead_after(
        &self,
        after: i64,
        limit: i64,
    ) -> impl Future<Output = Result<Vec<(i64, StoredRecord)>, TransportError>> + Send;

    /// Makes the dead records among `ids` (all of them when `None`) pending again, attempts back
    /// to 0, available now; returns the ids it changed.
    fn requeue_dead(
        &self,
        ids: Option<&[RecordId]>,
    ) -> impl Future<Output = Result<Vec<RecordId>, TransportError>> + Send;

    /// The payload and headers of the dead record `id`; `None` when no dead record has that id.
    fn dead_payload(
        &self,
        id: &RecordId,
    ) -> impl Future<Output = Result<Option<(Bytes, Headers)>, TransportError>> + Send;

    /// Makes the dead record `id` pending again as [`requeue_dead`](Self::requeue_dead) does,
    /// with `payload` and `headers` in place of its own — provided it is still dead and still
    /// holds the payload `original`. Returns whether it did.
    fn requeue_dead_edited(
        &self,
        id: &RecordId,
        original: &[u8],
        payload: &[u8],
        headers: &Headers,
    ) -> impl Future<Output = Result<bool, TransportError>> + Send;

    /// Deletes the dead records among `ids`; returns how many.
    fn delete_dead(
        &self,
        ids: &[RecordId],
    ) -> impl Future<Output = Result<u64, TransportError>> + Send;
}

fn failed(what: &'static str) -> impl FnOnce(TransportError) -> TransportError {
    move |error| TransportError::new(what, error)
}

fn record(position: i64, stored: StoredRecord) -> DeadLetter {
    let count = DeliveryCount::new(stored.attempts.max(1));
    let seq = u64::try_from(position).ok().map(Stamp);
    let unit = row_unit(
        stored.id.as_str(),
        stored.payload,
        stored.key.as_deref(),
        stored.headers,
        seq,
        count,
    );
    let mut letter = DeadLetter::new(unit, stored.topic, position.to_string());
    // `last_error` holds the reason as `kind: detail` (a `DeadLetterReason`).
    let error = stored.last_error.unwrap_or_default();
    match error
        .split_once(": ")
        .map(|(k, d)| (ReasonKind::parse(k), d))
    {
        Some((Some(kind), detail)) => {
            letter.reason = Some(kind);
            letter.detail = detail.to_owned();
        }
        _ => letter.detail = error,
    }
    letter
}

fn record_ids(ids: &[UnitId]) -> Vec<RecordId> {
    ids.iter().map(|id| RecordId::new(id.as_str())).collect()
}

impl<S: DeadRecords> DeadLetters for S {
    fn name(&self) -> &str {
        Store::name(self)
    }

    async fn count(&self) -> Result<u64, TransportError> {
        let n = self
            .count_dead()
            .await
            .map_err(failed("counting dead records"))?;
        crate::dead_letter::depth::record(Store::name(self), n);
        Ok(n)
    }

    async fn list(&self, limit: usize, after: Option<&Cursor>) -> Result<Listing, TransportError> {
        let after = match after {
            None => 0,
            Some(cursor) => cursor.as_str().parse::<i64>().map_err(|_| {
                TransportError::msg("listing dead records", "not a cursor of this outbox")
            })?,
        };
        let limit = i64::try_from(limit).unwrap_or(i64::MAX - 1);
        let mut rows = self
            .dead_after(after, limit + 1)
            .await
            .map_err(failed("listing dead records"))?;
        let more = rows.len() as i64 > limit;
        rows.truncate(limit as usize);
        let records = rows.into_iter().map(|(at, r)| record(at, r)).collect();
        Ok(Listing::page(records, more))
    }

    async fn peek(&self, id: &UnitId) -> Result<Option<DeadLetter>, TransportError> {
        let mut after = 0;
        loop {
            let rows = self
                .dead_after(after, 500)
                .await
                .map_err(failed("reading dead records"))?;
            let Some(&(last, _)) = rows.last() else {
                return Ok(None);
            };
            if let Some((at, found)) = rows.into_iter().find(|(_, r)| r.id.as_str() == id.as_str())
            {
                return Ok(Some(record(at, found)));
            }
            after = last;
        }
    }

    async fn redrive(&self, selection: Selection<'_>) -> Result<RedriveReport, TransportError> {
        let ids = match selection {
            Selection::Ids(ids) => Some(record_ids(ids)),
            Selection::All => None,
        };
        let requeued = self
            .requeue_dead(ids.as_deref())
            .await
            .map_err(failed("re-queueing dead records"))?;
        let redriven = requeued.iter().map(|id| UnitId::new(id.as_str())).collect();
        Ok(RedriveReport::of(selection, redriven))
    }

    async fn purge(&self, ids: &[UnitId]) -> Result<u64, TransportError> {
        self.delete_dead(&record_ids(ids))
            .await
            .map_err(failed("deleting dead records"))
    }

    /// Re-queues the record with the operator's payload, its headers with the edit's, in one
    /// `UPDATE` guarded by the payload it held when read: a record redriven (or changed) in
    /// between is left as it is, and answers `false`.
    async fn redrive_edited(&self, id: &UnitId, payload: Bytes) -> Result<bool, TransportError> {
        let record = RecordId::new(id.as_str());
        let Some((original, headers)) = self
            .dead_payload(&record)
            .await
            .map_err(failed("reading a dead record"))?
        else {
            return Ok(false);
        };
        let unit = crate::dead_letter::edited(
            &Unit::new(id.clone(), original.clone()).with_headers(headers),
            payload,
        );
        self.requeue_dead_edited(&record, &original, unit.payload(), unit.headers())
            .await
            .map_err(failed("re-queueing an edited dead record"))
    }
}
