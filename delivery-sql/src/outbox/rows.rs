//! The outbox table's columns as the stores read and write them, and `retain`'s batches.

use std::future::Future;

use bytes::Bytes;
use delivery_core::unit::Headers;

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
pub(crate) fn payload_and_headers<R>(row: &R) -> Result<(Bytes, Headers), sqlx::Error>
where
    R: sqlx::Row,
    for<'r> Vec<u8>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> Option<String>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'c> &'c str: sqlx::ColumnIndex<R>,
{
    let payload = row.try_get::<Vec<u8>, _>("payload")?;
    let headers = row.try_get::<Option<String>, _>("headers")?;
    Ok((payload.into(), headers_from_column(headers.as_deref())))
}

/// How many records one statement of `retain` deletes: each batch is its own transaction, so
/// writers and the relay wait one batch at most.
pub(crate) const RETAIN_BATCH: i64 = 10_000;

/// Runs `delete_batch` (which deletes up to [`RETAIN_BATCH`] records) until a batch comes back
/// short, and returns how many it deleted in all.
pub(crate) async fn in_batches<F, Fut>(mut delete_batch: F) -> Result<u64, sqlx::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<u64, sqlx::Error>>,
{
    let mut deleted = 0;
    loop {
        let batch = delete_batch().await?;
        deleted += batch;
        if batch < RETAIN_BATCH as u64 {
            return Ok(deleted);
        }
    }
}
