//! A handler running longer than `ack_wait` is not delivered again while it runs: the source
//! keeps its delivery in progress (`+WPI`). Against the real NATS JetStream.
#![cfg(feature = "nats")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream;
use delivery::nats::{NatsSource, NatsTopology};
use delivery::{Consumer, DeliveryCount, HandlerError, State, consumer};

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

/// Runs `slow` over one unit until its first run has finished and been settled; returns every
/// run's delivery count.
async fn run_one_slow_unit(name: &str, in_progress_limit: Duration) -> Vec<u32> {
    let client = async_nats::connect(nats_url())
        .await
        .unwrap_or_else(|e| panic!("NATS unreachable at {}: {e}", nats_url()));
    let context = jetstream::new(client.clone());
    let stream = format!("{name}-{}", std::process::id());
    let topology = NatsTopology::new(&stream)
        .subjects([stream.clone()])
        .ack_wait(Duration::from_secs(1))
        .in_progress_limit(in_progress_limit)
        .max_deliver(10);
    for s in [
        &topology.stream,
        &topology.dead_letter_stream_name(),
        &topology.advisory_stream_name(),
    ] {
        let _ = context.delete_stream(s).await;
    }
    topology.declare(&context).await.unwrap();
    context
        .publish(stream.clone(), r#"{"slow":true}"#.into())
        .await
        .unwrap()
        .await
        .unwrap();

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
    let stream_handle = context.get_stream(&stream).await.unwrap();
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let info = stream_handle
            .consumer_info(&topology.durable)
            .await
            .unwrap()
            .clone();
        if info.ack_floor.stream_sequence >= 1 {
            break;
        }
    }
    let _ = stop_tx.send(());
    let report = consumer.await.unwrap();
    for s in [
        &topology.stream,
        &topology.dead_letter_stream_name(),
        &topology.advisory_stream_name(),
    ] {
        let _ = context.delete_stream(s).await;
    }
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
