//! Metrics and health people can scrape: a consumer and an outbox relay in one service, with
//! `/metrics` in Prometheus' text format and `/health` as JSON.
//!
//!     LISTEN_ADDR=127.0.0.1:9000 cargo run --example metrics_health --features axum
//!     curl -X POST localhost:9000/orders -d '{"order_id":"o-1","amount_cents":990}'
//!     curl localhost:9000/metrics
//!     curl localhost:9000/health
//!
//! `POST /orders` publishes the body as a unit to the in-memory broker's `orders` queue (the
//! `x-message-id` header is its id, else `order-<n>`). The consumer writes an `orders.accepted`
//! outbox record per order, in SQLite, in the same transaction as its effect; the relay hands
//! each record to a receiver (a `MemorySink` here). A body that is not an order goes to the
//! consumer's dead letter (malformed); an order of 0 cents is accepted, but its record is refused
//! downstream and marked dead.
//!
//! `LISTEN_ADDR` (default `127.0.0.1:9000`; port 0 picks a free one) is where it listens; the
//! address is printed on stdout as `listening on http://ADDR`. It stops on Ctrl-C or SIGTERM.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State as AxumState;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use delivery::memory::MemoryBroker;
use delivery::outbox::{NewRecord, Outbox, Relayer, SqliteStore};
use delivery::testing::MemorySink;
use delivery::{
    Consumer, HandlerError, Json, Receipt, State, Unit, UnitId, consumer, outbox::OutboxRecord,
    relay,
};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use serde::{Deserialize, Serialize};
use sqlx::sqlite::{SqlitePool, SqlitePoolOptions};

const QUEUE: &str = "orders";

#[derive(Deserialize, Serialize)]
struct Order {
    order_id: String,
    amount_cents: u64,
}

/// The consumer's state: the database its effects and outbox records are written to.
#[derive(Clone)]
struct Shop {
    pool: SqlitePool,
    outbox: Outbox,
}

/// Accepts an order: one outbox record, keyed by the order, written in the effect's transaction.
/// A redelivery finds the record already written: already applied, so success.
#[consumer]
async fn accept_order(
    State(shop): State<Shop>,
    Json(order): Json<Order>,
) -> Result<(), HandlerError> {
    let record = NewRecord::json("orders.accepted", &order)?
        .id(format!("accepted-{}", order.order_id))
        .key(order.order_id.clone());
    let mut tx = shop.pool.begin().await?;
    // ... the order's own rows are written here, in `tx` ...
    match shop.outbox.write(&mut tx, record).await {
        Ok(_) => tx.commit().await?,
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {}
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

/// Announces an accepted order downstream; an order of nothing is refused there for good.
#[relay]
async fn announce(
    record: OutboxRecord<Order>,
    State(sink): State<MemorySink>,
) -> Result<Receipt, HandlerError> {
    if record.payload().amount_cents == 0 {
        return Err(HandlerError::reject(
            "an order of 0 cents is refused downstream",
        ));
    }
    sink.send(&record).await
}

/// What the HTTP routes share.
#[derive(Clone)]
struct Web {
    broker: MemoryBroker,
    prometheus: PrometheusHandle,
    published: Arc<AtomicU64>,
}

async fn publish(AxumState(web): AxumState<Web>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let n = web.published.fetch_add(1, Ordering::Relaxed) + 1;
    let id = headers
        .get("x-message-id")
        .and_then(|v| v.to_str().ok())
        .map_or_else(|| format!("order-{n}"), str::to_owned);
    web.broker.publish(QUEUE, Unit::new(UnitId::new(id), body));
    StatusCode::ACCEPTED
}

async fn render_metrics(AxumState(web): AxumState<Web>) -> String {
    web.prometheus.render()
}

// `pub`: tests/metrics_health_example.rs runs this very function as the example's process.
#[tokio::main]
pub async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("metrics_health: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::var("LISTEN_ADDR").unwrap_or_else(|_| "127.0.0.1:9000".into());

    // The recorder first, then the descriptions: `# HELP` and `# TYPE` lines for every metric.
    // Handler durations as a histogram with buckets (a summary otherwise).
    let prometheus = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(delivery::observe::HANDLER_DURATION.into()),
            &[0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0],
        )?
        .install_recorder()?;
    delivery::observe::describe();
    // The recorder keeps histograms until told to drain them: once every few seconds.
    let upkeep = {
        let prometheus = prometheus.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(5)).await;
                prometheus.run_upkeep();
            }
        })
    };

    // One SQLite connection: an in-memory database lives as long as its connection.
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect("sqlite::memory:")
        .await?;
    let outbox = Outbox::new();
    let store: SqliteStore = outbox.sqlite(pool.clone());
    store.migrate().await?;

    let broker = MemoryBroker::new();
    let stop = stop_signal();

    let consumer = Consumer::new(broker.consume(QUEUE))
        .state(Shop { pool, outbox })
        .shutdown_on(stop.clone().wait());
    let consumer_health = consumer.health();
    let depth =
        consumer_health.watch_dead_letters(broker.dead_letters(QUEUE), Duration::from_millis(200));

    let relayer = Relayer::new(store.clone())
        .state(MemorySink::new())
        .max_attempts(3)
        .poll_interval(Duration::from_millis(100))
        .backlog_every(Duration::from_millis(200))
        .shutdown_on(stop.clone().wait());
    let relay_health = relayer.health();

    let web = Web {
        broker: broker.clone(),
        prometheus,
        published: Arc::default(),
    };
    let router = Router::new()
        .route("/orders", post(publish))
        .route("/metrics", get(render_metrics))
        .route(
            "/health",
            delivery::health::route([consumer_health, relay_health]),
        )
        .with_state(web);

    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}", listener.local_addr()?);

    let consumer = tokio::spawn(consumer.run(accept_order));
    let relay = tokio::spawn(relayer.run(announce));
    axum::serve(listener, router)
        .with_graceful_shutdown(stop.clone().wait())
        .await?;
    let report = consumer.await?;
    let relayed = relay.await?;
    depth.abort();
    upkeep.abort();
    eprintln!("metrics_health: stopped; consumer {report:?}; relay {relayed:?}");
    Ok(())
}

/// Completes for every waiter once Ctrl-C or SIGTERM arrives.
#[derive(Clone)]
struct Stop(tokio::sync::watch::Receiver<bool>);

impl Stop {
    async fn wait(mut self) {
        let _ = self.0.wait_for(|stopped| *stopped).await;
    }
}

fn stop_signal() -> Stop {
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing the SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        let _ = tx.send(true);
    });
    Stop(rx)
}
