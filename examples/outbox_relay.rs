//! An outbox relayed from PostgreSQL to RabbitMQ (rule 6).
//!
//! ```text
//! cargo run --features postgres,lapin --example outbox_relay -- --seed 1000   # write 1000 orders
//! cargo run --features postgres,lapin --example outbox_relay                  # relay until Ctrl-C
//! ```
//!
//! `--seed N` writes N orders into `outbox_orders`, each with its outbox record (in
//! `delivery_outbox`) in the same transaction, then exits. Without it, the example declares the
//! topic exchange `orders.events` and the durable queue `orders.events.audit` bound to it (`#`),
//! and relays every pending record there — persistent, `mandatory`, `message_id` = the record's
//! id, under publisher confirms — marking it delivered only after the broker's ack, until SIGINT
//! or SIGTERM. It prints progress every second: records relayed, rate, pending.
//!
//! Environment: `DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/test`), `AMQP_URL`
//! (default `amqp://guest:guest@127.0.0.1:5672/%2f`); tuning: `WINDOW` (publishes awaiting their
//! confirm, default 1024, the sink's own default; the relay holds twice as many records, so the
//! next ones wait at the sink), `BATCH` (records per claim, default 256), `LEASE_MS` (default
//! 60000). A persistent publish to a durable queue is confirmed only once the broker has written
//! it to disk, so the window, not the client, is what bounds the rate: at 256 this example
//! relayed 0.7–0.8 of what it relays at 1024 (`benches/relay_example.rs`).
//!
//! Several relays may run at once over the same table: each record is claimed by one of them at a
//! time. A relay killed between the publish and the mark leaves its records leased; another
//! relay (or the same one restarted) claims them again once the lease expires and publishes them
//! again under the same `message_id`, which the receiver deduplicates.
//!
//! `benches/relay_example.rs` runs this file's relay (the same settings, pool and logging) against
//! a raw lapin publisher.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use delivery::lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
use delivery::lapin::types::FieldTable;
use delivery::lapin::{Connection, ExchangeKind};
use delivery::outbox::{NewRecord, Outbox, PgStore, Record, RelayReport, Relayer};
use delivery::rabbitmq::{DEFAULT_CONFIRM_WINDOW, RabbitSink};
use delivery::{HandlerError, Receipt, State, relay};
use sqlx::postgres::PgPoolOptions;

#[path = "support/env.rs"]
mod env;
use env::{env_num, env_or, exit_on_error, shutdown_signal};

pub(crate) const EXCHANGE: &str = "orders.events";
pub(crate) const QUEUE: &str = "orders.events.audit";

type Error = Box<dyn std::error::Error + Send + Sync>;

/// What the relay function works with: the sink, and a count for the progress line.
#[derive(Clone)]
struct App {
    sink: RabbitSink,
    relayed: Arc<AtomicU64>,
}

/// The relay function: publish the record exactly as written, under its own id, and return the
/// broker's receipt (a publisher confirm `ack` with nothing returned). The relay marks the record
/// delivered only for that receipt.
#[relay]
async fn publish(record: Record, State(app): State<App>) -> Result<Receipt, HandlerError> {
    let receipt = app.sink.send(&record).await?;
    app.relayed.fetch_add(1, Ordering::Relaxed);
    Ok(receipt)
}

pub(crate) async fn prepare(store: &PgStore) -> Result<(), Error> {
    store.migrate().await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS outbox_orders (
            id BIGSERIAL PRIMARY KEY,
            customer TEXT NOT NULL,
            total_cents BIGINT NOT NULL
        )",
    )
    .execute(store.pool())
    .await?;
    Ok(())
}

/// Writes `n` orders, each with its record in the same transaction.
async fn seed(outbox: &Outbox, store: &PgStore, n: u64) -> Result<(), Error> {
    for i in 0..n {
        let customer = format!("c-{}", i % 97);
        let total_cents = (i % 500 + 1) as i64 * 100;
        let mut tx = store.pool().begin().await?;
        let (order,): (i64,) = sqlx::query_as(
            "INSERT INTO outbox_orders (customer, total_cents) VALUES ($1, $2) RETURNING id",
        )
        .bind(&customer)
        .bind(total_cents)
        .fetch_one(&mut *tx)
        .await?;
        outbox
            .write(&mut tx, order_placed(order, &customer, total_cents)?)
            .await?;
        tx.commit().await?;
    }
    println!("seeded {n} orders");
    Ok(())
}

/// The record of an order placed: its event as JSON, under an id derived from the order, so the
/// same effect can never get a second id.
pub(crate) fn order_placed(
    order: i64,
    customer: &str,
    total_cents: i64,
) -> Result<NewRecord, Error> {
    let event = serde_json::json!({
        "type": "order.placed",
        "order_id": order,
        "customer": customer,
        "total_cents": total_cents,
    });
    Ok(NewRecord::json(EXCHANGE, &event)?
        .key("order.placed")
        .id(format!("order-{order}-placed")))
}

pub(crate) async fn declare(connection: &Connection) -> Result<(), Error> {
    let channel = connection.create_channel().await?;
    let durable = ExchangeDeclareOptions {
        durable: true,
        ..Default::default()
    };
    channel
        .exchange_declare(
            EXCHANGE.into(),
            ExchangeKind::Topic,
            durable,
            FieldTable::default(),
        )
        .await?;
    let queue = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    channel
        .queue_declare(QUEUE.into(), queue, FieldTable::default())
        .await?;
    channel
        .queue_bind(
            QUEUE.into(),
            EXCHANGE.into(),
            "#".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await?;
    let _ = channel.close(200, "declared".into()).await;
    Ok(())
}

/// The relay's tuning, from the environment.
pub(crate) struct Settings {
    pub(crate) window: usize,
    pub(crate) batch: usize,
    lease: Duration,
}

impl Settings {
    pub(crate) fn from_env() -> Self {
        Settings {
            window: env_num("WINDOW", DEFAULT_CONFIRM_WINDOW).max(1),
            batch: env_num("BATCH", 256),
            lease: Duration::from_millis(env_num("LEASE_MS", 60_000)),
        }
    }
}

/// The pool the example relays through: claims, marks, the wake-ups' `LISTEN` and the progress
/// line share it.
pub(crate) fn pool_options() -> PgPoolOptions {
    PgPoolOptions::new().max_connections(4)
}

/// Logs at `info` unless `RUST_LOG` says otherwise.
pub(crate) fn init_tracing() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
}

#[tokio::main]
async fn main() {
    exit_on_error(run().await);
}

async fn run() -> Result<(), Error> {
    // First of all, so a signal during start-up stops the relay as soon as it starts.
    let shutdown = shutdown_signal();
    init_tracing();
    let database_url = env_or("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test");
    let amqp_url = env_or("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f");
    let args: Vec<String> = std::env::args().skip(1).collect();

    let pool = pool_options().connect(&database_url).await?;
    let outbox = Outbox::new();
    let store = outbox.postgres(pool);
    prepare(&store).await?;

    match args.as_slice() {
        [flag, n] if flag == "--seed" => {
            let n: u64 = n.parse().map_err(|e| format!("--seed {n:?}: {e}"))?;
            return seed(&outbox, &store, n).await;
        }
        [] => {}
        _ => return Err("usage: outbox_relay [--seed N]".into()),
    }

    let connection = Connection::connect(&amqp_url, Default::default()).await?;
    let report = relay(&store, connection, &Settings::from_env(), shutdown).await?;
    println!(
        "stopped: {} delivered, {} retried, {} dead, {} given back; {} pending",
        report.delivered,
        report.retried,
        report.dead,
        report.released,
        store.pending().await?
    );
    Ok(())
}

/// Declares the queue, then relays every pending record of `store` into it until `shutdown`,
/// printing progress once a second.
pub(crate) async fn relay(
    store: &PgStore,
    connection: Connection,
    settings: &Settings,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<RelayReport, Error> {
    declare(&connection).await?;
    let app = App {
        sink: RabbitSink::new(connection).await?.window(settings.window),
        relayed: Arc::new(AtomicU64::new(0)),
    };

    // Progress, once a second.
    let progress = {
        let (store, relayed) = (store.clone(), app.relayed.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            let mut last = 0;
            let mut ticks = tokio::time::interval(Duration::from_secs(1));
            ticks.tick().await;
            loop {
                ticks.tick().await;
                let now = relayed.load(Ordering::Relaxed);
                let pending = store.pending().await.map_or(-1, |n| n as i64);
                println!(
                    "relayed {now} records ({} /s now, {:.0} /s overall), {pending} pending",
                    now - last,
                    now as f64 / started.elapsed().as_secs_f64()
                );
                last = now;
            }
        })
    };

    // Twice the sink's window in hand: while a window of publishes awaits its confirms, the next
    // records wait at the sink, so a confirm's slot is published into at once.
    let report = Relayer::new(store.clone())
        .state(app)
        .window(settings.window * 2)
        .batch(settings.batch)
        .lease(settings.lease)
        .shutdown_on(shutdown)
        .run(publish)
        .await;
    progress.abort();
    Ok(report)
}
