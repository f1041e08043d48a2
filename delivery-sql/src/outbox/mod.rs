//! The outbox in PostgreSQL and SQLite: the write side ([`Outbox::write`], in the caller's own
//! transaction) and the store a [`Relayer`](delivery_core::outbox::Relayer) relays from
//! ([`SqlStore`], one implementation over each database's [`Dialect`](crate::dialect::Dialect)).

mod rows;
mod store;
mod write;

pub use store::SqlStore;
pub(crate) use write::Row;
pub use write::{InsertFuture, NewRecord, Outbox, OutboxDatabase};
