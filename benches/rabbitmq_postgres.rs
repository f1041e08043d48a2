//! The RabbitMQ transport with a real effect — `examples/rabbitmq_consumer.rs`'s orders
//! transaction in PostgreSQL — against a hand-written lapin + sqlx loop doing the same
//! transaction, on the real broker and database.
//!
//!     cargo bench --features lapin,postgres --bench rabbitmq_postgres
//!
//! Publishes `BENCH_N` orders (default 20000), stamped and with message ids as a producer of the
//! example's contract does, to a fresh quorum queue (the example's topology: delivery limit 5, a
//! dead letter), prefetch 100; empties the effect tables; and drains them at concurrency 32 with a
//! pool of 32 connections:
//!
//! - **delivery**: `RabbitSource` + `Consumer` running the example's own handler
//!   (`examples/support/orders.rs`, `apply_order`), in each ack mode (`BENCH_ACKS=coalesced` or
//!   `per-unit` runs one; both by default);
//! - **hand-written**: lapin's consumer stream, `for_each_concurrent(32)`, the same statements in
//!   one sqlx transaction per unit, then `basic.ack` of that delivery.
//!
//! Each side is timed from its consumer's start to its last acknowledgement. `BENCH_ROUNDS`
//! rounds (default 3), interleaved, the first side alternating; prints every run, the median
//! rates and their ratio, and the median CPU time the bench process spent per unit (PostgreSQL's
//! and the broker's not included).

use delivery::lapin::options::BasicAckOptions;
use delivery::rabbitmq::{AckMode, RabbitSource, RabbitTopology};
use futures_util::StreamExt;

mod support;
use support::{Run, env_or, interleaved, measure, report};
#[path = "support/rabbitmq.rs"]
mod rabbitmq;
use rabbitmq::{ack_modes, fresh, subscribe, url};
#[path = "support/orders_pg.rs"]
mod orders_pg;
use orders_pg::{OrderPlaced, Schema, apply_by_hand, check, order_unit};

const CONCURRENCY: usize = 32;
const PREFETCH: u16 = 100;

/// A fresh queue holding `n` orders, and empty effect tables.
async fn fresh_orders(topology: &RabbitTopology, pg: &Schema, n: u64) {
    pg.empty().await;
    fresh(topology, n, |i| {
        let unit = order_unit(i);
        (
            unit.payload().to_vec(),
            delivery::rabbitmq::properties_of(&unit),
        )
    })
    .await;
}

async fn through_transport(topology: &RabbitTopology, pg: &Schema, n: u64, mode: AckMode) -> Run {
    fresh_orders(topology, pg, n).await;
    let source = RabbitSource::connect(url(), topology.clone())
        .await
        .unwrap()
        .ack_mode(mode);
    orders_pg::drain(source, pg, n, CONCURRENCY).await
}

async fn hand_written(topology: &RabbitTopology, pg: &Schema, n: u64) -> Run {
    fresh_orders(topology, pg, n).await;
    let db = &pg.db;
    let (connection, _channel, consumer) = subscribe(topology).await;
    let run = measure(n, async {
        consumer
            .take(n as usize)
            .for_each_concurrent(CONCURRENCY, |delivery| async move {
                let delivery = delivery.unwrap();
                let id = delivery.properties.message_id().as_ref().unwrap().as_str();
                let stamp = rabbitmq::stamp_of(&delivery);
                let order: OrderPlaced = serde_json::from_slice(&delivery.data).unwrap();
                apply_by_hand(db, id, stamp, &order).await.unwrap();
                assert!(delivery.ack(BasicAckOptions::default()).await.unwrap());
            })
            .await;
    })
    .await;
    let _ = connection.close(200, "ok".into()).await;
    check(db, n).await;
    run
}

#[tokio::main]
async fn main() {
    let n: u64 = env_or("BENCH_N", 20_000);
    let rounds: usize = env_or("BENCH_ROUNDS", 3).max(1);
    let name = format!("bench_rmq_pg_{}", std::process::id());
    let topology = RabbitTopology::new(name.replace('_', "-"))
        .delivery_limit(5)
        .prefetch(PREFETCH);
    let pg = Schema::create(&name, CONCURRENCY as u32).await;

    for (label, mode) in ack_modes() {
        let (hand, ours) = interleaved(
            rounds,
            async || hand_written(&topology, &pg, n).await,
            async || through_transport(&topology, &pg, n, mode).await,
        )
        .await;
        report(
            &format!("orders into PostgreSQL, concurrency {CONCURRENCY}, {label}"),
            &format!("{n} units, prefetch {PREFETCH}, pool {CONCURRENCY}"),
            "lapin + sqlx",
            &hand,
            &ours,
        );
    }

    pg.remove().await;
    rabbitmq::delete(&topology).await;
}
