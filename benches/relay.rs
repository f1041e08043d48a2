//! Relay throughput, PostgreSQL outbox -> RabbitMQ with publisher confirms, in records per second:
//! the relay runtime (`Relayer` + `RabbitSink`, windowed, marks batched) against, in the same run
//! over the same payloads,
//! - a raw lapin publisher with pipelined confirms (no database at all: the ceiling), and
//! - the naive relay: per record, claim it, publish, await the confirm, mark it, commit.
//!
//! `cargo bench --features postgres,lapin --bench relay`. Env: `DATABASE_URL`, `AMQP_URL`,
//! `RECORDS` (default 20000), `WINDOW` (default 256), `NAIVE_RECORDS` (default 2000), `ROUNDS` (default 3). Targets: at
//! least 0.7 of the raw pipelined publisher, at least 5x the naive relay. Each round runs the
//! three in turn (and, for reference, the relay into the memory sink and `RabbitSink` alone);
//! the ratios are medians of the per-round ratios.

use std::future::Future;
use std::time::{Duration, Instant};

use delivery::lapin::options::{
    BasicPublishOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
    QueueDeleteOptions, QueuePurgeOptions,
};
use delivery::lapin::types::FieldTable;
use delivery::lapin::{BasicProperties, Channel, Confirmation, Connection, ExchangeKind};
use delivery::outbox::{Attempt, IntoAttempt, NewRecord, Outbox, PgStore, Record, Relay, Relayer};
use delivery::rabbitmq::RabbitSink;
use delivery::testing::MemorySink;
use sqlx::postgres::PgPoolOptions;
use sqlx::{AssertSqlSafe, Row};

mod support;
use support::median;
#[path = "support/raw_publisher.rs"]
#[allow(dead_code)] // `Properties::LikeTheSink` is `relay_example`'s
mod raw_publisher;
use raw_publisher::{Properties, confirm_channel, raw_pipelined};

const EXCHANGE: &str = "relay.bench";
const QUEUE: &str = "relay.bench.audit";

/// Publishes outstanding at once, the same for the relay and the raw publisher (`WINDOW`, default
/// 256).
fn window() -> usize {
    env_number("WINDOW", 256).max(1)
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn payload(i: usize) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "type": "order.placed",
        "order_id": i,
        "customer": format!("c-{}", i % 97),
        "total_cents": (i % 500 + 1) * 100,
        "lines": [{"sku": "A-1", "qty": 2}, {"sku": "B-7", "qty": 1}],
    }))
    .unwrap()
}

/// The same relay into the in-memory sink: what the database side alone allows.
struct ToMemory;
impl Relay<MemorySink> for ToMemory {
    fn call(
        &self,
        record: &Record,
        sink: &MemorySink,
    ) -> impl Future<Output = Attempt> + Send + 'static {
        let (record, sink) = (record.clone(), sink.clone());
        async move { sink.send(&record).await.into_attempt() }
    }
}

struct Publish;
impl Relay<RabbitSink> for Publish {
    fn call(
        &self,
        record: &Record,
        sink: &RabbitSink,
    ) -> impl Future<Output = Attempt> + Send + 'static {
        let (record, sink) = (record.clone(), sink.clone());
        async move { sink.send(&record).await.into_attempt() }
    }
}

async fn declare(channel: &Channel) {
    let _ = channel
        .queue_delete(QUEUE.into(), QueueDeleteOptions::default())
        .await;
    channel
        .exchange_declare(
            EXCHANGE.into(),
            ExchangeKind::Topic,
            ExchangeDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    channel
        .queue_declare(
            QUEUE.into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    channel
        .queue_bind(
            QUEUE.into(),
            EXCHANGE.into(),
            "#".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
}

async fn purge(channel: &Channel) {
    channel
        .queue_purge(QUEUE.into(), QueuePurgeOptions::default())
        .await
        .unwrap();
}

async fn fresh_outbox(store: &PgStore, outbox: &Outbox, n: usize) {
    sqlx::raw_sql(AssertSqlSafe(format!("TRUNCATE {}", outbox.table_name())))
        .execute(store.pool())
        .await
        .unwrap();
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let mut tx = store.pool().begin().await.unwrap();
        for &i in chunk {
            let record = NewRecord::new(EXCHANGE, payload(i))
                .key("order.placed")
                .id(format!("order-{i}-placed"));
            outbox.write(&mut tx, record).await.unwrap();
        }
        tx.commit().await.unwrap();
    }
}

/// The relay runtime, until the outbox is drained.
async fn relay(store: &PgStore, sink: &RabbitSink) -> u64 {
    let report = Relayer::new(store.clone())
        .state(sink.clone())
        .window(window())
        .batch(window())
        .poll_interval(Duration::from_millis(5))
        .shutdown_on(store.idle())
        .run(Publish)
        .await;
    report.delivered
}

/// `RabbitSink::send` alone, `WINDOW` sends outstanding, no database: what the sink allows.
async fn sink_alone(sink: &RabbitSink, n: usize) {
    use futures_util::StreamExt;
    let records: Vec<Record> = (0..n)
        .map(|i| {
            Record::new(
                format!("order-{i}-placed"),
                EXCHANGE,
                Some("order.placed".into()),
                payload(i),
                0,
            )
        })
        .collect();
    let mut sends =
        futures_util::stream::iter(records.iter().map(|r| sink.send(r))).buffer_unordered(window());
    while let Some(sent) = sends.next().await {
        let _receipt = sent.unwrap();
    }
}

/// The naive relay: one record at a time, its confirm awaited before the next publish.
async fn naive(store: &PgStore, outbox: &Outbox, channel: &Channel) -> usize {
    let t = outbox.table_name();
    let claim = format!(
        "SELECT id, topic, key, payload FROM {t} WHERE status = 'pending' ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED"
    );
    let mark = format!("UPDATE {t} SET status = 'delivered', delivered_at = now() WHERE id = $1");
    let mut relayed = 0;
    loop {
        let mut tx = store.pool().begin().await.unwrap();
        let Some(row) = sqlx::query(AssertSqlSafe(claim.as_str()))
            .fetch_optional(&mut *tx)
            .await
            .unwrap()
        else {
            break;
        };
        let id: String = row.get(0);
        let topic: String = row.get(1);
        let key: Option<String> = row.get(2);
        let body: Vec<u8> = row.get(3);
        let confirm = channel
            .basic_publish(
                topic.as_str().into(),
                key.unwrap_or_default().as_str().into(),
                BasicPublishOptions {
                    mandatory: true,
                    ..Default::default()
                },
                &body,
                BasicProperties::default()
                    .with_message_id(id.as_str().into())
                    .with_delivery_mode(2),
            )
            .await
            .unwrap();
        assert!(matches!(confirm.await.unwrap(), Confirmation::Ack(None)));
        sqlx::query(AssertSqlSafe(mark.as_str()))
            .bind(&id)
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        relayed += 1;
    }
    relayed
}

#[tokio::main]
async fn main() {
    let n = env_number("RECORDS", 20_000);
    let naive_n = env_number("NAIVE_RECORDS", 2_000);
    let rounds = env_number("ROUNDS", 3).max(1);
    let database_url = env_or("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test");
    let amqp_url = env_or("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f");

    let pool = PgPoolOptions::new()
        .max_connections(8)
        .connect(&database_url)
        .await
        .expect("PostgreSQL unreachable");
    let outbox = Outbox::table(&format!("relay_bench_{}", std::process::id()));
    let store = outbox.postgres(pool);
    store.migrate().await.unwrap();
    let connection = Connection::connect(&amqp_url, Default::default())
        .await
        .expect("RabbitMQ unreachable");
    let admin = connection.create_channel().await.unwrap();
    declare(&admin).await;
    let raw_channel = confirm_channel(&connection).await;
    let sink_connection = Connection::connect(&amqp_url, Default::default())
        .await
        .unwrap();
    let sink = RabbitSink::new(sink_connection).await.unwrap();

    let (mut relay_rates, mut raw_rates, mut naive_rates) = (Vec::new(), Vec::new(), Vec::new());
    for round in 1..=rounds {
        fresh_outbox(&store, &outbox, n).await;
        purge(&admin).await;
        let started = Instant::now();
        let delivered = relay(&store, &sink).await;
        let relay_rate = delivered as f64 / started.elapsed().as_secs_f64();
        assert_eq!(delivered, n as u64);

        fresh_outbox(&store, &outbox, n).await;
        let started = Instant::now();
        let report = Relayer::new(store.clone())
            .state(MemorySink::new())
            .window(window())
            .batch(window())
            .poll_interval(Duration::from_millis(5))
            .shutdown_on(store.idle())
            .run(ToMemory)
            .await;
        let memory_rate = report.delivered as f64 / started.elapsed().as_secs_f64();

        purge(&admin).await;
        let started = Instant::now();
        sink_alone(&sink, n).await;
        let sink_rate = n as f64 / started.elapsed().as_secs_f64();

        purge(&admin).await;
        let started = Instant::now();
        let messages = (0..n).map(|i| (format!("order-{i}-placed"), payload(i)));
        raw_pipelined(
            &raw_channel,
            window(),
            EXCHANGE,
            "order.placed",
            Properties::Bare,
            messages,
        )
        .await;
        let raw_rate = n as f64 / started.elapsed().as_secs_f64();

        fresh_outbox(&store, &outbox, naive_n).await;
        purge(&admin).await;
        let started = Instant::now();
        let relayed = naive(&store, &outbox, &raw_channel).await;
        let naive_rate = relayed as f64 / started.elapsed().as_secs_f64();
        assert_eq!(relayed, naive_n);

        println!(
            "round {round}: relay {relay_rate:.0} records/s, raw pipelined {raw_rate:.0}/s, naive {naive_rate:.0}/s; \
             (relay into the memory sink: {memory_rate:.0}/s, \
             RabbitSink alone: {sink_rate:.0}/s)"
        );
        relay_rates.push(relay_rate);
        raw_rates.push(raw_rate);
        naive_rates.push(naive_rate);
    }
    // Ratios paired per round (the runs back to back under the same machine load), then the
    // median over rounds: steadier than a ratio of medians on a shared machine.
    let vs_raw = median(
        relay_rates
            .iter()
            .zip(&raw_rates)
            .map(|(a, b)| a / b)
            .collect(),
    );
    let vs_naive = median(
        relay_rates
            .iter()
            .zip(&naive_rates)
            .map(|(a, b)| a / b)
            .collect(),
    );
    let (relay_rate, raw_rate, naive_rate) =
        (median(relay_rates), median(raw_rates), median(naive_rates));
    println!(
        "medians over {rounds} rounds (outbox {n} records, window {}): relay {relay_rate:.0} records/s; \
         raw lapin pipelined {raw_rate:.0}/s; naive relay {naive_rate:.0}/s",
        window()
    );
    println!(
        "relay / raw pipelined = {vs_raw:.2} (target >= 0.70); relay / naive = {vs_naive:.1}x (target >= 5x) \
         [medians of per-round ratios]"
    );

    let _ = admin
        .queue_delete(QUEUE.into(), QueueDeleteOptions::default())
        .await;
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP TABLE {} CASCADE",
        outbox.table_name()
    )))
    .execute(store.pool())
    .await
    .unwrap();
}
