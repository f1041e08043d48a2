//! sqlx's databases as the shared code drives them: a statement's text with its parameters in,
//! rows affected or rows out, and a row's columns read as the outbox, the inbox and the guard
//! keep them. Written once (the macro `driver!`) for every database sqlx's driver of it is compiled for
//! (features `postgres`, `sqlite`); the SQL text itself is each dialect's
//! ([`Dialect`](crate::dialect::Dialect)).

use futures_util::future::BoxFuture;
use sqlx::{Database, Pool};

/// A parameter of a statement, in the types every database here takes.
#[derive(Clone, Copy, Debug)]
pub enum Value<'a> {
    /// `TEXT`.
    Text(&'a str),
    /// `TEXT`, or `NULL`.
    OptText(Option<&'a str>),
    /// `BYTEA` / `BLOB`.
    Bytes(&'a [u8]),
    /// `BIGINT`.
    Int(i64),
    /// `DOUBLE PRECISION` / `REAL`.
    Float(f64),
}

/// Where a statement runs: the store's pool, or a connection of the caller's (its transaction).
#[derive(Debug)]
pub enum Exec<'e, DB: Database> {
    /// A connection from the pool, for this statement.
    Pool(&'e Pool<DB>),
    /// The caller's connection or transaction.
    Conn(&'e mut DB::Connection),
}

/// A database the stores run on: sqlx's `Postgres` and `Sqlite`. Implemented by this crate
/// alone, once per driver.
pub trait Sql: Database {
    /// The most parameters one statement takes: PostgreSQL's 65 535 (its protocol counts them
    /// in 16 bits); SQLite's 999, its limit before 3.32 and in builds that keep it (later
    /// versions take 32 766), so that a statement fits any build sqlx links.
    const MAX_PARAMETERS: usize;

    /// Adds `value` after the parameters already in `args`.
    fn add(args: &mut Self::Arguments, value: Value<'_>) -> Result<(), sqlx::Error>;

    /// `values` as one statement's parameters, in order (`$1`, `$2`, …).
    fn arguments(values: &[Value<'_>]) -> Result<Self::Arguments, sqlx::Error> {
        let mut args = Self::Arguments::default();
        for value in values {
            Self::add(&mut args, *value)?;
        }
        Ok(args)
    }

    /// Runs `sql` and returns how many rows it changed.
    fn execute<'e>(
        exec: Exec<'e, Self>,
        sql: &'e str,
        args: Self::Arguments,
    ) -> BoxFuture<'e, Result<u64, sqlx::Error>>;

    /// Runs `sql` and returns its rows.
    fn fetch_all<'e>(
        exec: Exec<'e, Self>,
        sql: &'e str,
        args: Self::Arguments,
    ) -> BoxFuture<'e, Result<Vec<Self::Row>, sqlx::Error>>;

    /// Runs `sql` and returns its first row, if any.
    fn fetch_optional<'e>(
        exec: Exec<'e, Self>,
        sql: &'e str,
        args: Self::Arguments,
    ) -> BoxFuture<'e, Result<Option<Self::Row>, sqlx::Error>>;

    /// Runs the statements `sql`, unprepared and without parameters (a migration).
    fn run_script<'e>(exec: Exec<'e, Self>, sql: String) -> BoxFuture<'e, Result<(), sqlx::Error>>;

    /// The `BIGINT` column `column`.
    fn int(row: &Self::Row, column: &str) -> Result<i64, sqlx::Error>;
    /// The floating-point column `column`, or `NULL`.
    fn opt_float(row: &Self::Row, column: &str) -> Result<Option<f64>, sqlx::Error>;
    /// The boolean column `column` (an integer in SQLite).
    fn boolean(row: &Self::Row, column: &str) -> Result<bool, sqlx::Error>;
    /// The text column `column`.
    fn text(row: &Self::Row, column: &str) -> Result<String, sqlx::Error>;
    /// The text column `column`, or `NULL`.
    fn opt_text(row: &Self::Row, column: &str) -> Result<Option<String>, sqlx::Error>;
    /// The bytes column `column`.
    fn bytes(row: &Self::Row, column: &str) -> Result<Vec<u8>, sqlx::Error>;
    /// The `INTEGER` column `column` (`attempts`) as a count: never below 0, at most `u32::MAX`.
    fn count(row: &Self::Row, column: &str) -> Result<u32, sqlx::Error>;
}

/// The `VALUES` list of a multi-row statement: `rows` rows, each the parameters `$1` to
/// `$shared` (the same in every row: a scope, a consumer) followed by `own` parameters of its
/// own, numbered on in row order. `value_rows(2, 1, 2)` is `($1, $2, $3), ($1, $4, $5)`.
pub(crate) fn value_rows(rows: usize, shared: usize, own: usize) -> String {
    let mut sql = String::with_capacity(rows * (4 + 5 * (shared + own)));
    for row in 0..rows {
        if row > 0 {
            sql.push_str(", ");
        }
        sql.push('(');
        let own_params = (0..own).map(|k| shared + row * own + k + 1);
        for (i, n) in (1..=shared).chain(own_params).enumerate() {
            if i > 0 {
                sql.push_str(", ");
            }
            sql.push('$');
            sql.push_str(&n.to_string());
        }
        sql.push(')');
    }
    sql
}

/// How many rows of `own` parameters each, after `shared` parameters, one statement in `DB`
/// takes ([`Sql::MAX_PARAMETERS`]).
pub(crate) fn rows_per_statement<DB: Sql>(shared: usize, own: usize) -> usize {
    ((DB::MAX_PARAMETERS - shared) / own).max(1)
}

/// [`Sql`] for `$db`, whose `INTEGER` columns decode as `$integer` and whose statements take at
/// most `$max_parameters` parameters.
macro_rules! driver {
    ($db:ty, $integer:ty, $max_parameters:expr) => {
        impl Sql for $db {
            const MAX_PARAMETERS: usize = $max_parameters;

            fn add(args: &mut Self::Arguments, value: Value<'_>) -> Result<(), sqlx::Error> {
                use sqlx::Arguments as _;
                match value {
                    Value::Text(v) => args.add(v),
                    Value::OptText(v) => args.add(v),
                    Value::Bytes(v) => args.add(v),
                    Value::Int(v) => args.add(v),
                    Value::Float(v) => args.add(v),
                }
                .map_err(sqlx::Error::Encode)
            }

            fn execute<'e>(
                exec: Exec<'e, Self>,
                sql: &'e str,
                args: Self::Arguments,
            ) -> BoxFuture<'e, Result<u64, sqlx::Error>> {
                let query = sqlx::query_with(sqlx::AssertSqlSafe(sql), args);
                Box::pin(async move {
                    let done = match exec {
                        Exec::Pool(pool) => query.execute(pool).await?,
                        Exec::Conn(conn) => query.execute(conn).await?,
                    };
                    Ok(done.rows_affected())
                })
            }

            fn fetch_all<'e>(
                exec: Exec<'e, Self>,
                sql: &'e str,
                args: Self::Arguments,
            ) -> BoxFuture<'e, Result<Vec<Self::Row>, sqlx::Error>> {
                let query = sqlx::query_with(sqlx::AssertSqlSafe(sql), args);
                Box::pin(async move {
                    match exec {
                        Exec::Pool(pool) => query.fetch_all(pool).await,
                        Exec::Conn(conn) => query.fetch_all(conn).await,
                    }
                })
            }

            fn fetch_optional<'e>(
                exec: Exec<'e, Self>,
                sql: &'e str,
                args: Self::Arguments,
            ) -> BoxFuture<'e, Result<Option<Self::Row>, sqlx::Error>> {
                let query = sqlx::query_with(sqlx::AssertSqlSafe(sql), args);
                Box::pin(async move {
                    match exec {
                        Exec::Pool(pool) => query.fetch_optional(pool).await,
                        Exec::Conn(conn) => query.fetch_optional(conn).await,
                    }
                })
            }

            fn run_script<'e>(
                exec: Exec<'e, Self>,
                sql: String,
            ) -> BoxFuture<'e, Result<(), sqlx::Error>> {
                let script = sqlx::raw_sql(sqlx::AssertSqlSafe(sql));
                Box::pin(async move {
                    match exec {
                        Exec::Pool(pool) => script.execute(pool).await?,
                        Exec::Conn(conn) => script.execute(conn).await?,
                    };
                    Ok(())
                })
            }

            fn int(row: &Self::Row, column: &str) -> Result<i64, sqlx::Error> {
                sqlx::Row::try_get(row, column)
            }

            fn opt_float(row: &Self::Row, column: &str) -> Result<Option<f64>, sqlx::Error> {
                sqlx::Row::try_get(row, column)
            }

            fn boolean(row: &Self::Row, column: &str) -> Result<bool, sqlx::Error> {
                sqlx::Row::try_get(row, column)
            }

            fn text(row: &Self::Row, column: &str) -> Result<String, sqlx::Error> {
                sqlx::Row::try_get(row, column)
            }

            fn opt_text(row: &Self::Row, column: &str) -> Result<Option<String>, sqlx::Error> {
                sqlx::Row::try_get(row, column)
            }

            fn bytes(row: &Self::Row, column: &str) -> Result<Vec<u8>, sqlx::Error> {
                sqlx::Row::try_get(row, column)
            }

            fn count(row: &Self::Row, column: &str) -> Result<u32, sqlx::Error> {
                let n: $integer = sqlx::Row::try_get(row, column)?;
                Ok(i64::from(n).clamp(0, u32::MAX.into()) as u32)
            }
        }
    };
}

#[cfg(feature = "postgres")]
driver!(sqlx::Postgres, i32, u16::MAX as usize);
#[cfg(feature = "sqlite")]
driver!(sqlx::Sqlite, i64, 999);

#[cfg(test)]
mod tests {
    use super::value_rows;

    #[test]
    fn value_rows_number_each_rows_parameters_after_the_shared_ones() {
        assert_eq!(value_rows(1, 1, 1), "($1, $2)");
        assert_eq!(value_rows(3, 1, 1), "($1, $2), ($1, $3), ($1, $4)");
        assert_eq!(value_rows(2, 1, 2), "($1, $2, $3), ($1, $4, $5)");
        assert_eq!(value_rows(2, 0, 2), "($1, $2), ($3, $4)");
    }
}
