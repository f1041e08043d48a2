//! SQLite for [`delivery`](https://docs.rs/delivery), through sqlx 0.9 (bundled): the embedded
//! outbox store, for one relay ([`outbox::SqliteStore`]: claims under a lease all the same,
//! polling wakes the relay), the inbox ([`inbox::SqliteInbox`]) and the stamp guard ([`store`]).
//! What they do is written once in delivery-sql, over a dialect; this crate is SQLite's dialect
//! ([`Sqlite`]: its SQL text, its migration in `sql/outbox_sqlite.sql` and the upgrade of a table
//! made before `seq`) and its names. Use it through the `delivery` facade (feature `sqlite`); the
//! crate's README shows each, its examples compiled as doc tests of `delivery`.
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod dialect;

pub use dialect::Sqlite;

/// The outbox in SQLite: the write side ([`Outbox::write`](outbox::Outbox::write)) and the store.
pub mod outbox {
    pub use delivery_sql::outbox::{InsertFuture, NewRecord, Outbox, OutboxDatabase};

    /// An outbox table in SQLite (`outbox.sqlite(pool)`): what a
    /// [`Relayer`](delivery_core::outbox::Relayer) relays from — one relay at a time — and an
    /// operator's view of it.
    pub type SqliteStore = delivery_sql::outbox::SqlStore<crate::Sqlite>;
}

/// The inbox in SQLite (see [`delivery_sql::inbox`]).
pub mod inbox {
    pub use delivery_sql::inbox::{Inbox, InboxDatabase, RecordFuture, TABLE};

    /// An [`Inbox`]'s table in SQLite (`inbox.sqlite(pool)`): its migration and its retention.
    pub type SqliteInbox = delivery_sql::inbox::SqlInbox<crate::Sqlite>;
}

/// The stamp guard in SQLite (see [`delivery_sql::store`]).
pub mod store {
    use sqlx::SqliteConnection;

    use delivery_core::unit::Stamp;

    pub use delivery_sql::store::TABLE;

    /// Creates the guard's table if it does not exist. Safe to run at every start.
    pub async fn migrate(conn: &mut SqliteConnection) -> Result<(), sqlx::Error> {
        delivery_sql::store::migrate::<crate::Sqlite>(conn).await
    }

    /// Moves `key`'s stamp (in `scope`) to `stamp` if `stamp` is newer than the one stored, in
    /// the caller's transaction ([`delivery_sql::store::advance`]).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlx::Error> {
    /// use delivery::{Stamp, store::sqlite};
    /// let pool = delivery::sqlx::SqlitePool::connect("sqlite::memory:").await?;
    /// let mut tx = pool.begin().await?;
    /// sqlite::migrate(&mut tx).await?;
    /// assert!(sqlite::advance(&mut tx, "orders", "o-1", Stamp(7)).await?);
    /// assert!(!sqlite::advance(&mut tx, "orders", "o-1", Stamp(5)).await?, "older: refused");
    /// assert!(!sqlite::advance(&mut tx, "orders", "o-1", Stamp(7)).await?, "the same: refused");
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    pub async fn advance(
        conn: &mut SqliteConnection,
        scope: &str,
        key: &str,
        stamp: Stamp,
    ) -> Result<bool, sqlx::Error> {
        delivery_sql::store::advance::<sqlx::Sqlite>(conn, scope, key, stamp).await
    }
}
