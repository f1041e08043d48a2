//! The sending side (rule 6): an effect and the message announcing it are written in one
//! transaction to an outbox; a relay then hands each record, under its own id, to a relay function
//! that sends it through a sink, and marks it delivered only once the sink's [`Receipt`] proves
//! the receiver confirmed.
//!
//! | where | what |
//! |---|---|
//! | `Outbox`, `NewRecord` (delivery-sql) | the write side: a record in the caller's own transaction (features `postgres`, `sqlite` of `delivery`) |
//! | [`Store`]: `PgStore` (delivery-postgres), `SqliteStore` (delivery-sqlite), both delivery-sql's `SqlStore` | the outbox table: claims under a lease, batched marks, dead records and re-queue |
//! | [`Relayer`] | the relay runtime: claim, attempt (windowed), mark; backoff, bound, `ordered` |
//! | [`Relay`], [`OutboxRecord`], [`Receipt`] | what a relay function is, takes and returns |
//! | [`Sink`] | where a relay function sends, implemented in each transport's crate: `delivery::rabbitmq::RabbitSink`, `delivery::kafka::KafkaSink`, `delivery::http::HttpSink` (a test's receiver, `MemorySink`, is in [`testing`](crate::testing), feature `testing`) |
//!
//! **Your own database client.** The stores and `Outbox::write` take your sqlx pool and your
//! transaction, so your connect options, TLS and pool settings are kept. They must be **sqlx
//! 0.9**'s (a pool of another sqlx major is another type and does not compile): depend on
//! `sqlx = "0.9"` with the driver you use, or name its types through the re-export
//! `delivery::sqlx`.
//!
//! ```no_run
//! # #[cfg(feature = "postgres")]
//! # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! use delivery::outbox::{NewRecord, Outbox};
//! use delivery::sqlx::postgres::PgPoolOptions;
//!
//! // Your pool, with your settings.
//! let pool = PgPoolOptions::new().max_connections(8).connect("postgres://localhost/app").await?;
//! let outbox = Outbox::new();
//! let store = outbox.postgres(pool.clone());
//! store.migrate().await?;
//! let mut tx = pool.begin().await?;
//! // ... your own writes in `tx` ...
//! outbox.write(&mut tx, NewRecord::new("orders.events", &b"{}"[..])).await?;
//! tx.commit().await?;
//! # Ok(()) }
//! ```
//!
//! The table (`delivery-postgres/sql/outbox_postgres.sql`, `delivery-sqlite/sql/outbox_sqlite.sql`)
//! keeps per record: its
//! id (fixed at write time), topic, key, payload, status (`pending`, `delivered`, `dead`), failed
//! attempts, last error, when it is available again (backoff), the lease (owner, until), the
//! created order, and when it was delivered. Every time in it is the database's clock.

mod backlog;
mod dead_letters;
mod record;
mod relayer;
mod sink;
mod store;

pub use record::{
    Attempt, FromRecord, IntoAttempt, OutboxRecord, Receipt, Record, RecordId, Relay, row_unit,
};

pub use dead_letters::DeadRecords;
pub use relayer::{RelayReport, Relayer};
pub use sink::Sink;
pub use store::{Backlog, Claim, Mark, Status, Store, StoredRecord, Wakeups, until_idle};
