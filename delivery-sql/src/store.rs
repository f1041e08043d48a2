//! The store guard of rule 4: arrival order is not the record's order, so a store applies a keyed
//! write only if the unit's [`Stamp`] is newer than the one it already holds for
//! that key.
//!
//! The guard keeps one row per key — `(scope, key, stamp)` in the `delivery_stamps` table — and
//! [`advance`] (`delivery::store::postgres::advance`, `delivery::store::sqlite::advance`) moves a
//! key's stamp forward in one statement, in the
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
//!
//! A batch of units moves its keys at once with [`advance_all`] (`store::postgres::advance_all`,
//! `store::sqlite::advance_all`): one statement for every key, which returns the keys that moved.

use std::collections::{BTreeMap, HashSet};

use sqlx::Database;

use delivery_core::unit::Stamp;

use crate::dialect::Dialect;
use crate::driver::{Exec, Sql, Value, rows_per_statement, value_rows};

/// The table the guard keeps its stamps in.
pub const TABLE: &str = "delivery_stamps";

/// Creates the guard's table if it does not exist, through `conn` (in a transaction of its own,
/// nested in the caller's if `conn` is in one). Safe to run at every start, from several
/// processes at once.
pub async fn migrate<D: Dialect>(
    conn: &mut <D::Database as Database>::Connection,
) -> Result<(), sqlx::Error> {
    let mut tx = sqlx::Connection::begin(conn).await?;
    D::lock(&mut *tx, TABLE).await?;
    let sql = "CREATE TABLE IF NOT EXISTS delivery_stamps ( \
                 scope TEXT NOT NULL, key TEXT NOT NULL, stamp BIGINT NOT NULL, \
                 PRIMARY KEY (scope, key))";
    D::Database::run_script(Exec::Conn(&mut *tx), sql.to_owned()).await?;
    tx.commit().await
}

/// Moves `key`'s stamp (in `scope`, usually the table the caller writes) to `stamp` if `stamp` is
/// newer than the one stored, in the caller's transaction: `true` when it did (write the unit's
/// state), `false` when the store already holds this stamp or a newer one (write nothing; the
/// unit is handled). One statement, the same in PostgreSQL and SQLite.
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
pub async fn advance<DB: Sql>(
    conn: &mut DB::Connection,
    scope: &str,
    key: &str,
    stamp: Stamp,
) -> Result<bool, sqlx::Error> {
    let args = DB::arguments(&[
        Value::Text(scope),
        Value::Text(key),
        Value::Int(stored(stamp)?),
    ])?;
    let sql = "INSERT INTO delivery_stamps (scope, key, stamp) VALUES ($1, $2, $3) \
               ON CONFLICT (scope, key) DO UPDATE SET stamp = EXCLUDED.stamp \
               WHERE delivery_stamps.stamp < EXCLUDED.stamp \
               RETURNING 1";
    let moved = DB::fetch_optional(Exec::Conn(conn), sql, args).await?;
    Ok(moved.is_some())
}

/// [`advance`] for many keys at once, in one statement, in the caller's transaction: moves each
/// key's stamp (in `scope`) to its stamp in `stamps` where that is newer than the one stored, and
/// returns the keys that moved (write their state; write nothing for the others).
///
/// A key given more than once counts with its highest stamp (PostgreSQL refuses to update one
/// row twice in a statement, and the highest is what advancing through each in turn would leave).
/// The keys are written in their sorted order, so two transactions moving overlapping keys at
/// once lock the keys they share in the same order: the second waits for the first to end, as
/// with `advance`, and neither waits on the other in a circle (a deadlock). One statement per
/// [`MAX_PARAMETERS`](Sql::MAX_PARAMETERS) of keys.
///
/// ```no_run
/// # async fn handle(pool: sqlx::PgPool) -> Result<(), sqlx::Error> {
/// use delivery::{Stamp, store::postgres};
/// let mut tx = pool.begin().await?;
/// let moved = postgres::advance_all(&mut tx, "latest_orders", &[("c-1", Stamp(7)), ("c-2", Stamp(3))]).await?;
/// if moved.contains("c-1") {
///     // write c-1's latest state
/// }
/// tx.commit().await?;
/// # Ok(()) }
/// ```
pub async fn advance_all<DB: Sql, K: AsRef<str>>(
    conn: &mut DB::Connection,
    scope: &str,
    stamps: &[(K, Stamp)],
) -> Result<HashSet<String>, sqlx::Error> {
    let mut highest: BTreeMap<&str, i64> = BTreeMap::new();
    for (key, stamp) in stamps {
        let stamp = stored(*stamp)?;
        let kept = highest.entry(key.as_ref()).or_insert(stamp);
        *kept = (*kept).max(stamp);
    }
    let rows: Vec<(&str, i64)> = highest.into_iter().collect();
    let mut moved = HashSet::with_capacity(rows.len());
    for chunk in rows.chunks(rows_per_statement::<DB>(1, 2)) {
        let sql = format!(
            "INSERT INTO delivery_stamps (scope, key, stamp) VALUES {} \
             ON CONFLICT (scope, key) DO UPDATE SET stamp = EXCLUDED.stamp \
             WHERE delivery_stamps.stamp < EXCLUDED.stamp \
             RETURNING key",
            value_rows(chunk.len(), 1, 2)
        );
        let mut values = Vec::with_capacity(1 + 2 * chunk.len());
        values.push(Value::Text(scope));
        for (key, stamp) in chunk {
            values.extend([Value::Text(key), Value::Int(*stamp)]);
        }
        let args = DB::arguments(&values)?;
        for row in DB::fetch_all(Exec::Conn(&mut *conn), &sql, args).await? {
            moved.insert(DB::text(&row, "key")?);
        }
    }
    Ok(moved)
}

/// A stamp as the stores keep it (`BIGINT`): stamps past `i64::MAX` are refused, in one message
/// (an `Encode` error would print it twice, as itself and as its source). A handler taking
/// [`Stamp`] never gets here with one: its unit is malformed, dead-lettered at once.
fn stored(stamp: Stamp) -> Result<i64, sqlx::Error> {
    i64::try_from(stamp.0).map_err(|_| {
        sqlx::Error::InvalidArgument(format!(
            "stamp {stamp} is out of range: the guard's BIGINT column holds at most i64::MAX"
        ))
    })
}
