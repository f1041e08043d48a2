//! The store guard of rule 4: arrival order is not the record's order, so a store applies a keyed
//! write only if the unit's [`Stamp`](delivery_core::Stamp) is newer than the one it already holds for
//! that key.
//!
//! The guard keeps one row per key — `(scope, key, stamp)` in the `delivery_stamps` table — and
//! [`postgres::advance`] / [`sqlite::advance`] move a key's stamp forward in one statement, in the
//! caller's transaction, returning whether it moved. The caller writes its own row only when it
//! did; when it did not, the store already holds this unit or a newer one, and the handler returns
//! `Ok` (the unit is acknowledged, nothing changes). Because the stamp and the write commit
//! together, a crash between them changes nothing either.
//!
//! ```no_run
//! # #[cfg(feature = "postgres")]
//! # async fn handle(pool: sqlx::PgPool, stamp: delivery::Stamp) -> Result<(), sqlx::Error> {
//! use delivery::store::postgres;
//!
//! let mut tx = pool.begin().await?;
//! if postgres::advance(&mut tx, "latest_orders", "o-1", stamp).await? {
//!     sqlx::query("INSERT INTO latest_orders (id, status) VALUES ('o-1', 'shipped') \
//!                  ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status")
//!         .execute(&mut *tx)
//!         .await?;
//! }
//! tx.commit().await?;
//! # Ok(()) }
//! ```
//!
//! Two units of one key handled at once serialize on the key's stamp row: the second waits for
//! the first's transaction, then compares against what it committed.

#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "sqlite")]
pub mod sqlite;

/// The table the guard keeps its stamps in.
pub const TABLE: &str = "delivery_stamps";

/// A stamp as the stores keep it (`BIGINT`): stamps past `i64::MAX` are refused, in one message
/// (an `Encode` error would print it twice, as itself and as its source). A handler taking
/// [`Stamp`](delivery_core::Stamp) never gets here with one: its unit is malformed, dead-lettered at once.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
fn stored(stamp: delivery_core::Stamp) -> Result<i64, sqlx::Error> {
    i64::try_from(stamp.0).map_err(|_| {
        sqlx::Error::InvalidArgument(format!(
            "stamp {stamp} is out of range: the guard's BIGINT column holds at most i64::MAX"
        ))
    })
}
