//! Kafka through rdkafka (feature `kafka`): a [`Source`](delivery_core::Source) over one topic read by a
//! consumer group, whose offsets are committed only through the commit
//! [watermark](delivery_core::offset), and the topology helper that creates its topics.
//!
//! - **Acknowledgement is an offset commit**, and an offset confirms every unit before it (rule 1).
//!   `enable.auto.commit` is off; units of a partition are handled concurrently, and the offset
//!   committed only advances over the contiguous run of units whose disposition is final: acked,
//!   or moved to the retry or dead-letter topic with the broker's acknowledgement (`acks=all`,
//!   awaited). Commits are batched — every [`commit_interval`](KafkaTopology::commit_interval),
//!   one commit for every partition that advanced — and flushed when a rebalance revokes
//!   partitions and when the source is dropped.
//! - **Return**: Kafka keeps no delivery count, so the count travels with the unit. A failed unit
//!   is republished, intact (key, payload, headers), to the retry topic with
//!   [`delivery_core::headers::DELIVERY_COUNT`] incremented and the time it is due after the runtime's backoff
//!   ([`delivery_core::headers::DUE_MS`]); once the broker acknowledged that write, its offset is final. The same
//!   source reads the retry topic in the same group, holds each unit until it is due, and hands it
//!   to the same handler. A failed publish is tried again with a growing pause; the unit's offset
//!   stays where it is meanwhile, so nothing is committed past it.
//! - **Holding back the retry topic**: returned units not yet due are held in memory, at most
//!   [`max_waiting`](KafkaTopology::max_waiting) of them. At that many the source pauses its
//!   retry-topic partitions, so the rest wait in the broker, and resumes them once half as many or
//!   fewer are held; the source topic is never paused, and due units are handed out meanwhile.
//!   librdkafka discards what it had fetched of a paused partition and not yet handed out, and
//!   fetches again after the last unit handed out, so nothing is skipped; partitions assigned
//!   while paused are paused as they are assigned. A unit that still arrives at the limit is held
//!   all the same — never dropped, it holds its partition's watermark — and the retry partitions
//!   are paused again, so the count can pass the limit by such stragglers. The count held is the
//!   gauge `delivery_retry_waiting{source}` (`source`: the topic).
//! - **The bound is the carried count**: [`Source::max_deliveries`](delivery_core::Source::max_deliveries)
//!   is the topology's [`max_deliveries`](KafkaTopology::max_deliveries), checked by the runtime
//!   against [`delivery_core::headers::DELIVERY_COUNT`]; the first delivery from the source topic counts 1.
//! - **A crash is a delivery too** (the crash-loop count, below): a unit whose handling kills its
//!   consumer is never returned, so its carried count never moves; the group's attempts topic
//!   counts those deliveries, and past the bound the runtime dead-letters the unit
//!   ([`ReasonKind::Exhausted`](delivery_core::ReasonKind::Exhausted)) before any handler runs.
//! - **Per group**: the retry, dead-letter and attempts topics are named after the topic *and the
//!   group* by default (`<topic>.<group>.retry`, `.dlq`, `.attempts`), so two groups reading one
//!   topic never handle, count or dead-letter each other's failures.
//! - **One client configuration**: [`KafkaTopology::client`] holds the librdkafka properties every
//!   client shares (security, SASL, TLS, timeouts); the consumer, the producer of returns and dead
//!   letters, the attempts reader, the admin client of [`KafkaTopology::declare`],
//!   [`KafkaDeadLetters`] and [`KafkaSink::from_topology`] are all built from it, each setting its
//!   role's own keys over it. Bring your own rdkafka `ClientConfig` with
//!   [`KafkaTopology::with_client_config`]: its properties become the topology's, so they reach
//!   every one of those clients. Features `kafka-ssl` and `kafka-sasl` (GSSAPI) build librdkafka
//!   with TLS and SASL.
//! - **Dead letter**: past the bound, malformed or rejected, the unit is published intact to the
//!   dead-letter topic with [`delivery_core::headers::DEAD_LETTER_REASON`], [`delivery_core::headers::DEAD_LETTER_DETAIL`], its
//!   source coordinates ([`delivery_core::headers::DEAD_LETTER_SOURCE_TOPIC`], [`delivery_core::headers::DEAD_LETTER_SOURCE_PARTITION`],
//!   [`delivery_core::headers::DEAD_LETTER_SOURCE_OFFSET`] — where it was first read, also for a unit that went
//!   through the retry topic) and [`delivery_core::headers::DEAD_LETTER_DELIVERY_COUNT`]; only once the broker
//!   acknowledged it is its offset final.
//! - **Operator side**: [`KafkaDeadLetters`] is the dead-letter topic's
//!   [`DeadLetters`](delivery_core::DeadLetters): count, list, peek, redrive under the same id, purge. A
//!   redrive goes to the group's own retry topic, due at once, so only the group that
//!   dead-lettered the unit handles it again (per group, as above). Kafka removes no single record, so the records an operator redrove or purged
//!   are recorded in a compacted topic of their own
//!   ([`KafkaTopology::removed_topic_name`]) and no longer listed or counted.
//! - **Busy handlers keep the group**: librdkafka leaves the group when the consumer is not polled
//!   for `max.poll.interval.ms` (set it in [`KafkaTopology::client`]; default 5 minutes; below
//!   45 s set `session.timeout.ms` there too, no higher than it: the attempts reader is a consumer
//!   too, and librdkafka refuses a poll interval below its session timeout), and the
//!   unit a slow handler is still running would be handed to another member and run again. The
//!   source polls while the runtime asks it for units; once it has not for a third of that
//!   interval (every handler place busy), a task of its own takes the poll over: it pauses every
//!   assigned partition, so nothing is fetched that nobody asked for, and polls, which keeps the
//!   member in the group and serves rebalances as usual. The next `receive` takes the poll back
//!   and resumes the partitions, except those the source holds paused itself. Offsets are still
//!   committed only through the watermark. See `keeper.rs`.
//! - **Rebalance**: a revoked partition's watermark is dropped after its final prefix is committed;
//!   units still in flight for it are never committed by this consumer, and the new owner receives
//!   them again from the committed offset — the idempotent handler makes that harmless (rule 3).
//!
//! # The crash-loop count
//!
//! The count must live somewhere the broker keeps *before* the handler runs, or a unit that kills
//! its consumer every time is read again from the same committed offset with the same count,
//! forever, and its partition never commits again (rule 2). Kafka's commit metadata would be the
//! natural place, but tansu 0.6 does not return it from an offset fetch, so the record is a topic
//! of the group's own, [`KafkaTopology::attempts_topic_name`] (`<topic>.<group>.attempts`, one
//! partition per partition of the topic and of the retry topic, compacted; only the last record
//! of a partition is read). A record says "the unit at offset X is being delivered, attempt n",
//! or, with attempt 0, "the run ended cleanly".
//!
//! - **A run** is a partition's units from its assignment to this source until it is revoked or
//!   the source stops. Its first unit (the committed position) reads the partition's last record
//!   and, before anything of the partition is handed out, records its own delivery (attempt 1),
//!   confirmed by the broker. A clean stop records a clean end, and so does a revocation, for
//!   each partition with no unit still running: a partition revoked while a unit of it runs keeps
//!   its last record (that unit may yet kill its consumer), so its next owner reads it as after a
//!   run that died, and a slow unit that kills its consumer under rebalances is still counted.
//! - **After a run that died**: if the last record is not a clean end, the earlier run died with
//!   some unit unfinished — maybe the first, maybe one after it that ran concurrently. The
//!   partition is then read **one unit at a time** for 100 units: before each is handed out, the
//!   offset is committed up to it (everything before it is final) and its delivery recorded,
//!   attempt n + 1 if the last record names the same offset, else 1. A unit that kills the
//!   consumer now is the committed position, named by the last record: the next run counts it
//!   once more, and once the count (carried count + attempts − 1) passes the bound the runtime
//!   dead-letters it intact, as exhausted, without running a handler; the partition moves on.
//! - **How many runs**: the first run, concurrent, may die on a unit that was not its first, and
//!   that delivery is not counted; every later one is. So a unit that kills every consumer
//!   reaches the dead letter within `max_deliveries + 1` crashes (`+ 2` runs). A unit handed out
//!   alone is counted once per run that died while it was out, even if another unit killed the
//!   process: as a quorum queue counts every unacknowledged message of a crashed consumer. Since
//!   units are handed out alone after a crash, an innocent unit gains at most one such count.
//! - **Cost**: on the hot path, nothing per unit: one read and one confirmed write per partition
//!   per assignment (at its first unit), and a few records at revocation and shutdown. Only after
//!   a run that died is the partition read alone, one commit and one confirmed write per unit,
//!   for 100 units, then concurrently again. While read alone, a partition whose units arrive
//!   faster is paused, so the rest wait in the broker.
//!
//! # The unit id
//!
//! The [`UnitId`](delivery_core::UnitId) is the [`delivery_core::headers::MESSAGE_ID`] header (`message-id`, what the
//! outbox's Kafka sink writes) when present and non-empty UTF-8, otherwise the unit's place in its
//! log, `<topic>:<partition>:<offset>`. A unit republished to the retry topic carries its id in
//! `message-id`, so every delivery has the same id.
//!
//! ```no_run
//! use delivery::{consumer, Consumer, HandlerError, Json};
//! use delivery::kafka::{KafkaSource, KafkaTopology};
//!
//! #[derive(serde::Deserialize)]
//! struct Order { order_id: String }
//!
//! #[consumer]
//! async fn handle(Json(order): Json<Order>) -> Result<(), HandlerError> {
//!     let _ = order.order_id;
//!     Ok(())
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let brokers = "127.0.0.1:9092";
//! let topology = KafkaTopology::new("orders", "billing").max_deliveries(5);
//! topology.declare(brokers).await?;
//! let source = KafkaSource::connect(brokers, topology).await?;
//! Consumer::new(source).concurrency(16).run(handle).await;
//! # Ok(()) }
//! ```

#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod admit;
mod attempts;
mod book;
mod codec;
mod config;
mod dead_letter;
mod error;
mod keeper;
mod keeper_task;
mod lock;
mod partition;
mod publish;
mod settle;
mod shared;
mod sink;
mod source;
mod topology;

pub use codec::headers_of;
pub use dead_letter::KafkaDeadLetters;
pub use settle::KafkaHandle;
pub use sink::{DEFAULT_DELIVERY_TIMEOUT, KafkaSink, MESSAGE_ID};
pub use source::KafkaSource;
pub use topology::KafkaTopology;

/// The Kafka client (crate `rdkafka`), re-exported so its version always matches the one this
/// transport is built with.
pub use ::rdkafka as client;
