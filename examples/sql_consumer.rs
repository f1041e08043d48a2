//! A consumer of a durable queue in the service's own database, PostgreSQL or a SQLite file: the
//! orders contract, with each unit's acknowledgement committed in the same transaction as its
//! effect.
//!
//!     cargo run --features postgres --example sql_consumer
//!     DATABASE_URL=sqlite://orders.db cargo run --features postgres,sqlite --example sql_consumer
//!
//! Env: `DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/test`; `sqlite://FILE` for a
//! SQLite file, with the feature `sqlite`), `QUEUE` (default `orders`: the table
//! `delivery_queue_orders`), `DELIVERY_LIMIT` (default 5), `BATCH` (units a claim takes; default
//! 32), `CONCURRENCY` (default 16 in PostgreSQL, 4 in SQLite), `VISIBILITY_MS` (how long a claimed
//! unit stays invisible to other consumers; kept alive while its handler runs; default 30000),
//! `EFFECT_DELAY_MS` (a pause after the effect and before the commit, to widen the window a crash
//! can hit; default 0), `BUSY_TIMEOUT_MS` (SQLite: how long a statement waits for a lock another
//! connection holds before it fails with `SQLITE_BUSY`; default 5000).
//!
//! On start it creates the queue's table and the tables of the orders contract (`orders`,
//! `balances`, `latest_orders`, `confirmations`). Each unit is
//! `{"order_id": str, "customer_id": str, "amount_cents": int}`, published with
//! `Queue::publish` in the producer's transaction (or a plain `INSERT`; see `delivery::queue`).
//! In the unit's own transaction (`PgTx`, `SqliteTx`) the order is inserted (nothing if its id
//! exists) and, only if inserted, its amount is added to the customer's balance; the customer's
//! latest order is replaced only by a unit with a newer stamp (rule 4: the row's sequence); and a
//! confirmation is counted for the customer — an effect with no natural key, applied exactly once
//! per unit with no inbox, because the unit's acknowledgement commits in that same transaction:
//! a crash, a failure or a database outage before the commit rolls back both. Malformed units and
//! negative amounts go to the dead letter (the queue table's `dead` rows) directly. Runs until
//! SIGINT or SIGTERM, then shuts down gracefully.
//!
//! A SQLite file is created if missing and opened in WAL mode (readers do not wait for the
//! writer). SQLite has one writer: each unit's transaction begins with `BEGIN IMMEDIATE`, taking
//! the write lock for the whole of its handler, so the handlers take turns and the natural
//! concurrency is one transaction at a time; a few handlers keep the next unit ready while one
//! writes, more only queue behind the lock (each waiting up to `BUSY_TIMEOUT_MS`). One consumer
//! process per file.

use std::time::Duration;

use delivery::dead_letter::DeadLetters;
use delivery::handler::Handler;
use delivery::outbox::PgStore;
use delivery::queue::{PgTx, Queue};
use delivery::transport::Source;
use delivery::{Consumer, HandlerError, Json, Stamp, State, consumer};
use sqlx::Postgres;
use sqlx::postgres::PgPoolOptions;

#[path = "support/env.rs"]
mod env;
use env::{env_num, env_or, shutdown_signal};
#[path = "support/orders.rs"]
mod orders;
use orders::OrderPlaced;

#[derive(Clone)]
struct App {
    /// A pause after the effect, before the commit (0 in production).
    effect_delay: Duration,
}

impl App {
    async fn pause(&self) {
        if !self.effect_delay.is_zero() {
            tokio::time::sleep(self.effect_delay).await;
        }
    }
}

/// Applies one order in the unit's transaction (the effect of `support/orders.rs`): the runtime
/// commits it with the unit's acknowledgement once this returns `Ok`, and rolls it back
/// otherwise. The confirmation, with no natural key, needs no inbox: it commits with the
/// acknowledgement, so it is counted once per unit.
#[consumer]
async fn apply_order(
    State(app): State<App>,
    stamp: Stamp,
    Json(order): Json<OrderPlaced>,
    mut tx: PgTx,
) -> Result<(), HandlerError> {
    orders::refuse_negative(&order)?;
    orders::apply::<Postgres>(&mut tx, &order, stamp).await?;
    orders::confirm::<Postgres>(&mut tx, &order).await?;
    app.pause().await;
    Ok(())
}

/// [`apply_order`] in SQLite: the same effect, in the unit's SQLite transaction.
#[cfg(feature = "sqlite")]
#[consumer]
async fn apply_order_sqlite(
    State(app): State<App>,
    stamp: Stamp,
    Json(order): Json<OrderPlaced>,
    mut tx: delivery::queue::SqliteTx,
) -> Result<(), HandlerError> {
    orders::refuse_negative(&order)?;
    orders::apply::<sqlx::Sqlite>(&mut tx, &order, stamp).await?;
    orders::confirm::<sqlx::Sqlite>(&mut tx, &order).await?;
    app.pause().await;
    Ok(())
}

#[tokio::main]
async fn main() {
    env::exit_on_error(run().await);
}

type Error = Box<dyn std::error::Error + Send + Sync>;

/// How the queue is consumed, from the environment.
struct Settings {
    queue: Queue,
    delivery_limit: u32,
    batch: usize,
    visibility: Duration,
}

/// How long a handler still running keeps its unit at most.
const HELD_AT_MOST: Duration = Duration::from_secs(30 * 60);

/// A pool's size: a connection for each of `concurrency` units' transactions, and `more`.
fn connections(concurrency: usize, more: u32) -> u32 {
    u32::try_from(concurrency)
        .unwrap_or(u32::MAX)
        .saturating_add(more)
}

async fn run() -> Result<(), Error> {
    // First of all, so a signal during start-up stops the consumer as soon as it starts.
    let shutdown = shutdown_signal();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let url = env_or("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test");
    let settings = Settings {
        queue: Queue::new(&env_or("QUEUE", "orders")),
        delivery_limit: env_num("DELIVERY_LIMIT", 5),
        batch: env_num("BATCH", 32),
        visibility: Duration::from_millis(env_num("VISIBILITY_MS", 30_000)),
    };
    if url.starts_with("sqlite:") {
        sqlite(&url, settings, shutdown).await
    } else {
        postgres(&url, settings, shutdown).await
    }
}

/// The queue in the PostgreSQL database at `url`.
async fn postgres(
    url: &str,
    settings: Settings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let concurrency: usize = env_num("CONCURRENCY", 16);
    // A connection for each unit's transaction, one for the claims, one for `LISTEN`.
    let db = PgPoolOptions::new()
        .max_connections(connections(concurrency, 4))
        .connect(url)
        .await
        .map_err(|e| format!("connecting to PostgreSQL at {url}: {e}"))?;
    orders::create_contract_tables(&db).await?;
    let queue = settings
        .queue
        .postgres(db)
        .max_deliveries(settings.delivery_limit)
        .batch(settings.batch)
        .visibility_timeout(settings.visibility, HELD_AT_MOST);
    queue.migrate().await?;
    let table = queue.store().clone();
    consume(queue.source(), table, concurrency, apply_order, shutdown).await;
    Ok(())
}

/// The queue in the SQLite file of `url`: created if missing, in WAL mode, a statement waiting
/// up to `BUSY_TIMEOUT_MS` for the write lock.
#[cfg(feature = "sqlite")]
async fn sqlite(
    url: &str,
    settings: Settings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};

    let concurrency: usize = env_num("CONCURRENCY", 4);
    let options: SqliteConnectOptions = url
        .parse()
        .map_err(|e| format!("DATABASE_URL {url}: {e}"))?;
    let options = options
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_millis(env_num("BUSY_TIMEOUT_MS", 5000)));
    // A connection for each unit's transaction, one for the claims, one for the rest.
    let db = SqlitePoolOptions::new()
        .max_connections(connections(concurrency, 2))
        .connect_with(options)
        .await
        .map_err(|e| format!("opening the SQLite database {url}: {e}"))?;
    orders::create_contract_tables(&db).await?;
    let queue = settings
        .queue
        .sqlite(db)
        .max_deliveries(settings.delivery_limit)
        .batch(settings.batch)
        .visibility_timeout(settings.visibility, HELD_AT_MOST);
    queue.migrate().await?;
    let table = queue.store().clone();
    consume(
        queue.source(),
        table,
        concurrency,
        apply_order_sqlite,
        shutdown,
    )
    .await;
    Ok(())
}

#[cfg(not(feature = "sqlite"))]
async fn sqlite(
    url: &str,
    _: Settings,
    _: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    Err(format!(
        "DATABASE_URL {url} is a SQLite file: build the example with the feature `sqlite` too \
         (--features postgres,sqlite)"
    )
    .into())
}

/// Runs `handler` on `source` until `shutdown`, `concurrency` units at a time, beside the upkeep
/// of the queue's `table` (its dead letter's depth watched; delivered rows kept a day, then
/// deleted): the same in both databases.
async fn consume<Src, H>(
    source: Src,
    table: impl Table,
    concurrency: usize,
    handler: H,
    shutdown: impl Future<Output = ()> + Send + 'static,
) where
    Src: Source,
    H: Handler<App>,
{
    let depth = table.watch_depth(Duration::from_secs(15));
    let retention = tokio::spawn(async move {
        loop {
            if let Err(error) = table.retain(Duration::from_secs(86_400)).await {
                tracing::warn!(%error, "retention failed; retrying in a minute");
            }
            tokio::time::sleep(Duration::from_secs(60)).await;
        }
    });
    tracing::info!(queue = source.name(), concurrency, "consuming");
    let report = Consumer::new(source)
        .state(App {
            effect_delay: Duration::from_millis(env_num("EFFECT_DELAY_MS", 0)),
        })
        .concurrency(concurrency)
        .drain_deadline(Duration::from_secs(10))
        .shutdown_on(shutdown)
        .run(handler)
        .await;
    depth.abort();
    retention.abort();
    tracing::info!(?report, "stopped");
}

/// A queue's table as the outbox store it is, in either database (`PgStore`, `SqliteStore`):
/// its dead letter, and its retention.
trait Table: DeadLetters + Clone + Sync + 'static {
    /// Deletes the rows delivered more than `older_than` ago.
    fn retain(&self, older_than: Duration) -> impl Future<Output = sqlx::Result<u64>> + Send;
}

impl Table for PgStore {
    async fn retain(&self, older_than: Duration) -> sqlx::Result<u64> {
        PgStore::retain(self, older_than).await
    }
}

#[cfg(feature = "sqlite")]
impl Table for delivery::outbox::SqliteStore {
    async fn retain(&self, older_than: Duration) -> sqlx::Result<u64> {
        delivery::outbox::SqliteStore::retain(self, older_than).await
    }
}
