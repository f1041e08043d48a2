//! SQLite for [`delivery`](https://docs.rs/delivery), through sqlx 0.9 (bundled): the embedded
//! outbox store, for one relay ([`SqliteStore`]: claims under a lease all the same,
//! polling wakes the relay), the inbox ([`SqliteInbox`]) and the stamp guard ([`store`], the same statement in every database).
//! What they do is written once in delivery-sql, over a dialect; this crate is SQLite's dialect
//! ([`Sqlite`]: its SQL text, its migration in `sql/outbox_sqlite.sql` and the upgrade of a table
//! made before `seq`) and its names. Use it through the `delivery` facade (feature `sqlite`); the
//! crate's README shows each, its examples compiled as doc tests of `delivery`.
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod dialect;

pub use dialect::Sqlite;

delivery_sql::database!(
    crate::Sqlite,
    sqlx::SqliteConnection,
    SqliteStore,
    SqliteInbox,
    SqliteQueue,
    SqliteTx,
    "SQLite"
);
