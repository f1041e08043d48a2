//! The quickstart: a consumer on the in-memory broker, no services needed.
//!
//!     cargo run --example quickstart
//!
//! Six units go through one handler and each meets a different fate: applied; failed then applied
//! on redelivery; poison straight to the dead letter; retried to the bound then dead-lettered;
//! delivered twice with one effect. It ends by listing the dead letter as an operator sees it,
//! then checks two webhook deliveries over their raw bodies (a signed one and a forgery), and
//! relays an outbox record from SQLite, marked delivered only after the receiver's receipt.
//!
//! The in-memory broker forgets everything on exit. The last part is durable: a queue in a SQLite
//! file, whose units survive a crash and a restart, each acknowledged in the same transaction as
//! its effect.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use delivery::memory::{MemoryBroker, QueueConfig};
use delivery::{
    Consumer, DeliveryCount, HandlerError, Json, State, Unit, UnitId, consumer,
    disposition::Backoff,
};
use serde::Deserialize;

#[derive(Deserialize)]
struct OrderPlaced {
    order_id: String,
    sku: String,
    amount_cents: u64,
}

/// The service's state: its "database" of orders and, for this demo, a stock service that is down
/// for some SKUs.
#[derive(Clone, Default)]
struct Shop {
    orders: Arc<Mutex<BTreeMap<String, u64>>>,
    /// SKU -> deliveries on which the stock service fails (`u32::MAX`: always).
    stock_down_until: Arc<BTreeMap<&'static str, u32>>,
    journal: Arc<Mutex<Vec<(UnitId, u32, String)>>>,
}

#[derive(Debug)]
struct StockUnavailable;
impl std::fmt::Display for StockUnavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stock service unavailable")
    }
}
impl std::error::Error for StockUnavailable {}

/// Records an order. Everything it writes comes from the unit, keyed by the order's own id, so a
/// redelivery changes nothing.
#[consumer]
async fn record_order(
    State(shop): State<Shop>,
    Json(order): Json<OrderPlaced>,
    unit_id: UnitId,
    count: DeliveryCount,
) -> Result<(), HandlerError> {
    let note = |text: String| {
        shop.journal
            .lock()
            .unwrap()
            .push((unit_id.clone(), count.get(), text))
    };
    if shop
        .stock_down_until
        .get(order.sku.as_str())
        .is_some_and(|until| count.get() < *until)
    {
        note(format!("failed: {StockUnavailable}"));
        return Err(StockUnavailable.into());
    }
    let mut orders = shop.orders.lock().unwrap();
    if orders.contains_key(&order.order_id) {
        note(format!(
            "order {} already recorded: nothing to do",
            order.order_id
        ));
    } else {
        orders.insert(order.order_id.clone(), order.amount_cents);
        note(format!(
            "recorded order {} ({} cents)",
            order.order_id, order.amount_cents
        ));
    }
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    // The runtime logs every disposition once; `RUST_LOG=delivery_core=debug` shows them.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "off".into()),
        )
        .init();
    let broker = MemoryBroker::new();
    broker
        .declare(
            "orders",
            QueueConfig::default()
                .max_deliveries(4)
                .dead_letter("orders.dead-letter"),
        )
        .expect("declared once");
    let shop = Shop {
        stock_down_until: Arc::new(BTreeMap::from([("flaky-sku", 2), ("dead-sku", u32::MAX)])),
        ..Shop::default()
    };

    let units = [
        (
            "m-1",
            r#"{"order_id":"o-1","sku":"book","amount_cents":2500}"#,
            "applied",
        ),
        (
            "m-2",
            r#"{"order_id":"o-2","sku":"flaky-sku","amount_cents":990}"#,
            "fails once, then applied",
        ),
        ("m-3", r#"{"order_id": "o-3", "sku": "#, "poison: not JSON"),
        (
            "m-4",
            r#"{"order_id":"o-4","sku":"dead-sku","amount_cents":100}"#,
            "fails on every delivery",
        ),
        (
            "m-5",
            r#"{"order_id":"o-5","sku":"pen","amount_cents":150}"#,
            "delivered twice",
        ),
        (
            "m-5",
            r#"{"order_id":"o-5","sku":"pen","amount_cents":150}"#,
            "(the duplicate)",
        ),
    ];
    println!("delivery quickstart: one consumer, the in-memory broker, no services\n");
    println!("publishing to `orders` (bound: 4 deliveries, dead letter: `orders.dead-letter`):");
    for (id, payload, what) in units {
        println!("  {id}  {what}");
        broker.publish("orders", Unit::new(id, payload));
    }

    let report = Consumer::new(broker.consume("orders"))
        .state(shop.clone())
        .concurrency(1)
        .backoff(Backoff::exponential(
            Duration::from_millis(20),
            Duration::from_millis(200),
        ))
        .shutdown_on(broker.idle("orders"))
        .run(record_order)
        .await;

    println!("\nwhat the handler saw, per unit and delivery:");
    for (id, count, text) in shop.journal.lock().unwrap().iter() {
        println!("  {id}  delivery {count}  {text}");
    }
    let dead = broker.dead_letters("orders");
    println!("\nwhat happened to each unit:");
    let mut seen = Vec::new();
    for (id, _, _) in units {
        if seen.contains(&id) {
            continue;
        }
        seen.push(id);
        let deliveries: Vec<u32> = shop
            .journal
            .lock()
            .unwrap()
            .iter()
            .filter(|(u, _, _)| u.as_str() == id)
            .map(|(_, c, _)| *c)
            .collect();
        let fate = match dead.peek(id) {
            Some(letter) => format!(
                "dead letter after {} deliver{}: {}: {}",
                letter.delivery_count(),
                if letter.delivery_count().get() == 1 {
                    "y"
                } else {
                    "ies"
                },
                letter.reason.map_or("unknown", |r| r.as_str()),
                letter.detail
            ),
            None => format!(
                "acknowledged after its effect; handler runs: {}",
                deliveries.len()
            ),
        };
        println!("  {id}  {fate}");
    }
    println!("\norders recorded: {:?}", shop.orders.lock().unwrap());
    println!(
        "consumer report: {} acked, {} returned, {} dead-lettered",
        report.acked, report.returned, report.dead_lettered
    );

    println!(
        "\nthe dead letter, as an operator sees it (`{}`, {} units):",
        dead.name(),
        dead.len()
    );
    for letter in dead.list() {
        println!("  {letter}");
    }
    println!(
        "\nredrive with `broker.dead_letters(\"orders\").redrive(&id)`: same id, fresh delivery count."
    );

    webhooks();
    relay::run().await;
    durable::run().await;
}

/// Rule 5: a webhook is verified over its raw bytes before anything parses it. The same
/// `Verifier` sits in front of every `#[webhook]` handler; here it is called directly.
fn webhooks() {
    use delivery::webhook::{Scheme, Verifier};

    let secret = "quickstart-webhook-secret";
    let verifier = Verifier::new(Scheme::GitHub, secret);
    let body = br#"{"action":"paid","invoice":"in_1"}"#;
    // Signed as GitHub signs: HMAC-SHA256 of the body (GitHub's scheme carries no timestamp).
    let headers = delivery::testing::sign(&Scheme::GitHub, secret, body, std::time::UNIX_EPOCH);
    let mut forged = headers.clone();
    forged.insert(
        "x-hub-signature-256",
        "sha256=0000000000000000000000000000000000000000000000000000000000000000"
            .parse()
            .unwrap(),
    );

    println!(
        "
webhooks, verified over the raw body before parsing (rule 5):"
    );
    for (what, headers) in [("signed", &headers), ("forged", &forged)] {
        match verifier.verify(headers, body) {
            Ok(()) => println!("  {what}: verified, then parsed and handled -> 200"),
            Err(error) => println!("  {what}: refused before parsing -> 401 ({error})"),
        }
    }
}

/// Rule 6: the sending side. An order and the event announcing it are written in one transaction;
/// the relay sends the event under the record's own id and marks it delivered only for the
/// receiver's receipt. The first attempt fails (the receiver is "down"), the second gets through.
/// (The outbox in SQLite, from `delivery-sqlite`, a dev-dependency of this workspace so the
/// quickstart needs no flag; your own service enables the `sqlite` or `postgres` feature of
/// `delivery` and names the same types as `delivery::outbox::{NewRecord, Outbox}`.)
mod relay {
    use delivery::outbox::{Relayer, Status};
    use delivery::testing::{MemorySink, SinkFailure};
    use delivery::{
        HandlerError, Receipt, State, disposition::Backoff, outbox::OutboxRecord, relay,
    };
    use delivery_sqlite::outbox::{NewRecord, Outbox};

    #[derive(serde::Serialize, serde::Deserialize)]
    struct OrderPlaced {
        order_id: String,
    }

    #[relay]
    async fn announce(
        record: OutboxRecord<OrderPlaced>,
        State(sink): State<MemorySink>,
    ) -> Result<Receipt, HandlerError> {
        sink.send(&record).await
    }

    pub(super) async fn run() {
        let pool = sqlx::SqlitePool::connect("sqlite::memory:").await.unwrap();
        let outbox = Outbox::new();
        let store = outbox.sqlite(pool.clone());
        store.migrate().await.unwrap();

        let mut tx = pool.begin().await.unwrap();
        sqlx::query("CREATE TABLE orders (order_id TEXT PRIMARY KEY)")
            .execute(&mut *tx)
            .await
            .unwrap();
        sqlx::query("INSERT INTO orders VALUES ('o-6')")
            .execute(&mut *tx)
            .await
            .unwrap();
        let event = NewRecord::json(
            "orders.events",
            &OrderPlaced {
                order_id: "o-6".into(),
            },
        )
        .unwrap()
        .id("order-o-6-placed");
        let id = outbox.write(&mut tx, event).await.unwrap();
        tx.commit().await.unwrap();

        let receiver = MemorySink::new();
        receiver.fail_next(1, SinkFailure::Transient);
        let report = Relayer::new(store.clone())
            .state(receiver.clone())
            .backoff(Backoff::exponential(
                std::time::Duration::from_millis(20),
                std::time::Duration::from_millis(200),
            ))
            .shutdown_on(store.idle())
            .run(announce)
            .await;

        println!("\nthe outbox, relayed (rule 6):");
        println!("  order o-6 and its event written in one transaction, record id `{id}`");
        for sent in receiver.sent() {
            println!(
                "  attempt {}: sent as `{}` -> {}",
                sent.attempts + 1,
                sent.id,
                if sent.accepted {
                    "receipt; marked delivered"
                } else {
                    "receiver down; retried after a backoff"
                }
            );
        }
        let stored = store.get(&id).await.unwrap().expect("the record");
        assert_eq!(stored.status, Status::Delivered);
        println!(
            "  relay report: {} delivered, {} retried; the record is {:?}",
            report.delivered, report.retried, stored.status
        );
    }
}

/// The durable queue: a table in the service's own database (here a SQLite file; PostgreSQL the
/// same with `.postgres(pool)` and `PgTx`). The handler writes its effect into the unit's
/// transaction (`SqliteTx`); the runtime commits the acknowledgement in it, so a crash before
/// that commit leaves neither, and the unit comes back after its visibility timeout. (From
/// `delivery-sqlite`, a dev-dependency of this workspace; your service names the same types as
/// `delivery::queue::{Queue, SqliteTx}`.)
mod durable {
    use std::sync::Arc;
    use std::time::Duration;

    use delivery::{Consumer, DeliveryCount, HandlerError, Json, State, Unit, consumer};
    use delivery_sqlite::SqliteTx;
    use delivery_sqlite::queue::Queue;
    use sqlx::sqlite::{SqliteConnectOptions, SqlitePool};
    use tokio::sync::Notify;

    #[derive(serde::Serialize, serde::Deserialize)]
    struct Order {
        order_id: String,
    }

    /// The demo's crash: the run that writes `o-q2` on its first delivery stops there, its
    /// transaction open, and tells `main` to kill the consumer.
    #[derive(Clone)]
    struct Crash(Arc<Notify>);

    #[consumer]
    async fn record(
        State(crash): State<Crash>,
        Json(order): Json<Order>,
        count: DeliveryCount,
        mut tx: SqliteTx,
    ) -> Result<(), HandlerError> {
        sqlx::query("INSERT INTO orders (order_id) VALUES ($1) ON CONFLICT DO NOTHING")
            .bind(&order.order_id)
            .execute(&mut *tx)
            .await?;
        if order.order_id == "o-q2" && count == DeliveryCount::FIRST {
            crash.0.notify_one();
            std::future::pending::<()>().await;
        }
        Ok(())
    }

    async fn open(file: &std::path::Path) -> SqlitePool {
        let options = SqliteConnectOptions::new()
            .filename(file)
            .create_if_missing(true);
        SqlitePool::connect_with(options).await.unwrap()
    }

    pub(super) async fn run() {
        let file = std::env::temp_dir().join("delivery-quickstart-queue.db");
        let _ = std::fs::remove_file(&file);
        println!(
            "\nthe durable queue, in the SQLite file {} (the ack commits with the effect):",
            file.display()
        );
        let pool = open(&file).await;
        sqlx::query("CREATE TABLE orders (order_id TEXT PRIMARY KEY)")
            .execute(&pool)
            .await
            .unwrap();
        let queue = Queue::new("orders")
            .sqlite(pool.clone())
            .visibility_timeout(Duration::from_millis(500), Duration::from_secs(60));
        queue.migrate().await.unwrap();
        let mut tx = pool.begin().await.unwrap();
        for n in 1..=3 {
            let order = Order {
                order_id: format!("o-q{n}"),
            };
            queue
                .publish(&mut tx, &Unit::json(format!("q-{n}"), &order))
                .await
                .unwrap();
        }
        tx.commit().await.unwrap();
        println!("  published q-1, q-2, q-3 in one transaction");

        // Run 1, killed mid-effect: dropping the consumer is what a crash does to it.
        let crash = Crash(Arc::new(Notify::new()));
        let consumer = Consumer::new(queue.source())
            .state(crash.clone())
            .concurrency(1)
            .run(record);
        tokio::select! {
            _ = consumer => unreachable!("runs until killed"),
            () = crash.0.notified() => {}
        }
        pool.close().await;
        println!(
            "  run 1: q-1 applied; q-2's effect written, then the consumer died before its commit (dropped mid-run, as a crash drops it)"
        );

        // Run 2: a fresh start on the same file.
        let pool = open(&file).await;
        let queue = Queue::new("orders")
            .sqlite(pool.clone())
            .visibility_timeout(Duration::from_millis(500), Duration::from_secs(60));
        let applied: Vec<String> = sqlx::query_scalar("SELECT order_id FROM orders")
            .fetch_all(&pool)
            .await
            .unwrap();
        println!(
            "  restarted: orders in the file {applied:?}; {} units pending",
            queue.store().pending().await.unwrap()
        );
        let report = Consumer::new(queue.source())
            .state(Crash(Arc::new(Notify::new())))
            .shutdown_on(queue.store().idle())
            .run(record)
            .await;
        let applied: Vec<String> =
            sqlx::query_scalar("SELECT order_id FROM orders ORDER BY order_id")
                .fetch_all(&pool)
                .await
                .unwrap();
        println!(
            "  run 2: {} acked (q-2 came back after its visibility timeout); orders in the file {applied:?}, each once",
            report.acked
        );
        pool.close().await;
    }
}
