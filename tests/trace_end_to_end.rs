//! One trace from the write to the effect, across three processes, against the real PostgreSQL
//! and RabbitMQ: a *writer* writes an outbox record inside a span of its own, a *relay* publishes
//! it to RabbitMQ, a *consumer* applies it. Each role is this test binary run again as a child
//! (`TRACE_E2E_ROLE`), with its own tracer provider and the SDK's in-memory exporter, printing
//! its finished spans as JSON lines on stdout; the parent asserts one trace id across them, each
//! role's span the child of the one before. Fails, never skips, when a server is unreachable.
#![cfg(all(feature = "opentelemetry", feature = "postgres", feature = "lapin"))]

#[path = "support/process.rs"]
mod process;
#[path = "support/rabbitmq.rs"]
mod rabbitmq;

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use delivery::outbox::{NewRecord, Outbox, Record, Relayer};
use delivery::rabbitmq::RabbitSink;
use delivery::rabbitmq::{RabbitSource, RabbitTopology};
use delivery::{Consumer, HandlerError, Json, Receipt, State};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use process::{amqp_url, database_url};
use serde_json::{Value, json};
use sqlx::PgPool;
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;

const ROLE: &str = "TRACE_E2E_ROLE";
const QUEUE: &str = "TRACE_E2E_QUEUE";
const OUTBOX: &str = "trace_e2e_outbox";
const RECORD_ID: &str = "trace-e2e-order-1";
/// What a child prints before each span's JSON, to tell it from the test harness's own lines.
const MARK: &str = "TRACE-E2E-SPAN ";

/// A role's tracing: tracing-opentelemetry over a tracer provider exporting to memory.
fn install(role: &'static str) -> (SdkTracerProvider, InMemorySpanExporter) {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer(role)));
    tracing::subscriber::set_global_default(subscriber).unwrap();
    (provider, exporter)
}

/// Prints the role's finished spans, one JSON object a line.
fn print_spans(role: &str, provider: &SdkTracerProvider, exporter: &InMemorySpanExporter) {
    provider.force_flush().unwrap();
    for span in exporter.get_finished_spans().unwrap() {
        let attributes: BTreeMap<String, String> = span
            .attributes
            .iter()
            .map(|kv| (kv.key.to_string(), kv.value.to_string()))
            .collect();
        let line = json!({
            "role": role,
            "name": span.name,
            "trace_id": span.span_context.trace_id().to_string(),
            "span_id": span.span_context.span_id().to_string(),
            "parent_span_id": span.parent_span_id.to_string(),
            "attributes": attributes,
        });
        println!("{MARK}{line}");
    }
}

#[derive(Clone)]
struct App {
    sink: Option<RabbitSink>,
    applied: Arc<tokio::sync::Notify>,
}

#[delivery::relay]
async fn relay(record: Record, State(app): State<App>) -> Result<Receipt, HandlerError> {
    app.sink
        .as_ref()
        .expect("the relay's sink")
        .send(&record)
        .await
}

#[delivery::consumer]
async fn apply(Json(order): Json<Value>, State(app): State<App>) -> Result<(), HandlerError> {
    // The handler's own span, inside the runtime's `delivery.unit`.
    tracing::info_span!("apply order", order = %order["order_id"]).in_scope(|| {
        tracing::info!("order applied");
    });
    app.applied.notify_one();
    Ok(())
}

/// The child's side: runs the role `TRACE_E2E_ROLE` names, if any.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn role_child() {
    let Ok(role) = std::env::var(ROLE) else {
        return; // run by the harness, not by the parent test: nothing to do
    };
    let queue = std::env::var(QUEUE).unwrap();
    let role: &'static str = role.leak();
    let (provider, exporter) = install(role);
    match role {
        "writer" => write(&queue).await,
        "relay" => relay_all().await,
        "consumer" => consume_one(&queue).await,
        other => panic!("unknown role {other}"),
    }
    print_spans(role, &provider, &exporter);
}

async fn pool() -> PgPool {
    PgPool::connect(&database_url())
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL unreachable at {}: {e}", database_url()))
}

/// The writer: the record is written inside the application's span, `place order`.
async fn write(queue: &str) {
    let pool = pool().await;
    let outbox = Outbox::table(OUTBOX);
    async {
        let mut tx = pool.begin().await.unwrap();
        let record = NewRecord::json("", &json!({"order_id": "o-1"}))
            .unwrap()
            .key(queue)
            .id(RECORD_ID);
        outbox.write(&mut tx, record).await.unwrap();
        tx.commit().await.unwrap();
    }
    .instrument(tracing::info_span!("place order"))
    .await;
}

/// The relay: until the outbox has nothing pending.
async fn relay_all() {
    let store = Outbox::table(OUTBOX).postgres(pool().await);
    let connection = rabbitmq::connect(&amqp_url()).await;
    let app = App {
        sink: Some(RabbitSink::new(connection).await.unwrap()),
        applied: Arc::default(),
    };
    let report = Relayer::new(store.clone())
        .state(app)
        .poll_interval(Duration::from_millis(50))
        .shutdown_on(store.idle())
        .run(relay)
        .await;
    assert_eq!(report.delivered, 1, "{report:?}");
}

/// The consumer: until the record was applied.
async fn consume_one(queue: &str) {
    let applied = Arc::new(tokio::sync::Notify::new());
    let app = App {
        sink: None,
        applied: applied.clone(),
    };
    let source = RabbitSource::connect(amqp_url().as_str(), RabbitTopology::new(queue))
        .await
        .unwrap();
    let report = Consumer::new(source)
        .state(app)
        .concurrency(1)
        .shutdown_on(async move { applied.notified().await })
        .run(apply)
        .await;
    assert_eq!(report.acked, 1, "{report:?}");
}

/// Runs this binary's `role_child` as `role`, and returns the spans it printed.
fn run_role(role: &str, queue: &str) -> Vec<Value> {
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "role_child", "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .env(QUEUE, queue)
        .env("DATABASE_URL", database_url())
        .env("AMQP_URL", amqp_url())
        .output()
        .expect("running the child");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the {role} failed: {}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
        .lines()
        // The harness's `test role_child ... ` may start the first line.
        .filter_map(|line| Some(&line[line.find(MARK)? + MARK.len()..]))
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn one_named<'a>(spans: &'a [Value], name: &str) -> &'a Value {
    let found: Vec<&Value> = spans.iter().filter(|s| s["name"] == name).collect();
    assert_eq!(found.len(), 1, "one span named {name:?} in {spans:#?}");
    found[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_from_the_write_to_the_effect() {
    if std::env::var(ROLE).is_ok() {
        return; // a child runs `role_child` only
    }
    let pool = pool().await;
    let store = Outbox::table(OUTBOX).postgres(pool.clone());
    store.migrate().await.unwrap();
    sqlx::query("DELETE FROM trace_e2e_outbox")
        .execute(&pool)
        .await
        .unwrap();
    let queue = format!("trace-e2e-{}", std::process::id());
    let topology = RabbitTopology::new(queue.as_str());
    rabbitmq::fresh(&amqp_url(), &topology).await;

    // One after the other, each in its own process: nothing but the record and the message
    // carries the trace from one to the next.
    let writer = run_role("writer", &queue);
    let relayer = run_role("relay", &queue);
    let consumer = run_role("consumer", &queue);

    let write = one_named(&writer, "place order");
    // To the default exchange (`""`), routed by the record's key to the queue: `send`.
    let send = one_named(&relayer, "send");
    let process = one_named(&consumer, &format!("process {queue}"));
    let handler = one_named(&consumer, "apply order");

    let trace = &write["trace_id"];
    for span in [send, process, handler] {
        assert_eq!(&span["trace_id"], trace, "one trace: {span:#}");
    }
    assert_eq!(send["parent_span_id"], write["span_id"], "{send:#}");
    assert_eq!(process["parent_span_id"], send["span_id"], "{process:#}");
    assert_eq!(handler["parent_span_id"], process["span_id"], "{handler:#}");

    let attrs = &send["attributes"];
    assert_eq!(attrs["messaging.system"], "rabbitmq", "{send:#}");
    assert_eq!(attrs["messaging.operation.type"], "send");
    assert_eq!(attrs["messaging.message.id"], RECORD_ID);
    assert_eq!(attrs["messaging.delivery_count"], "1");
    let attrs = &process["attributes"];
    assert_eq!(attrs["messaging.system"], "rabbitmq", "{process:#}");
    assert_eq!(attrs["messaging.destination.name"], queue.as_str());
    assert_eq!(attrs["messaging.operation.type"], "process");
    assert_eq!(attrs["messaging.message.id"], RECORD_ID);
    assert_eq!(attrs["messaging.delivery_count"], "1");

    rabbitmq::delete_queues(
        &rabbitmq::connect(&amqp_url()).await,
        [queue.as_str(), &topology.dead_letter_queue_name()],
    )
    .await;
}
