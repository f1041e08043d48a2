//! What the inbox's stores share: the [`Inbox`] (a consumer and its table), the
//! [`InboxDatabase`] each store implements, the table name's validation, and the cleanup task.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use sqlx::Transaction;

use delivery_core::unit::UnitId;

/// The table an [`Inbox`] keeps its records in unless [`Inbox::table`] names another.
pub const TABLE: &str = "delivery_inbox";

/// The units one consumer has applied, recorded in the consumer's own transactions (see [the
/// module](super)). Cheap to clone.
#[derive(Clone, Debug)]
pub struct Inbox {
    pub(super) consumer: Arc<str>,
    pub(super) table: Table,
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
        &self.table.qualified
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
        DB::record(
            &mut **tx,
            &self.table.qualified,
            &self.consumer,
            id.as_str(),
        )
        .await
    }
}

/// A boxed future, as [`InboxDatabase::record`] returns.
pub type RecordFuture<'a> = Pin<Box<dyn Future<Output = Result<bool, sqlx::Error>> + Send + 'a>>;

/// A database an [`Inbox`] can be kept in: PostgreSQL (feature `postgres`) and SQLite (feature
/// `sqlite`).
pub trait InboxDatabase: sqlx::Database {
    /// Inserts `(consumer, id)` through `conn` (the caller's transaction) unless it is there:
    /// `true` when it inserted.
    #[doc(hidden)]
    fn record<'a>(
        conn: &'a mut Self::Connection,
        table: &'a str,
        consumer: &'a str,
        id: &'a str,
    ) -> RecordFuture<'a>;
}

/// How many records one statement of `retain` deletes: a long cleanup holds no lock for long.
pub(super) const BATCH: i64 = 10_000;

/// Runs `retain` now and then every `every`, until the task is aborted; a failed run is logged.
pub(super) fn cleanup<R, F>(
    inbox: Inbox,
    every: Duration,
    mut retain: R,
) -> tokio::task::JoinHandle<()>
where
    R: FnMut() -> F + Send + 'static,
    F: Future<Output = Result<u64, sqlx::Error>> + Send,
{
    tokio::spawn(async move {
        loop {
            match retain().await {
                Ok(deleted) => tracing::debug!(
                    consumer = &*inbox.consumer,
                    table = &*inbox.table.qualified,
                    deleted,
                    "inbox records past their retention deleted"
                ),
                Err(error) => tracing::warn!(
                    consumer = &*inbox.consumer,
                    table = &*inbox.table.qualified,
                    %error,
                    "could not delete the inbox records past their retention"
                ),
            }
            tokio::time::sleep(every).await;
        }
    })
}

/// A validated table name: `name` or `schema.name`, each an SQL identifier.
#[derive(Clone, Debug)]
pub(super) struct Table {
    /// As written in statements.
    pub(super) qualified: Arc<str>,
    /// The schema (PostgreSQL) or attached database (SQLite), if named.
    pub(super) schema: Option<Arc<str>>,
    /// The unqualified name: index names start with it.
    pub(super) name: Arc<str>,
}

impl Table {
    fn parse(table: &str) -> Option<Table> {
        let ident = |s: &str| {
            let mut chars = s.chars();
            matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
                && s.len() <= 50
        };
        let (schema, name) = match table.split_once('.') {
            Some((schema, name)) if ident(schema) && ident(name) => (Some(schema.into()), name),
            None if ident(table) => (None, table),
            _ => return None,
        };
        Some(Table {
            qualified: table.into(),
            schema,
            name: name.into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{Inbox, Table};

    #[test]
    fn table_names_are_identifiers() {
        let t = Table::parse("app.inbox_2").unwrap();
        assert_eq!(
            (&*t.qualified, t.schema.as_deref(), &*t.name),
            ("app.inbox_2", Some("app"), "inbox_2")
        );
        assert!(Table::parse("delivery_inbox").unwrap().schema.is_none());
        for bad in ["", "1x", "a b", "a;drop", "a.b.c", "a.", ".b", "x\"y"] {
            assert!(Table::parse(bad).is_none(), "{bad:?}");
        }
    }

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
