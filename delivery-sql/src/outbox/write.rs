//! The write side: a record written in the caller's own transaction, with the effect it announces.

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use serde::Serialize;
use sqlx::Transaction;

use delivery_core::outbox::RecordId;
use delivery_core::unit::Headers;

use crate::driver::{Exec, Sql, Value};
use crate::table::Table;

/// An outbox: the table records are written to, in the writer's transaction, and relayed from.
///
/// The table is `delivery_outbox` unless [`Outbox::table`] names another; create it with the
/// store's [`migrate`](super::SqlStore::migrate) (`PgStore`, `SqliteStore`) or by hand from the
/// `sql/` file of delivery-postgres or delivery-sqlite.
///
/// ```
/// # #[cfg(feature = "sqlite")]
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use delivery::outbox::{NewRecord, Outbox};
///
/// let pool = sqlx::SqlitePool::connect("sqlite::memory:").await?;
/// let outbox = Outbox::new();
/// let store = outbox.sqlite(pool.clone());
/// store.migrate().await?;
/// sqlx::query("CREATE TABLE orders (id TEXT PRIMARY KEY, total INTEGER)").execute(&pool).await?;
///
/// // The effect and the record announcing it commit together, or not at all (rule 6).
/// let mut tx = pool.begin().await?;
/// sqlx::query("INSERT INTO orders VALUES ('o-1', 990)").execute(&mut *tx).await?;
/// let record = NewRecord::json("orders.events", &serde_json::json!({"order": "o-1"}))?
///     .key("customer-7")
///     .id("order-o-1"); // derived from the order: a rerun of the write cannot mint another
/// let id = outbox.write(&mut tx, record).await?;
/// tx.commit().await?;
///
/// assert_eq!(id.as_str(), "order-o-1");
/// assert_eq!(store.pending().await?, 1);
/// # Ok(()) }
/// # #[cfg(not(feature = "sqlite"))] fn main() {}
/// ```
#[derive(Clone, Debug)]
pub struct Outbox {
    pub(crate) table: Table,
}

impl Default for Outbox {
    fn default() -> Self {
        Outbox::new()
    }
}

impl Outbox {
    /// The outbox in table `delivery_outbox`.
    pub fn new() -> Self {
        Outbox::table("delivery_outbox")
    }

    /// The outbox in `table` (`name` or `schema.name`).
    ///
    /// # Panics
    /// When `table` is not an SQL identifier (ASCII letters, digits and `_`, not starting with a
    /// digit, at most 50 characters), optionally qualified by a schema: the name is written into
    /// statements, so it is checked here, where it is configuration, never at run time.
    pub fn table(table: &str) -> Self {
        match Table::parse(table) {
            Some(table) => Outbox { table },
            None => panic!(
                "outbox table name {table:?} is not an SQL identifier (letters, digits, `_`, optionally `schema.name`)"
            ),
        }
    }

    /// The table records are written to.
    pub fn table_name(&self) -> &str {
        self.table.qualified()
    }

    /// Writes `record` in the caller's transaction and returns its id: the caller's
    /// ([`NewRecord::id`]) or one minted now (a UUIDv7). The record is relayed only if the
    /// transaction commits, and every attempt to relay it carries this id.
    ///
    /// A record whose id is already in the outbox fails the write (a unique violation): with an
    /// id derived from the effect, a second write of the same effect cannot go unnoticed.
    pub async fn write<DB: OutboxDatabase>(
        &self,
        tx: &mut Transaction<'_, DB>,
        record: NewRecord,
    ) -> Result<RecordId, sqlx::Error> {
        let id = record.id.clone().unwrap_or_else(mint);
        let row = Row {
            id: id.as_str(),
            topic: &record.topic,
            key: record.key.as_deref(),
            payload: &record.payload,
            headers: &record.headers,
        };
        self.insert::<DB>(&mut **tx, row, "").await?;
        Ok(id)
    }
}

/// A record id minted at write time: time-ordered, unique without coordination.
/// A row as [`Outbox::insert`] writes it.
pub(crate) struct Row<'a> {
    pub(crate) id: &'a str,
    pub(crate) topic: &'a str,
    pub(crate) key: Option<&'a str>,
    pub(crate) payload: &'a [u8],
    pub(crate) headers: &'a Headers,
}

impl Outbox {
    /// Inserts `row` into the table through `conn` (the caller's transaction), `then` after the
    /// `VALUES` (a conflict clause, or nothing), with the trace context of the span it is written
    /// in among its headers (see `delivery_core::trace`). Returns the rows written: the outbox's
    /// write and a queue's publish, one statement.
    pub(crate) async fn insert<DB: Sql>(
        &self,
        conn: &mut DB::Connection,
        row: Row<'_>,
        then: &str,
    ) -> Result<u64, sqlx::Error> {
        let headers = super::rows::headers_column(&delivery_core::trace::with_current(row.headers));
        // The table name was validated as an identifier when the outbox was built.
        let sql = format!(
            "INSERT INTO {} (id, topic, key, payload, headers) VALUES ($1, $2, $3, $4, $5){then}",
            self.table.qualified()
        );
        let args = DB::arguments(&[
            Value::Text(row.id),
            Value::Text(row.topic),
            Value::OptText(row.key),
            Value::Bytes(row.payload),
            Value::OptText(headers.as_deref()),
        ])?;
        DB::execute(Exec::Conn(conn), &sql, args).await
    }
}

fn mint() -> RecordId {
    RecordId::new(uuid::Uuid::now_v7().to_string())
}

/// A record to write: topic, optional key, payload, and optionally the caller's own id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewRecord {
    id: Option<RecordId>,
    topic: String,
    key: Option<String>,
    payload: Bytes,
    headers: Headers,
}

impl NewRecord {
    /// A record of raw bytes for `topic` (an exchange, a topic, an endpoint's name).
    pub fn new(topic: impl Into<String>, payload: impl Into<Bytes>) -> Self {
        NewRecord {
            id: None,
            topic: topic.into(),
            key: None,
            payload: payload.into(),
            headers: Headers::default(),
        }
    }

    /// A record whose payload is `value` as JSON.
    pub fn json<T: Serialize + ?Sized>(
        topic: impl Into<String>,
        value: &T,
    ) -> Result<Self, serde_json::Error> {
        Ok(NewRecord::new(topic, serde_json::to_vec(value)?))
    }

    /// The routing or partitioning key; with [`Relayer::ordered`](delivery_core::outbox::Relayer::ordered), the
    /// key whose records are relayed in order.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// The record's id, chosen by the caller — best derived from the effect (`order-<id>`), so
    /// the receiver's deduplication and the outbox's primary key both see a repeated write.
    pub fn id(mut self, id: impl Into<RecordId>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Adds a header the sinks send with the record (an AMQP or Kafka header, an HTTP header).
    /// The trace context (`traceparent`, `tracestate`) is the writer's span's (feature
    /// `opentelemetry`), over any given here.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers = self.headers.with(name, value.into());
        self
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The payload.
    pub fn payload(&self) -> &Bytes {
        &self.payload
    }
}

/// A boxed future of a write, for code that names one.
pub type InsertFuture<'a> = Pin<Box<dyn Future<Output = Result<(), sqlx::Error>> + Send + 'a>>;

/// A database an [`Outbox`] can be written in: PostgreSQL (feature `postgres`) and SQLite
/// (feature `sqlite`), each with one `INSERT`, the same in both.
pub trait OutboxDatabase: Sql {}

impl<DB: Sql> OutboxDatabase for DB {}
