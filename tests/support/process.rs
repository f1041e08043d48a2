//! Running an example as a child process, for the crash tests: built on demand with the features
//! this test binary was built with (so nothing is rebuilt), stopped with SIGTERM or killed.
#![allow(dead_code)] // each test binary uses part of it

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use sqlx::{
    AssertSqlSafe, ColumnIndex, Database, Decode, Executor, IntoArguments, Pool, Postgres, Row,
    Sqlite, Type,
};

pub fn amqp_url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

pub fn database_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// `url` with the session's `search_path` set to `schema`: what a child process is given, so the
/// unqualified tables of an example land in the test's own schema.
pub fn in_schema(url: &str, schema: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}options=-c%20search_path%3D{schema}")
}

/// The features this test binary was built with, as `cargo build --features` takes them.
fn features() -> String {
    [
        ("lapin", cfg!(feature = "lapin")),
        ("axum", cfg!(feature = "axum")),
        ("postgres", cfg!(feature = "postgres")),
        ("sqlite", cfg!(feature = "sqlite")),
        ("redis", cfg!(feature = "redis")),
        ("nats", cfg!(feature = "nats")),
        ("kafka", cfg!(feature = "kafka")),
        ("http", cfg!(feature = "http")),
    ]
    .iter()
    .filter(|(_, on)| *on)
    .map(|(name, _)| *name)
    .collect::<Vec<_>>()
    .join(",")
}

/// `examples/<name>.rs`, built into this test's own target directory.
pub fn example_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
    let target_dir = profile_dir.parent().unwrap().to_path_buf();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = Command::new(cargo);
    // Without what cargo sets for this test process (its package's manifest directory, name,
    // version...): build scripts that watch one of them (ring's watches `CARGO_MANIFEST_DIR`)
    // would otherwise see it change from the `cargo test` that built the example, and rebuild
    // it and half its dependencies (25 s here) at each switch between the two.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if key.starts_with("CARGO_PKG_")
            || key.starts_with("CARGO_MANIFEST_")
            || [
                "CARGO_CRATE_NAME",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_TARGET_TMPDIR",
            ]
            .contains(&key.as_ref())
        {
            build.env_remove(key.as_ref());
        }
    }
    let status = build
        .args([
            "build",
            "--quiet",
            "--features",
            &features(),
            "--example",
            name,
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("CARGO_TARGET_DIR", &target_dir)
        .status()
        .expect("running cargo build for the example");
    assert!(status.success(), "building examples/{name}.rs failed");
    profile_dir.join("examples").join(name)
}

/// Waits until `check` holds, failing the test after `patience`.
pub async fn wait_for(what: &str, patience: Duration, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + patience;
    while !check().await {
        assert!(
            Instant::now() < deadline,
            "{what}: not reached within {patience:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An example running as a child process, killed (SIGKILL) if the test ends before it stopped,
/// so that a failing test leaves no consumer running behind it. Derefs to the [`Child`].
pub struct Running(pub Child);

impl std::ops::Deref for Running {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Running {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Sends SIGTERM and waits (at most 20 s) for the child to exit.
pub fn terminate(child: &mut Child) -> std::process::ExitStatus {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "the example did not stop within 20 s of SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// An order unit of the examples' contract.
pub fn order(id: &str, customer: &str, amount: i64) -> String {
    format!(r#"{{"order_id":"{id}","customer_id":"{customer}","amount_cents":{amount}}}"#)
}

/// `units` valid orders over `customers` customers, amounts 1 to `max_amount` cents: each as its
/// message id (`m-<i>`) and body (order `o-<i>`), with the balance per customer they add up to.
pub fn orders(
    units: usize,
    customers: usize,
    max_amount: usize,
) -> (Vec<(String, String)>, BTreeMap<String, i64>) {
    let mut expected: BTreeMap<String, i64> = BTreeMap::new();
    let messages = (0..units)
        .map(|i| {
            let customer = format!("c-{}", i % customers);
            let amount = (i % max_amount + 1) as i64;
            *expected.entry(customer.clone()).or_default() += amount;
            (
                format!("m-{i}"),
                order(&format!("o-{i}"), &customer, amount),
            )
        })
        .collect();
    (messages, expected)
}

/// A test environment running an example of the orders contract: its effect tables, read
/// through [`OrdersDb`].
pub trait Orders {
    /// The example's effect tables.
    fn tables(&self) -> OrdersDb<'_>;

    async fn scalar(&self, sql: &str) -> i64 {
        self.tables().scalar(sql).await
    }

    async fn balances(&self) -> BTreeMap<String, i64> {
        self.tables().balances().await
    }

    async fn latest_orders(&self) -> BTreeMap<String, String> {
        self.tables().latest_orders().await
    }

    async fn confirmations(&self) -> BTreeMap<String, i64> {
        self.tables().confirmations().await
    }
}

/// The effect tables of the examples' orders contract (`examples/support/orders.rs`), in a test's
/// own schema of a PostgreSQL database or in a SQLite file.
pub enum OrdersDb<'a> {
    /// In the schema `schema`.
    Postgres {
        db: &'a sqlx::PgPool,
        schema: &'a str,
    },
    /// In a SQLite file (its schema `main`).
    Sqlite(&'a sqlx::SqlitePool),
}

impl OrdersDb<'_> {
    /// The first column of the first row of `sql` (`$schema` replaced by the schema), `-1` while
    /// the example has not created its tables.
    pub async fn scalar(&self, sql: &str) -> i64 {
        let found = match *self {
            OrdersDb::Postgres { db, schema } => first(db, sql.replace("$schema", schema)).await,
            OrdersDb::Sqlite(db) => first(db, sql.replace("$schema", "main")).await,
        };
        // `None`: the example has not created its tables yet.
        found.unwrap_or(-1)
    }

    /// Each customer's balance.
    pub async fn balances(&self) -> BTreeMap<String, i64> {
        self.pairs("customer_id, total_cents", "balances").await
    }

    /// Each customer's latest order, as the stamp guard let the example store it.
    pub async fn latest_orders(&self) -> BTreeMap<String, String> {
        self.pairs("customer_id, order_id", "latest_orders").await
    }

    /// The confirmations counted per customer.
    pub async fn confirmations(&self) -> BTreeMap<String, i64> {
        self.pairs("customer_id, sent", "confirmations").await
    }

    async fn pairs<V>(&self, columns: &str, table: &str) -> BTreeMap<String, V>
    where
        V: for<'r> Decode<'r, Postgres> + Type<Postgres>,
        V: for<'r> Decode<'r, Sqlite> + Type<Sqlite>,
    {
        match *self {
            OrdersDb::Postgres { db, schema } => {
                pairs(db, format!("SELECT {columns} FROM {schema}.{table}")).await
            }
            OrdersDb::Sqlite(db) => pairs(db, format!("SELECT {columns} FROM {table}")).await,
        }
    }
}

/// The first column of the first row of `sql` (0 for `NULL`), `None` when the query fails.
async fn first<DB: Database>(db: &Pool<DB>, sql: String) -> Option<i64>
where
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
    usize: ColumnIndex<DB::Row>,
    Option<i64>: for<'r> Decode<'r, DB> + Type<DB>,
{
    let row = sqlx::query(AssertSqlSafe(sql)).fetch_one(db).await.ok()?;
    Some(row.try_get::<Option<i64>, _>(0).unwrap().unwrap_or(0))
}

/// The rows of `sql` as `(first column, second column)`.
async fn pairs<DB: Database, V>(db: &Pool<DB>, sql: String) -> BTreeMap<String, V>
where
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
    usize: ColumnIndex<DB::Row>,
    String: for<'r> Decode<'r, DB> + Type<DB>,
    V: for<'r> Decode<'r, DB> + Type<DB>,
{
    sqlx::query(AssertSqlSafe(sql))
        .fetch_all(db)
        .await
        .unwrap()
        .into_iter()
        .map(|row| (row.get::<String, _>(0), row.get::<V, _>(1)))
        .collect()
}
