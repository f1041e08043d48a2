//! What the PostgreSQL and SQLite crates of [`delivery`](https://docs.rs/delivery) share,
//! through sqlx 0.9: the outbox written in your own transaction and the store a relay claims from
//! ([`outbox`]), the durable queue ([`queue`]), the inbox ([`inbox`]) and the stamp guard ([`store`]), each written once over a
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
pub mod queue;
pub mod store;
pub mod table;

/// The names a database's crate exports, in the dialect `$dialect` whose sqlx connection is
/// `$connection`: `$Store` (the outbox store), `$Inbox` (the inbox's table), `$Queue` and `$Tx`
/// (the queue and its transaction) and `pub mod store`
/// ([`store::migrate`], [`store::advance`] and [`store::advance_all`] for its connections, so that `advance(&mut tx, ..)`
/// takes a transaction or a pool's connection as it is), and the modules `outbox` and `inbox`.
#[macro_export]
#[doc(hidden)]
macro_rules! database {
    ($dialect:ty, $connection:ty, $Store:ident, $Inbox:ident, $Queue:ident, $Tx:ident, $name:literal) => {
        pub use $crate::{inbox, outbox, queue};

        #[doc = concat!("A durable queue in ", $name, ": its migration, publisher and consumers' source.")]
        pub type $Queue = $crate::queue::SqlQueue<$dialect>;

        #[doc = concat!("The unit's transaction in ", $name, ", as a handler parameter: the effect and the acknowledgement commit together.")]
        pub type $Tx = $crate::queue::Tx<<$dialect as $crate::dialect::Dialect>::Database>;

        #[doc = concat!("An outbox table in ", $name, ": what a `Relayer` relays from, and an operator's view of it (dead records, re-queue).")]
        pub type $Store = $crate::outbox::SqlStore<$dialect>;

        #[doc = concat!("An `Inbox`'s table in ", $name, ": its migration and its retention.")]
        pub type $Inbox = $crate::inbox::SqlInbox<$dialect>;

        /// The stamp guard of rule 4 in this database: [`delivery_sql::store`] for its
        /// connections.
        pub mod store {
            pub use $crate::store::TABLE;

            /// Creates the guard's table if it does not exist
            /// ([`delivery_sql::store::migrate`]). Safe to run at every start.
            pub async fn migrate(conn: &mut $connection) -> Result<(), ::sqlx::Error> {
                $crate::store::migrate::<$dialect>(conn).await
            }

            /// Moves `key`'s stamp (in `scope`) to `stamp` if `stamp` is newer than the one
            /// stored, in the caller's transaction ([`delivery_sql::store::advance`]).
            pub async fn advance(
                conn: &mut $connection,
                scope: &str,
                key: &str,
                stamp: ::delivery_core::unit::Stamp,
            ) -> Result<bool, ::sqlx::Error> {
                $crate::store::advance::<<$dialect as $crate::dialect::Dialect>::Database>(
                    conn, scope, key, stamp,
                )
                .await
            }

            /// Moves each key's stamp (in `scope`) to its stamp in `stamps` where that is newer,
            /// in one statement, in the caller's transaction, and returns the keys that moved
            /// ([`delivery_sql::store::advance_all`]).
            pub async fn advance_all<K: AsRef<str>>(
                conn: &mut $connection,
                scope: &str,
                stamps: &[(K, ::delivery_core::unit::Stamp)],
            ) -> Result<::std::collections::HashSet<String>, ::sqlx::Error> {
                $crate::store::advance_all::<<$dialect as $crate::dialect::Dialect>::Database, K>(
                    conn, scope, stamps,
                )
                .await
            }
        }
    };
}

/// sqlx 0.9, which the stores run on: the pools, connections and transactions you hand them must
/// be its. Depend on `sqlx = "0.9"` yourself, or name its types through this re-export.
pub use sqlx;
