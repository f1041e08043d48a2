//! PostgreSQL for [`delivery`](https://docs.rs/delivery), through sqlx 0.9: the outbox store
//! several relays share ([`outbox::PgStore`]: claims with `FOR UPDATE SKIP LOCKED` under a lease,
//! `LISTEN/NOTIFY` wakes the relays after a commit), the inbox ([`inbox::PgInbox`]) and the stamp
//! guard ([`store`]). What they do is written once in delivery-sql, over a dialect; this crate is
//! PostgreSQL's dialect ([`Postgres`]: its SQL text, its migration in `sql/outbox_postgres.sql`,
//! its wakeups) and its names. Use it through the `delivery` facade (feature `postgres`); the
//! crate's README shows each, its examples compiled as doc tests of `delivery`.
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod dialect;

pub use dialect::Postgres;

/// The outbox in PostgreSQL: the write side ([`Outbox::write`](outbox::Outbox::write)) and the
/// store.
pub mod outbox {
    pub use delivery_sql::outbox::{InsertFuture, NewRecord, Outbox, OutboxDatabase};

    /// An outbox table in PostgreSQL (`outbox.postgres(pool)`): what a
    /// [`Relayer`](delivery_core::outbox::Relayer) relays from — several relays share one table,
    /// each record held by one of them at a time, woken by `LISTEN/NOTIFY` — and an operator's
    /// view of it (dead records, re-queue).
    pub type PgStore = delivery_sql::outbox::SqlStore<crate::Postgres>;
}

/// The inbox in PostgreSQL (see [`delivery_sql::inbox`]).
pub mod inbox {
    pub use delivery_sql::inbox::{Inbox, InboxDatabase, RecordFuture, TABLE};

    /// An [`Inbox`]'s table in PostgreSQL (`inbox.postgres(pool)`): its migration and its
    /// retention.
    pub type PgInbox = delivery_sql::inbox::SqlInbox<crate::Postgres>;
}

/// The stamp guard in PostgreSQL (see [`delivery_sql::store`]).
pub mod store {
    use sqlx::PgConnection;

    use delivery_core::unit::Stamp;

    pub use delivery_sql::store::TABLE;

    /// Creates the guard's table if it does not exist. Safe to run at every start, from several
    /// processes at once.
    pub async fn migrate(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
        delivery_sql::store::migrate::<crate::Postgres>(conn).await
    }

    /// Moves `key`'s stamp (in `scope`) to `stamp` if `stamp` is newer than the one stored, in
    /// the caller's transaction: `true` when it did, `false` when PostgreSQL already holds this
    /// stamp or a newer one ([`delivery_sql::store::advance`]).
    ///
    /// ```no_run
    /// # async fn handle(pool: sqlx::PgPool) -> Result<(), sqlx::Error> {
    /// use delivery::{Stamp, store::postgres};
    /// let mut tx = pool.begin().await?;
    /// postgres::migrate(&mut tx).await?;
    /// assert!(postgres::advance(&mut tx, "orders", "o-1", Stamp(7)).await?);
    /// assert!(!postgres::advance(&mut tx, "orders", "o-1", Stamp(5)).await?, "older: refused");
    /// assert!(!postgres::advance(&mut tx, "orders", "o-1", Stamp(7)).await?, "the same: refused");
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    pub async fn advance(
        conn: &mut PgConnection,
        scope: &str,
        key: &str,
        stamp: Stamp,
    ) -> Result<bool, sqlx::Error> {
        delivery_sql::store::advance::<sqlx::Postgres>(conn, scope, key, stamp).await
    }
}
