//! The outbox in PostgreSQL and SQLite: the write side ([`Outbox::write`], in the caller's own
//! transaction) and the stores a [`Relayer`](delivery_core::outbox::Relayer) relays from.

mod rows;
mod write;

#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;

#[cfg(feature = "postgres")]
pub use postgres::PgStore;
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteStore;
pub use write::{InsertFuture, NewRecord, Outbox, OutboxDatabase};
