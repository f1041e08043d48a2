//! PostgreSQL for [`delivery`](https://docs.rs/delivery), through sqlx 0.9: the outbox store
//! several relays share ([`PgStore`]: claims with `FOR UPDATE SKIP LOCKED` under a lease,
//! `LISTEN/NOTIFY` wakes the relays after a commit), the inbox ([`PgInbox`]) and the stamp
//! guard ([`store`], the same statement in every database). What they do is written once in
//! delivery-sql, over a dialect; this crate is PostgreSQL's dialect ([`Postgres`]: its SQL text, its migration in `sql/outbox_postgres.sql`,
//! its wakeups) and its names. Use it through the `delivery` facade (feature `postgres`); the
//! crate's README shows each, its examples compiled as doc tests of `delivery`.
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod dialect;

pub use dialect::Postgres;

delivery_sql::database!(
    crate::Postgres,
    sqlx::PgConnection,
    PgStore,
    PgInbox,
    PgQueue,
    PgTx,
    "PostgreSQL"
);
