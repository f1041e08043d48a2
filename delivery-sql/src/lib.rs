//! What the PostgreSQL and SQLite crates of [`delivery`](https://docs.rs/delivery) share,
//! through sqlx 0.9: the outbox written in your own transaction and the store a relay claims from
//! ([`outbox`]), the inbox ([`inbox`]) and the stamp guard ([`store`]), each written once over a
//! [`Dialect`](dialect::Dialect) — the SQL that differs between the databases, which
//! delivery-postgres and delivery-sqlite provide. Use it through the `delivery` facade (features
//! `postgres`, `sqlite`); the crate's README shows each, its examples compiled as doc tests of
//! `delivery`.
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod dialect;
pub mod driver;
mod error;
pub mod inbox;
pub mod outbox;
pub mod store;
pub mod table;

/// sqlx 0.9, which the stores run on: the pools, connections and transactions you hand them must
/// be its. Depend on `sqlx = "0.9"` yourself, or name its types through this re-export.
pub use sqlx;
