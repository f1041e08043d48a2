//! The outbox table's columns as the stores read and write them — a claimed row as a [`Record`],
//! a row as a [`StoredRecord`] — and `retain`'s batches. Shared by the PostgreSQL and SQLite
//! stores, which differ in their SQL text alone.

use std::future::Future;

use bytes::Bytes;
use delivery_core::outbox::{Record, RecordId, Status, StoredRecord};
use delivery_core::unit::{Headers, Stamp};

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

/// The `attempts` column's integer (`INT` in PostgreSQL, `INTEGER` in SQLite) as a count: never
/// below 0, at most `u32::MAX`.
pub(crate) trait AttemptsColumn {
    fn count(self) -> u32;
}

impl AttemptsColumn for i32 {
    fn count(self) -> u32 {
        self.max(0) as u32
    }
}

impl AttemptsColumn for i64 {
    fn count(self) -> u32 {
        self.clamp(0, u32::MAX.into()) as u32
    }
}

/// A row of a claim (`id, topic, key, payload, attempts, seq, headers`, by position) as the
/// record to relay, stamped with its `seq`, and that `seq` to order the claim by. `A` is the
/// `attempts` column's integer type.
pub(crate) fn claimed<R, A>(row: &R) -> Result<(i64, Record), sqlx::Error>
where
    R: sqlx::Row,
    A: AttemptsColumn + for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> Option<String>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> Vec<u8>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    usize: sqlx::ColumnIndex<R>,
{
    let record = Record::new(
        row.try_get::<String, _>(0)?,
        row.try_get::<String, _>(1)?,
        row.try_get::<Option<String>, _>(2)?,
        row.try_get::<Vec<u8>, _>(3)?,
        row.try_get::<A, _>(4)?.count(),
    );
    let order = row.try_get::<i64, _>(5)?;
    let headers = row.try_get::<Option<String>, _>(6)?;
    let record = record.with_headers(headers_from_column(headers.as_deref()));
    Ok((order, record.with_stamp(Stamp(order.max(0) as u64))))
}

/// A row of the outbox's columns (`COLUMNS`, by name) as a stored record. `A` is the `attempts`
/// column's integer type.
pub(crate) fn stored<R, A>(row: &R) -> Result<StoredRecord, sqlx::Error>
where
    R: sqlx::Row,
    A: AttemptsColumn + for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> &'r str: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> Option<String>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> Vec<u8>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'c> &'c str: sqlx::ColumnIndex<R>,
{
    Ok(StoredRecord {
        id: RecordId::new(row.try_get::<String, _>("id")?),
        topic: row.try_get("topic")?,
        key: row.try_get("key")?,
        payload: row.try_get::<Vec<u8>, _>("payload")?.into(),
        status: Status::parse(row.try_get("status")?),
        attempts: row.try_get::<A, _>("attempts")?.count(),
        last_error: row.try_get("last_error")?,
    })
}

/// [`DeadRecords`](delivery_core::outbox::DeadRecords) for an outbox store whose inherent
/// `*_sql` methods hold its dialect's SQL (PostgreSQL's and SQLite's alike), each failure read as
/// a [`TransportError`](delivery_core::transport::TransportError) naming what was being done; and
/// the store as an [`AnyDeadLetters`](delivery_core::dead_letter::AnyDeadLetters).
macro_rules! dead_records {
    ($store:ty) => {
        impl delivery_core::outbox::DeadRecords for $store {
            async fn count_dead(&self) -> Result<u64, delivery_core::transport::TransportError> {
                self.count_dead_sql()
                    .await
                    .map_err(crate::error::failed("counting dead records"))
            }

            async fn dead_after(
                &self,
                after: i64,
                limit: i64,
            ) -> Result<
                Vec<(i64, delivery_core::outbox::StoredRecord)>,
                delivery_core::transport::TransportError,
            > {
                self.dead_after_sql(after, limit)
                    .await
                    .map_err(crate::error::failed("listing dead records"))
            }

            /// Pending again under the same id, attempts back to 0, available now (the last
            /// error stays for reference); relays are woken.
            async fn requeue_dead(
                &self,
                ids: Option<&[delivery_core::outbox::RecordId]>,
            ) -> Result<
                Vec<delivery_core::outbox::RecordId>,
                delivery_core::transport::TransportError,
            > {
                self.requeue_dead_sql(ids)
                    .await
                    .map_err(crate::error::failed("requeueing dead records"))
            }

            async fn dead_payload(
                &self,
                id: &delivery_core::outbox::RecordId,
            ) -> Result<
                Option<(bytes::Bytes, delivery_core::unit::Headers)>,
                delivery_core::transport::TransportError,
            > {
                self.dead_payload_sql(id)
                    .await
                    .map_err(crate::error::failed("reading a dead record"))
            }

            /// Pending again as `requeue_dead` makes it, with the new payload and headers; relays
            /// are woken.
            async fn requeue_dead_edited(
                &self,
                id: &delivery_core::outbox::RecordId,
                original: &[u8],
                payload: &[u8],
                headers: &delivery_core::unit::Headers,
            ) -> Result<bool, delivery_core::transport::TransportError> {
                self.requeue_dead_edited_sql(id, original, payload, headers)
                    .await
                    .map_err(crate::error::failed("requeueing an edited dead record"))
            }

            async fn delete_dead(
                &self,
                ids: &[delivery_core::outbox::RecordId],
            ) -> Result<u64, delivery_core::transport::TransportError> {
                self.delete_dead_sql(ids)
                    .await
                    .map_err(crate::error::failed("deleting dead records"))
            }
        }

        impl From<$store> for delivery_core::dead_letter::AnyDeadLetters {
            fn from(store: $store) -> Self {
                delivery_core::dead_letter::AnyDeadLetters::new(store)
            }
        }
    };
}
pub(crate) use dead_records;
