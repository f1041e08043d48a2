//! The `outbox_relay` example measured as a user runs it, against a raw lapin publisher doing the
//! same publishes, in the same run: records per second and the ratios.
//!
//! The example's side is `examples/outbox_relay.rs` itself (its `relay`: the same settings from
//! the environment — `WINDOW`, `BATCH`, `LEASE_MS`, defaults 1024, 256, 60 s —, its pool of 4
//! connections, its `info` logging and its progress line), relaying `RECORDS` seeded records
//! (default 20000) from a PostgreSQL outbox table of this bench's own into the example's durable
//! classic queue `orders.events.audit`, until none is pending. The raw side publishes the same
//! bodies under the same ids to the same exchange and queue, persistent and `mandatory`, with
//! `RAW_WINDOW` confirms outstanding (default 256, whatever the example's `WINDOW`), and reads
//! nothing from a database. It runs twice a round: with the same properties as the example's
//! publishes (`content_type` and the record's stamp header, which RabbitMQ decodes on every
//! publish: the same message is the same work for the broker), the ratio reported first; and
//! bare (`message_id` and `delivery_mode` only), the ratio reported second. Every run starts
//! with the queue purged; the outbox is seeded before the example's run starts, outside the
//! measurement.
//!
//! `cargo bench --features postgres,lapin --bench relay_example`. Env: `DATABASE_URL`,
//! `AMQP_URL`, `RECORDS`, `ROUNDS` (default 3; interleaved, the side going first alternating),
//! `BENCH_ONLY=hand|delivery` (one side only, for profiling). Target: at least 0.85 of the raw
//! publisher.

use delivery::lapin::Connection;
use delivery::lapin::options::QueuePurgeOptions;
use delivery::outbox::{Outbox, PgStore};
use sqlx::AssertSqlSafe;

#[path = "../examples/outbox_relay.rs"]
#[allow(dead_code)] // the example's `main` and its seeding are not run here
mod example;
mod support;
use support::{Run, env_or, interleaved, measure, report};
#[path = "support/raw_publisher.rs"]
mod raw_publisher;
use raw_publisher::{Properties, confirm_channel, raw_pipelined};

/// The seeded records' bodies and ids, as the example's `--seed` writes them.
fn orders(n: usize) -> Vec<(String, Vec<u8>)> {
    (0..n as i64)
        .map(|i| {
            let order = i + 1;
            let record =
                example::order_placed(order, &format!("c-{}", i % 97), (i % 500 + 1) * 100)
                    .unwrap();
            (format!("order-{order}-placed"), record.payload().to_vec())
        })
        .collect()
}

/// A fresh outbox of `n` pending records (written 1000 per transaction, to seed quickly).
async fn seed(store: &PgStore, outbox: &Outbox, n: usize) {
    sqlx::raw_sql(AssertSqlSafe(format!("TRUNCATE {}", outbox.table_name())))
        .execute(store.pool())
        .await
        .unwrap();
    let orders: Vec<i64> = (1..=n as i64).collect();
    for chunk in orders.chunks(1000) {
        let mut tx = store.pool().begin().await.unwrap();
        for &order in chunk {
            let i = order - 1;
            let record =
                example::order_placed(order, &format!("c-{}", i % 97), (i % 500 + 1) * 100)
                    .unwrap();
            outbox.write(&mut tx, record).await.unwrap();
        }
        tx.commit().await.unwrap();
    }
}

#[tokio::main]
async fn main() {
    let n: usize = env_or("RECORDS", 20_000);
    let rounds: usize = env_or("ROUNDS", 3);
    let raw_window: usize = env_or("RAW_WINDOW", 256);
    let database_url: String = env_or(
        "DATABASE_URL",
        "postgres://postgres@127.0.0.1:5432/test".to_owned(),
    );
    let amqp_url: String = env_or(
        "AMQP_URL",
        "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned(),
    );
    example::init_tracing();
    let settings = example::Settings::from_env();

    let pool = example::pool_options()
        .connect(&database_url)
        .await
        .expect("PostgreSQL unreachable");
    let outbox = Outbox::table(&format!("relay_example_bench_{}", std::process::id()));
    let store = outbox.postgres(pool);
    store.migrate().await.unwrap();

    let connection = Connection::connect(&amqp_url, Default::default())
        .await
        .expect("RabbitMQ unreachable");
    example::declare(&connection).await.unwrap();
    let admin = connection.create_channel().await.unwrap();
    let raw = confirm_channel(&connection).await;
    let purge = async || {
        admin
            .queue_purge(example::QUEUE.into(), QueuePurgeOptions::default())
            .await
            .unwrap();
    };
    let bodies = orders(n);
    let raw_run = async |properties: Properties| {
        purge().await;
        let messages = bodies.iter().cloned();
        let run = measure(n as u64, async {
            raw_pipelined(
                &raw,
                raw_window,
                example::EXCHANGE,
                "order.placed",
                properties,
                messages,
            )
            .await;
        })
        .await;
        println!(
            "raw lapin publisher ({properties:?}): {:.0} messages/s",
            run.rate
        );
        run
    };
    let mut bare = Vec::new();

    let (hand, ours) = interleaved(
        rounds,
        async || {
            // Both raw runs of a round, the one going first alternating.
            let bare_first = bare.len() % 2 == 1;
            if bare_first {
                bare.push(raw_run(Properties::Bare).await);
            }
            let like = raw_run(Properties::LikeTheSink).await;
            if !bare_first {
                bare.push(raw_run(Properties::Bare).await);
            }
            like
        },
        async || -> Run {
            seed(&store, &outbox, n).await;
            purge().await;
            // The example connects to RabbitMQ as it starts: so does each of its runs here.
            let connection = Connection::connect(&amqp_url, Default::default())
                .await
                .unwrap();
            let run = measure(n as u64, async {
                let report = example::relay(&store, connection, &settings, store.idle())
                    .await
                    .unwrap();
                assert_eq!(report.delivered, n as u64, "{report:?}");
            })
            .await;
            println!("outbox_relay example: {:.0} records/s", run.rate);
            run
        },
    )
    .await;
    let what = format!(
        "{n} records, example window {} batch {}, raw window {raw_window}, {rounds} rounds",
        settings.window, settings.batch
    );
    report(
        "relay_example",
        &what,
        "lapin publisher, the sink's properties",
        &hand,
        &ours,
    );
    report(
        "relay_example (bare raw)",
        &what,
        "lapin publisher, bare properties",
        &bare,
        &ours,
    );
    println!("target: delivery / raw publisher >= 0.85");

    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP TABLE {} CASCADE",
        outbox.table_name()
    )))
    .execute(store.pool())
    .await
    .unwrap();
    purge().await;
}
