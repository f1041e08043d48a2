//! Rule 4 end to end, against the real PostgreSQL and RabbitMQ: an outbox holds v1, v2, v3 of
//! one key; the relay sends them out of order (v2's first attempt fails), the consumer's first
//! delivery of v1 is refused into the dead letter and redriven after v3 was applied. The store
//! guard (`store::postgres::advance`) keeps v3, whatever order the versions arrived in.
#![cfg(all(feature = "lapin", feature = "postgres"))]

#[path = "support/rabbitmq.rs"]
mod rabbitmq;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use delivery::dead_letter::{DeadLetters, Selection};
use delivery::outbox::{NewRecord, Outbox, Record, Relayer};
use delivery::rabbitmq::RabbitSink;
use delivery::rabbitmq::{RabbitDeadLetters, RabbitSource, RabbitTopology};
use delivery::store::postgres;
use delivery::{Consumer, HandlerError, Json, Receipt, Stamp, State, UnitId};
use serde::Deserialize;
use sqlx::PgPool;

fn database_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

fn amqp_url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

const SCOPE: &str = "stamp_e2e_latest";

/// What the relay and the consumer share.
#[derive(Clone)]
struct App {
    pool: PgPool,
    sink: Option<RabbitSink>,
    /// Ids whose first attempt (relay) or delivery (consumer) has been refused already.
    refused: Arc<Mutex<Vec<String>>>,
    /// Every version the consumer handled, in arrival order, with its stamp.
    arrivals: Arc<Mutex<Vec<(i64, Stamp)>>>,
}

impl App {
    /// Whether this is `id`'s first time (recorded).
    fn first_time(&self, id: &str) -> bool {
        let mut refused = self.refused.lock().unwrap();
        let first = !refused.iter().any(|r| r == id);
        refused.push(id.to_owned());
        first
    }
}

/// The relay: v2's first attempt fails, so v3 goes out before it.
#[delivery::relay]
async fn relay(record: Record, State(app): State<App>) -> Result<Receipt, HandlerError> {
    if record.id().as_str() == "e2e-v2" && app.first_time("relay:e2e-v2") {
        return Err(HandlerError::retry("the receiver is busy (scripted)")
            .after(Duration::from_millis(300)));
    }
    app.sink
        .as_ref()
        .expect("the relay's app has a sink")
        .send(&record)
        .await
}

#[derive(Deserialize)]
struct Version {
    key: String,
    version: i64,
}

/// The consumer: the latest state of each key, guarded by the unit's stamp. v1's first delivery
/// is refused (to the dead letter).
#[delivery::consumer]
async fn apply(
    Json(v): Json<Version>,
    stamp: Stamp,
    State(app): State<App>,
) -> Result<(), HandlerError> {
    if v.version == 1 && app.first_time("consumer:v1") {
        return Err(HandlerError::reject("v1 refused once (scripted)"));
    }
    app.arrivals.lock().unwrap().push((v.version, stamp));
    let mut tx = app.pool.begin().await.map_err(HandlerError::retry)?;
    if postgres::advance(&mut tx, SCOPE, &v.key, stamp)
        .await
        .map_err(HandlerError::retry)?
    {
        sqlx::query(
            "INSERT INTO stamp_e2e_latest (key, version) VALUES ($1, $2) \
             ON CONFLICT (key) DO UPDATE SET version = EXCLUDED.version",
        )
        .bind(&v.key)
        .bind(v.version)
        .execute(&mut *tx)
        .await
        .map_err(HandlerError::retry)?;
    }
    tx.commit().await.map_err(HandlerError::retry)?;
    Ok(())
}

async fn stored(pool: &PgPool, key: &str) -> Option<i64> {
    sqlx::query_scalar("SELECT version FROM stamp_e2e_latest WHERE key = $1")
        .bind(key)
        .fetch_optional(pool)
        .await
        .unwrap()
}

async fn wait_for(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !done().await {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versions_out_of_order_end_with_the_newest() {
    let pool = PgPool::connect(&database_url())
        .await
        .expect("PostgreSQL answers on DATABASE_URL (scripts/services.sh starts it)");
    let key = format!("k-{}", std::process::id());
    let outbox = Outbox::table("stamp_e2e_outbox");
    let store = outbox.postgres(pool.clone());
    store.migrate().await.unwrap();
    sqlx::query("DELETE FROM stamp_e2e_outbox")
        .execute(&pool)
        .await
        .unwrap();
    postgres::migrate(&mut pool.acquire().await.unwrap())
        .await
        .unwrap();
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS stamp_e2e_latest (key TEXT PRIMARY KEY, version BIGINT NOT NULL)",
    )
    .execute(&pool)
    .await
    .unwrap();

    let topology = RabbitTopology::new(format!("stamp-e2e-{}", std::process::id()));
    let connection = rabbitmq::fresh(&amqp_url(), &topology).await;

    // v1, v2, v3 of one key, each written in its own transaction, in that order.
    for version in 1..=3 {
        let mut tx = pool.begin().await.unwrap();
        let record = NewRecord::json("", &serde_json::json!({"key": key, "version": version}))
            .unwrap()
            .key(topology.queue.as_str())
            .id(format!("e2e-v{version}"));
        outbox.write(&mut tx, record).await.unwrap();
        tx.commit().await.unwrap();
    }

    let app = App {
        pool: pool.clone(),
        sink: Some(RabbitSink::new(connection).await.unwrap()),
        refused: Arc::default(),
        arrivals: Arc::default(),
    };
    let (stop_relay, relay_stopped) = tokio::sync::oneshot::channel::<()>();
    let relayer = tokio::spawn(
        Relayer::new(store.clone())
            .state(app.clone())
            .poll_interval(Duration::from_millis(50))
            .shutdown_on(async move {
                let _ = relay_stopped.await;
            })
            .run(relay),
    );
    let (stop_consumer, consumer_stopped) = tokio::sync::oneshot::channel::<()>();
    let consumer = tokio::spawn(
        Consumer::new(
            RabbitSource::connect(amqp_url().as_str(), topology.clone())
                .await
                .unwrap(),
        )
        .state(app.clone())
        .concurrency(1)
        .shutdown_on(async move {
            let _ = consumer_stopped.await;
        })
        .run(apply),
    );

    let dead = RabbitDeadLetters::new(amqp_url().as_str(), &topology);
    wait_for("v2 and v3 applied, v1 dead-lettered", async || {
        app.arrivals.lock().unwrap().len() >= 2 && dead.count().await.unwrap() == 1
    })
    .await;
    // v3 went out before v2, and v2, arriving after it, changed nothing.
    let order: Vec<i64> = app.arrivals.lock().unwrap().iter().map(|a| a.0).collect();
    assert_eq!(order, [3, 2], "the relay sent v3 before v2");
    assert_eq!(stored(&pool, &key).await, Some(3));

    // The operator redrives v1, after v3: it arrives last, with its own stamp, and changes
    // nothing.
    let report = dead
        .redrive(Selection::Ids(&[UnitId::new("e2e-v1")]))
        .await
        .unwrap();
    assert_eq!(report.redriven, [UnitId::new("e2e-v1")]);
    wait_for("v1 handled after its redrive", async || {
        app.arrivals.lock().unwrap().len() >= 3
    })
    .await;
    let arrivals = app.arrivals.lock().unwrap().clone();
    let stamp_of = |version| arrivals.iter().find(|a| a.0 == version).unwrap().1;
    assert!(
        stamp_of(1) < stamp_of(2) && stamp_of(2) < stamp_of(3),
        "stamps follow the outbox's order, not arrival: {arrivals:?}"
    );
    assert_eq!(
        stored(&pool, &key).await,
        Some(3),
        "the newest version stays: {arrivals:?}"
    );

    let _ = stop_relay.send(());
    let _ = stop_consumer.send(());
    relayer.await.unwrap();
    consumer.await.unwrap();
}
