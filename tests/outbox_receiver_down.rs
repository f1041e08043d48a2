//! The relay with its receiver down, end to end against the real PostgreSQL and RabbitMQ and a
//! local HTTP receiver: nothing is marked delivered while the receiver cannot confirm, the
//! attempts are counted in the records, and once the receiver is back every record is delivered.
//! Fails, never skips, when a server is unreachable.
#![cfg(all(feature = "postgres", feature = "lapin", feature = "http"))]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use delivery::http::HttpSink;
use delivery::lapin::options::{
    BasicGetOptions, ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use delivery::lapin::types::FieldTable;
use delivery::lapin::{Connection, ExchangeKind};
use delivery::outbox::{NewRecord, Outbox, PgStore, Record, Relayer, Status};
use delivery::rabbitmq::RabbitSink;
use delivery::{HandlerError, Receipt, State, disposition::Backoff, relay};
use sqlx::{AssertSqlSafe, PgPool};

fn database_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

fn amqp_url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

#[relay]
async fn to_rabbitmq(
    record: Record,
    State(sink): State<RabbitSink>,
) -> Result<Receipt, HandlerError> {
    sink.send(&record).await
}

#[relay]
async fn to_http(record: Record, State(sink): State<HttpSink>) -> Result<Receipt, HandlerError> {
    sink.send(&record).await
}

async fn outbox(name: &str, records: usize) -> (Outbox, PgStore) {
    let pool = PgPool::connect(&database_url())
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL unreachable at {}: {e}", database_url()));
    let table = format!("outbox_down_{name}_{}", std::process::id());
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP TABLE IF EXISTS {table} CASCADE"
    )))
    .execute(&pool)
    .await
    .unwrap();
    let outbox = Outbox::table(&table);
    let store = outbox.postgres(pool.clone());
    store.migrate().await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    for i in 0..records {
        let record = NewRecord::new(
            format!("down.{name}.{}", std::process::id()),
            format!("{{\"n\":{i}}}"),
        )
        .id(format!("{name}-{i}"))
        .key("k");
        outbox.write(&mut tx, record).await.unwrap();
    }
    tx.commit().await.unwrap();
    (outbox, store)
}

fn quick_backoff() -> Backoff {
    Backoff::exponential(Duration::from_millis(50), Duration::from_millis(200)).without_jitter()
}

/// Every record's status and attempts.
async fn statuses(store: &PgStore, name: &str, n: usize) -> Vec<(Status, u32)> {
    let mut out = Vec::new();
    for i in 0..n {
        let record = store
            .get(&format!("{name}-{i}").into())
            .await
            .unwrap()
            .unwrap();
        out.push((record.status, record.attempts));
    }
    out
}

/// Completes once every record has failed at least once and been claimed again (its second
/// attempt counted): the receiver-down phase has seen every record fail, however loaded the
/// machine.
async fn every_record_failed(store: PgStore, name: &'static str, n: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !statuses(&store, name, n)
        .await
        .iter()
        .all(|(_, attempts)| *attempts >= 2)
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not every {name} record failed within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The exchange exists but the queue bound to it was deleted: every publish comes back unroutable
/// (a basic.return before the ack), so no receipt, nothing marked; bound again, all delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unroutable_publish_is_not_a_receipt() {
    const N: usize = 20;
    let (_, store) = outbox("rabbit", N).await;
    let exchange = format!("down.rabbit.{}", std::process::id());
    let queue = format!("{exchange}.q");
    let connection = Connection::connect(&amqp_url(), Default::default())
        .await
        .unwrap_or_else(|e| panic!("RabbitMQ unreachable at {}: {e}", amqp_url()));
    let channel = connection.create_channel().await.unwrap();
    let _ = channel
        .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await;
    channel
        .exchange_declare(
            exchange.as_str().into(),
            ExchangeKind::Direct,
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let sink = RabbitSink::connect(&amqp_url()).await.unwrap();

    // Receiver down: no queue bound.
    let report = Relayer::new(store.clone())
        .state(sink.clone())
        .backoff(quick_backoff())
        .max_attempts(100)
        .poll_interval(Duration::from_millis(50))
        .shutdown_on(every_record_failed(store.clone(), "rabbit", N))
        .run(to_rabbitmq)
        .await;
    assert_eq!(report.delivered, 0, "{report:?}");
    assert!(report.retried >= N as u64, "{report:?}");
    for (status, attempts) in statuses(&store, "rabbit", N).await {
        assert_eq!(status, Status::Pending);
        assert!(
            attempts >= 1,
            "the failed attempts are counted in the record"
        );
    }

    // Receiver back.
    channel
        .queue_declare(
            queue.as_str().into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    channel
        .queue_bind(
            queue.as_str().into(),
            exchange.as_str().into(),
            "k".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let report = Relayer::new(store.clone())
        .state(sink.clone())
        .backoff(quick_backoff())
        .max_attempts(100)
        .poll_interval(Duration::from_millis(50))
        .shutdown_on(store.idle())
        .run(to_rabbitmq)
        .await;
    assert_eq!(report.delivered, N as u64, "{report:?}");
    assert!(
        statuses(&store, "rabbit", N)
            .await
            .iter()
            .all(|(s, _)| *s == Status::Delivered)
    );
    let mut arrived = 0;
    while let Some(message) = channel
        .basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
    {
        let id = message.delivery.properties.message_id().clone().unwrap();
        assert!(id.as_str().starts_with("rabbit-"), "{id:?}");
        arrived += 1;
    }
    assert_eq!(
        arrived, N,
        "each record reached the queue once the receiver was back"
    );
    let _ = channel
        .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await;
    let _ = channel
        .exchange_delete(exchange.as_str().into(), ExchangeDeleteOptions::default())
        .await;
    let _ = connection.close(200, "ok".into()).await;
}

/// An HTTP receiver answering 503: nothing marked, attempts counted; answering 200: delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_is_not_a_receipt() {
    const N: usize = 10;
    let (_, store) = outbox("http", N).await;
    let up = Arc::new(AtomicBool::new(false));
    let receiver = {
        let up = up.clone();
        axum::Router::new().route(
            "/events",
            axum::routing::post(move || {
                let up = up.clone();
                async move {
                    if up.load(Ordering::SeqCst) {
                        axum::http::StatusCode::OK
                    } else {
                        axum::http::StatusCode::SERVICE_UNAVAILABLE
                    }
                }
            }),
        )
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, receiver).await.unwrap() });
    let sink = HttpSink::new(format!("http://{address}/events")).unwrap();

    let report = Relayer::new(store.clone())
        .state(sink.clone())
        .backoff(quick_backoff())
        .max_attempts(100)
        .poll_interval(Duration::from_millis(50))
        .shutdown_on(every_record_failed(store.clone(), "http", N))
        .run(to_http)
        .await;
    assert_eq!(report.delivered, 0, "{report:?}");
    for (status, attempts) in statuses(&store, "http", N).await {
        assert_eq!(status, Status::Pending);
        assert!(attempts >= 1);
    }

    up.store(true, Ordering::SeqCst);
    let report = Relayer::new(store.clone())
        .state(sink)
        .backoff(quick_backoff())
        .max_attempts(100)
        .poll_interval(Duration::from_millis(50))
        .shutdown_on(store.idle())
        .run(to_http)
        .await;
    assert_eq!(report.delivered, N as u64, "{report:?}");
    assert!(
        statuses(&store, "http", N)
            .await
            .iter()
            .all(|(s, _)| *s == Status::Delivered)
    );
}
