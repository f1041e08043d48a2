//! The store guard in SQLite (see [the module](super)).

use sqlx::SqliteConnection;

use delivery_core::unit::Stamp;

/// Creates the guard's table if it does not exist. Safe to run at every start.
pub async fn migrate(conn: &mut SqliteConnection) -> Result<(), sqlx::Error> {
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS delivery_stamps ( \
           scope TEXT NOT NULL, key TEXT NOT NULL, stamp BIGINT NOT NULL, \
           PRIMARY KEY (scope, key))",
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Moves `key`'s stamp (in `scope`, usually the table the caller writes) to `stamp` if `stamp` is
/// newer than the one stored, in the caller's transaction: `true` when it did (write the unit's
/// state), `false` when the store already holds this stamp or a newer one (write nothing; the
/// unit is handled).
///
/// ```no_run
/// # async fn handle(pool: sqlx::SqlitePool) -> Result<(), sqlx::Error> {
/// use delivery::{Stamp, store::sqlite};
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
    let moved = sqlx::query(
        "INSERT INTO delivery_stamps (scope, key, stamp) VALUES (?1, ?2, ?3) \
         ON CONFLICT (scope, key) DO UPDATE SET stamp = EXCLUDED.stamp \
         WHERE delivery_stamps.stamp < EXCLUDED.stamp \
         RETURNING 1",
    )
    .bind(scope)
    .bind(key)
    .bind(super::stored(stamp)?)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(moved.is_some())
}
