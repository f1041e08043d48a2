//! The outbox table's columns as the stores read and write them — a claimed row as a [`Record`],
//! a row as a [`StoredRecord`] — and `retain`'s batches, in every dialect.

use std::future::Future;

use bytes::Bytes;
use delivery_core::outbox::{Record, RecordId, Status, StoredRecord};
use delivery_core::unit::{Headers, Stamp};

use crate::driver::Sql;

/// The outbox table's `headers` column: a JSON object of the headers' text values, `NULL` for
/// none.
pub(crate) fn headers_column(headers: &Headers) -> Option<String> {
    if headers.is_empty() {
        return None;
    }
    let text: std::collections::BTreeMap<&str, &str> = headers
        .iter()
        .filter_map(|(name, value)| Some((name, std::str::from_utf8(value).ok()?)))
        .collect();
    serde_json::to_string(&text).ok()
}

/// The headers a `headers` column holds; none for `NULL` or text that is not a JSON object of
/// strings.
pub(crate) fn headers_from_column(column: Option<&str>) -> Headers {
    column
        .and_then(|text| {
            serde_json::from_str::<std::collections::BTreeMap<String, String>>(text).ok()
        })
        .map(Headers::from_pairs)
        .unwrap_or_default()
}

/// A row's `payload` and `headers` columns, as a dead record's edited redrive reads them.
pub(crate) fn payload_and_headers<DB: Sql>(row: &DB::Row) -> Result<(Bytes, Headers), sqlx::Error> {
    let payload = DB::bytes(row, "payload")?;
    let headers = DB::opt_text(row, "headers")?;
    Ok((payload.into(), headers_from_column(headers.as_deref())))
}

/// How many records one statement of `retain` deletes: each batch is its own transaction, so
/// writers and the relay wait one batch at most.
pub(crate) const RETAIN_BATCH: i64 = 10_000;

/// Runs `delete_batch` (which deletes up to `batch` records) until a batch comes back short, and
/// returns how many it deleted in all.
pub(crate) async fn in_batches<F, Fut>(batch: i64, mut delete_batch: F) -> Result<u64, sqlx::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<u64, sqlx::Error>>,
{
    let mut deleted = 0;
    loop {
        let done = delete_batch().await?;
        deleted += done;
        if done < batch as u64 {
            return Ok(deleted);
        }
    }
}

/// A row of a claim (`id, topic, key, payload, attempts, seq, headers`) as the record to relay,
/// stamped with its `seq`, and that `seq` to order the claim by.
pub(crate) fn claimed<DB: Sql>(row: &DB::Row) -> Result<(i64, Record), sqlx::Error> {
    let record = Record::new(
        DB::text(row, "id")?,
        DB::text(row, "topic")?,
        DB::opt_text(row, "key")?,
        DB::bytes(row, "payload")?,
        DB::count(row, "attempts")?,
    );
    let order = DB::int(row, "seq")?;
    let headers = DB::opt_text(row, "headers")?;
    let record = record.with_headers(headers_from_column(headers.as_deref()));
    Ok((order, record.with_stamp(Stamp(order.max(0) as u64))))
}

/// A row of the outbox's columns ([`COLUMNS`]) as a stored record.
pub(crate) fn stored<DB: Sql>(row: &DB::Row) -> Result<StoredRecord, sqlx::Error> {
    Ok(StoredRecord {
        id: RecordId::new(DB::text(row, "id")?),
        topic: DB::text(row, "topic")?,
        key: DB::opt_text(row, "key")?,
        payload: DB::bytes(row, "payload")?.into(),
        status: Status::parse(&DB::text(row, "status")?),
        attempts: DB::count(row, "attempts")?,
        last_error: DB::opt_text(row, "last_error")?,
        headers: headers_from_column(DB::opt_text(row, "headers")?.as_deref()),
    })
}

/// The columns [`stored`] reads.
pub(crate) const COLUMNS: &str = "id, topic, key, payload, status, attempts, last_error, headers";
