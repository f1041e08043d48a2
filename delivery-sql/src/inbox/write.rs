//! The inbox's write side: the [`Inbox`] (a consumer and its table) and its record, in the
//! handler's transaction, in every database ([`InboxDatabase`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use sqlx::Transaction;

use delivery_core::unit::UnitId;

use crate::driver::{Exec, Sql, Value};
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
