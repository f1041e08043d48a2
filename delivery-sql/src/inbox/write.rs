//! The inbox's write side: the [`Inbox`] (a consumer and its table) and its record, in the
//! handler's transaction, in every database ([`InboxDatabase`]).

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use sqlx::Transaction;

use delivery_core::unit::UnitId;

use crate::driver::{Exec, Sql, Value, rows_per_statement, value_rows};
use crate::table::Table;

/// The table an [`Inbox`] keeps its records in unless [`Inbox::table`] names another.
pub const TABLE: &str = "delivery_inbox";

/// The units one consumer has applied, recorded in the consumer's own transactions (see [the
/// module](super)). Cheap to clone.
#[derive(Clone, Debug)]
pub struct Inbox {
    pub(crate) consumer: Arc<str>,
    pub(crate) table: Table,
}

impl Inbox {
    /// The inbox of the consumer named `consumer` (a stable name: `"billing"`, the queue it
    /// reads), in the table `delivery_inbox`.
    pub fn new(consumer: impl Into<Arc<str>>) -> Self {
        Inbox {
            consumer: consumer.into(),
            table: Table::parse(TABLE).expect("the default table is an identifier"),
        }
    }

    /// Keeps the records in `table` (`name` or `schema.name`) instead of `delivery_inbox`.
    ///
    /// # Panics
    /// When `table` is not an SQL identifier (ASCII letters, digits and `_`, not starting with a
    /// digit, at most 50 characters), optionally qualified by a schema: the name is written into
    /// statements, so it is checked here, where it is configuration, never at run time.
    pub fn table(mut self, table: &str) -> Self {
        match Table::parse(table) {
            Some(parsed) => self.table = parsed,
            None => panic!(
                "inbox table name {table:?} is not an SQL identifier (letters, digits, `_`, optionally `schema.name`)"
            ),
        }
        self
    }

    /// The consumer's name.
    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// The table the records are kept in.
    pub fn table_name(&self) -> &str {
        self.table.qualified()
    }

    /// Records `id` as applied by this consumer, in the caller's transaction, and says whether
    /// this is its first time: `true` — apply the unit's effect in `tx`, then commit; `false` —
    /// the unit was already applied: write nothing and return `Ok`.
    ///
    /// The record commits with `tx` or not at all: a transaction that rolls back leaves the unit
    /// unapplied, and its redelivery gets `true`. A concurrent transaction recording the same id
    /// waits for this one to end (see [concurrent deliveries](super#concurrent-deliveries)).
    pub async fn first_time<DB: InboxDatabase>(
        &self,
        tx: &mut Transaction<'_, DB>,
        id: &UnitId,
    ) -> Result<bool, sqlx::Error> {
        // The table name was validated as an identifier when the inbox was built. A
        // concurrent transaction inserting the same key makes this one wait until it ends
        // (PostgreSQL: on the primary key; SQLite: for the database's write lock, up to the busy
        // timeout): committed, a conflict (nothing inserted); rolled back, inserted.
        let sql = format!(
            "INSERT INTO {} (consumer, unit_id) VALUES ($1, $2) \
             ON CONFLICT (consumer, unit_id) DO NOTHING",
            self.table.qualified()
        );
        let args = DB::arguments(&[Value::Text(&self.consumer), Value::Text(id.as_str())])?;
        let inserted = DB::execute(Exec::Conn(&mut **tx), &sql, args).await?;
        Ok(inserted == 1)
    }

    /// Records every id of `ids` as applied by this consumer, in the caller's transaction, and
    /// returns those recorded now, the first time: [`first_time`](Self::first_time) for a batch
    /// of units, in one `INSERT … ON CONFLICT DO NOTHING RETURNING` (one per
    /// [`MAX_PARAMETERS`](Sql::MAX_PARAMETERS) of ids). Apply the effect of the units it
    /// returns, in `tx`, then commit; the others were already applied. An id given twice is
    /// recorded once, and returned once if that is its first time.
    ///
    /// The ids are inserted in their sorted order, so two transactions recording overlapping
    /// batches at once take the same order on the keys they share: the second waits for the
    /// first to end (as with `first_time`), and neither waits on the other in a circle.
    ///
    /// ```no_run
    /// # async fn handle(pool: sqlx::PgPool, ids: Vec<delivery::UnitId>) -> Result<(), sqlx::Error> {
    /// use delivery::inbox::Inbox;
    /// let inbox = Inbox::new("notifications");
    /// let mut tx = pool.begin().await?;
    /// let first = inbox.first_times(&mut tx, &ids).await?;
    /// for id in ids.iter().filter(|id| first.contains(*id)) {
    ///     // this unit's effect, once
    /// }
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    pub async fn first_times<DB: InboxDatabase>(
        &self,
        tx: &mut Transaction<'_, DB>,
        ids: &[UnitId],
    ) -> Result<HashSet<UnitId>, sqlx::Error> {
        let given: BTreeMap<&str, &UnitId> = ids.iter().map(|id| (id.as_str(), id)).collect();
        let sorted: Vec<&str> = given.keys().copied().collect();
        let mut first = HashSet::with_capacity(sorted.len());
        for chunk in sorted.chunks(rows_per_statement::<DB>(1, 1)) {
            // The table name was validated as an identifier when the inbox was built.
            let sql = format!(
                "INSERT INTO {} (consumer, unit_id) VALUES {} \
                 ON CONFLICT (consumer, unit_id) DO NOTHING RETURNING unit_id",
                self.table.qualified(),
                value_rows(chunk.len(), 1, 1)
            );
            let mut values = Vec::with_capacity(chunk.len() + 1);
            values.push(Value::Text(&self.consumer));
            values.extend(chunk.iter().map(|id| Value::Text(id)));
            let args = DB::arguments(&values)?;
            for row in DB::fetch_all(Exec::Conn(&mut **tx), &sql, args).await? {
                let id = DB::text(&row, "unit_id")?;
                let id = match given.get(id.as_str()) {
                    Some(given) => (*given).clone(),
                    None => UnitId::new(id),
                };
                first.insert(id);
            }
        }
        Ok(first)
    }
}

/// A boxed future of a record, for code that names one.
pub type RecordFuture<'a> = Pin<Box<dyn Future<Output = Result<bool, sqlx::Error>> + Send + 'a>>;

/// A database an [`Inbox`] can be kept in: PostgreSQL (feature `postgres`) and SQLite (feature
/// `sqlite`), each with one `INSERT … ON CONFLICT DO NOTHING`, the same in both.
pub trait InboxDatabase: Sql {}

impl<DB: Sql> InboxDatabase for DB {}

#[cfg(test)]
mod tests {
    use super::Inbox;

    #[test]
    fn defaults() {
        let inbox = Inbox::new("billing");
        assert_eq!(inbox.consumer(), "billing");
        assert_eq!(inbox.table_name(), "delivery_inbox");
        assert_eq!(inbox.table("ops.seen").table_name(), "ops.seen");
    }

    #[test]
    #[should_panic(expected = "not an SQL identifier")]
    fn a_table_name_that_is_not_an_identifier_panics() {
        let _ = Inbox::new("billing").table("inbox; DROP TABLE x");
    }
}
