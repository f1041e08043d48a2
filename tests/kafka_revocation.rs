//! A rebalance that revokes a partition while its unit is still running, against a real
//! Kafka-protocol broker (tansu on 127.0.0.1:9092, or `KAFKA_BROKERS`): the revocation is no
//! clean end for that partition, so the crash-loop count carries over it — the new owner's
//! delivery of the unit is its second, not a first again. (Were it a clean end, a slow unit that
//! kills its consumer under rebalances would start from 1 on every run and never reach the dead
//! letter.) Fails, never skips, when the broker is unreachable.
#![cfg(feature = "kafka")]

#[path = "support/kafka.rs"]
mod kafka_support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use delivery::kafka::{KafkaSource, KafkaTopology};
use delivery::{Consumer, DeliveryCount, HandlerError, State, UnitId, consumer};
use kafka_support::{brokers, declare, produce, unique_name};

/// Every delivery the members of the group were handed, with its count; each is held until the
/// gate opens (running across the rebalance).
#[derive(Clone)]
struct Group {
    deliveries: Arc<Mutex<Vec<(String, u32)>>>,
    gate: Arc<tokio::sync::Semaphore>,
}

/// Each delivery: the unit's id and its delivery count.
type Deliveries = [(String, u32)];

#[consumer]
async fn hold(
    id: UnitId,
    count: DeliveryCount,
    State(group): State<Group>,
) -> Result<(), HandlerError> {
    group
        .deliveries
        .lock()
        .unwrap()
        .push((id.to_string(), count.get()));
    let _open = group.gate.acquire().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unit_running_across_a_revocation_is_counted_again_by_the_new_owner() {
    let topic = unique_name("kafka-revocation");
    let topology = KafkaTopology::new(&topic, format!("{topic}-group"))
        .partitions(1)
        .max_deliveries(5)
        .session_timeout(Duration::from_secs(6))
        .commit_interval(Duration::from_millis(100));
    declare(&topology).await;
    produce(&topic, "slow", 1, |_| "{}".to_owned()).await;

    let group = Group {
        deliveries: Arc::default(),
        gate: Arc::new(tokio::sync::Semaphore::new(0)),
    };
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let member = || {
        let (topology, group, mut stopped) = (topology.clone(), group.clone(), stopped.clone());
        tokio::spawn(async move {
            let source = KafkaSource::connect(&brokers(), topology).await.unwrap();
            Consumer::new(source)
                .state(group)
                .drain_deadline(Duration::from_secs(5))
                .shutdown_on(async move {
                    let _ = stopped.wait_for(|stop| *stop).await;
                })
                .run(hold)
                .await
        })
    };
    let deliveries = || group.deliveries.lock().unwrap().clone();
    let until = async |what: &str, done: &dyn Fn(&Deliveries) -> bool| {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while !done(&deliveries()) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "not within 60 s: {what}; deliveries {:?}",
                deliveries()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };

    let first = member();
    until("the first member is handed the unit", &|d| d.len() == 1).await;
    // A second member joins: the group revokes the partition from the first while its unit
    // still runs, and one of them owns it next and reads the unit again.
    let second = member();
    until(
        "the partition's next owner is handed the unit again",
        &|d| d.len() >= 2,
    )
    .await;
    group.gate.add_permits(1000);
    stop.send_replace(true);
    let _ = first.await;
    let _ = second.await;

    let deliveries = deliveries();
    assert_eq!(deliveries[0], ("slow-0".to_owned(), 1));
    assert_eq!(
        deliveries[1],
        ("slow-0".to_owned(), 2),
        "the delivery after the revocation is counted as the second: the revocation recorded no \
         clean end while the unit ran (all deliveries: {deliveries:?})"
    );
}
