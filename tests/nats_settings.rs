//! The durable consumer's settings are read from the server, not trusted from the topology:
//! an ack policy other than explicit is refused at connect, and the bound and `ack_wait` are the
//! server's. Against the real NATS JetStream; fails, never skips, when it is unreachable.
#![cfg(feature = "nats")]

use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use delivery::nats::{NatsSource, NatsTopology};
use delivery::transport::Source;

fn nats_url() -> String {
    std::env::var("NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into())
}

async fn fresh(name: &str) -> (jetstream::Context, NatsTopology) {
    let client = async_nats::connect(nats_url())
        .await
        .unwrap_or_else(|e| panic!("NATS unreachable at {}: {e}", nats_url()));
    let context = jetstream::new(client);
    let stream = format!("settings-{name}-{}", std::process::id());
    let topology = NatsTopology::new(&stream).subjects([stream.clone()]);
    for name in [
        topology.stream.clone(),
        topology.dead_letter_stream_name(),
        topology.advisory_stream_name(),
    ] {
        let _ = context.delete_stream(&name).await;
    }
    (context, topology)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_without_explicit_acks_is_refused_at_connect() {
    for policy in [consumer::AckPolicy::All, consumer::AckPolicy::None] {
        let (context, topology) = fresh(&format!("{policy:?}").to_lowercase()).await;
        let stream = context
            .create_stream(topology.stream_config())
            .await
            .unwrap();
        stream
            .create_consumer(consumer::pull::Config {
                ack_policy: policy,
                ..topology.consumer_config()
            })
            .await
            .unwrap();
        let refused = NatsSource::connect(&nats_url(), topology.clone()).await;
        let error = refused.err().expect("refused").to_string();
        assert!(
            error.contains("ack policy") && error.contains("explicit"),
            "{error}"
        );
        let _ = context.delete_stream(&topology.stream).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bound_and_ack_wait_are_the_servers() {
    let (context, topology) = fresh("bound").await;
    let declared = topology
        .clone()
        .max_deliver(3)
        .ack_wait(Duration::from_secs(9));
    delivery::nats::declare(&nats_url(), &declared)
        .await
        .unwrap();
    // The application's topology says otherwise; the server's consumer is what delivers.
    let source = NatsSource::connect(&nats_url(), topology.max_deliver(7))
        .await
        .unwrap();
    assert_eq!(source.max_deliveries().map(|n| n.get()), Some(3));
    assert_eq!(
        source.keep_alive().map(|k| k.every),
        Some(Duration::from_secs(3)),
        "kept in progress every third of the server's ack_wait"
    );
    drop(source);
    for name in [
        declared.stream.clone(),
        declared.dead_letter_stream_name(),
        declared.advisory_stream_name(),
    ] {
        let _ = context.delete_stream(&name).await;
    }
}
