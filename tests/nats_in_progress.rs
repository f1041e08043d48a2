//! A handler running longer than `ack_wait` is not delivered again while it runs, nor are the
//! units of its pull batch waiting behind it: the source keeps their deliveries in progress
//! (`+WPI`). Against the real NATS JetStream.
#![cfg(feature = "nats")]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream;
use delivery::nats::{NatsSource, NatsTopology};
use delivery::{Consumer, DeliveryCount, HandlerError, State, UnitId, consumer};

fn nats_url() -> String {
    std::env::var("NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into())
}

#[derive(Clone, Default)]
struct Runs(Arc<Mutex<Vec<u32>>>);

/// Runs for four times the topology's `ack_wait` (1 s), then succeeds.
#[consumer]
async fn slow(State(runs): State<Runs>, count: DeliveryCount) -> Result<(), HandlerError> {
    runs.0.lock().unwrap().push(count.get());
    tokio::time::sleep(Duration::from_secs(4)).await;
    Ok(())
}

/// `topology` (subjects: its stream's name) declared afresh, with `units` units published.
async fn declared(
    topology: NatsTopology,
    units: usize,
) -> (async_nats::Client, jetstream::Context, NatsTopology) {
    let client = async_nats::connect(nats_url())
        .await
        .unwrap_or_else(|e| panic!("NATS unreachable at {}: {e}", nats_url()));
    let context = jetstream::new(client.clone());
    let subject = topology.stream.clone();
    let topology = topology.subjects([subject]);
    delete(&context, &topology).await;
    topology.declare(&context).await.unwrap();
    for _ in 0..units {
        context
            .publish(topology.stream.clone(), r#"{"slow":true}"#.into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    (client, context, topology)
}

async fn delete(context: &jetstream::Context, topology: &NatsTopology) {
    for s in [
        &topology.stream,
        &topology.dead_letter_stream_name(),
        &topology.advisory_stream_name(),
    ] {
        let _ = context.delete_stream(s).await;
    }
}

/// Waits until the durable consumer's first `units` units are settled and none is pending.
async fn settled(context: &jetstream::Context, topology: &NatsTopology, units: u64) {
    let stream = context.get_stream(&topology.stream).await.unwrap();
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let info = stream.consumer_info(&topology.durable).await.unwrap();
        if info.ack_floor.stream_sequence >= units && info.num_ack_pending == 0 {
            return;
        }
    }
}

/// Runs `slow` over one unit until its first run has finished and been settled; returns every
/// run's delivery count.
async fn run_one_slow_unit(name: &str, in_progress_limit: Duration) -> Vec<u32> {
    let topology = NatsTopology::new(format!("{name}-{}", std::process::id()))
        .ack_wait(Duration::from_secs(1))
        .in_progress_limit(in_progress_limit)
        .max_deliver(10);
    let (client, context, topology) = declared(topology, 1).await;

    let source = NatsSource::with_client(client.clone(), topology.clone())
        .await
        .unwrap();
    let runs = Runs::default();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let consumer = tokio::spawn(
        Consumer::new(source)
            .state(runs.clone())
            .concurrency(4)
            .shutdown_on(async move {
                let _ = stop_rx.await;
            })
            .run(slow),
    );
    // Until the first run is settled (acknowledged, by the consumer's count).
    settled(&context, &topology, 1).await;
    let _ = stop_tx.send(());
    let report = consumer.await.unwrap();
    delete(&context, &topology).await;
    assert!(report.acked >= 1, "{report:?}");
    runs.0.lock().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_handler_is_not_redelivered_while_it_runs() {
    let runs = run_one_slow_unit("nats-wpi", Duration::from_secs(60)).await;
    assert_eq!(runs, [1], "one run, never delivered again under it");
}

/// The control: with no time in progress allowed, the same handler is delivered again while it
/// runs — so the test above can fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_in_progress_limit_jetstream_delivers_again() {
    let runs = run_one_slow_unit("nats-wpi-off", Duration::ZERO).await;
    assert!(runs.len() >= 2, "delivered again while running: {runs:?}");
    assert_eq!(runs[..2], [1, 2]);
}

/// Each run of a unit, by unit id: its delivery count.
#[derive(Clone, Default)]
struct RunsById(Arc<Mutex<BTreeMap<String, Vec<u32>>>>);

/// Runs for one and a half times the topology's `ack_wait` (1 s), then succeeds.
#[consumer]
async fn slower_than_ack_wait(
    State(runs): State<RunsById>,
    id: UnitId,
    count: DeliveryCount,
) -> Result<(), HandlerError> {
    runs.0
        .lock()
        .unwrap()
        .entry(id.to_string())
        .or_default()
        .push(count.get());
    tokio::time::sleep(Duration::from_millis(1500)).await;
    Ok(())
}

/// Units pulled in one batch wait in the source while the one before them runs, longer than
/// `ack_wait` in all: they are kept in progress, so JetStream does not hand them to the other
/// consumer of the durable meanwhile, and each unit is handled once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn units_waiting_in_the_pull_batch_are_not_redelivered_to_another_consumer() {
    const UNITS: usize = 6;
    let topology = NatsTopology::new(format!("nats-wpi-batch-{}", std::process::id()))
        .ack_wait(Duration::from_secs(1))
        .batch(4)
        .max_deliver(10);
    let (client, context, topology) = declared(topology, UNITS).await;
    let runs = RunsById::default();
    let (stop, _) = tokio::sync::broadcast::channel::<()>(1);
    let mut consumers = Vec::new();
    for _ in 0..2 {
        let source = NatsSource::with_client(client.clone(), topology.clone())
            .await
            .unwrap();
        let mut stopped = stop.subscribe();
        consumers.push(tokio::spawn(
            Consumer::new(source)
                .state(runs.clone())
                .concurrency(1)
                .shutdown_on(async move {
                    let _ = stopped.recv().await;
                })
                .run(slower_than_ack_wait),
        ));
    }
    tokio::time::timeout(
        Duration::from_secs(60),
        settled(&context, &topology, UNITS as u64),
    )
    .await
    .expect("every unit settled within 60 s");
    let _ = stop.send(());
    for consumer in consumers {
        consumer.await.unwrap();
    }
    delete(&context, &topology).await;
    let runs = runs.0.lock().unwrap().clone();
    assert_eq!(runs.len(), UNITS, "every unit ran: {runs:?}");
    assert!(
        runs.values().all(|counts| counts == &[1]),
        "each unit ran once, on its first delivery: {runs:?}"
    );
}
