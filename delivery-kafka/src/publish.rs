//! The one way this transport builds a producer whose sends are confirmed: idempotent, waiting
//! for every in-sync replica (`acks=all`). The source's returns and dead letters, the dead
//! letter's redrive and the relay sink all publish through a producer made here.

use rdkafka::ClientConfig;
use rdkafka::producer::FutureProducer;

use delivery_core::transport::TransportError;

/// A confirmed producer from `config`, which gets `enable.idempotence=true` and `acks=all` (both
/// spellings, so neither can contradict the other) over whatever it says.
pub(super) fn confirmed(config: &mut ClientConfig) -> Result<FutureProducer, TransportError> {
    config
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("request.required.acks", "all")
        .create()
        .map_err(|e| crate::error::RDKAFKA.error("creating the Kafka producer", e))
}

/// A confirmed producer from `config` (the common client configuration, see
/// [`KafkaTopology::client`](super::KafkaTopology::client)) for the retry, dead-letter and source topics: one record per
/// batch (those topics carry few records, and a consumer restarted from an offset inside a batch
/// is then served by every broker: tansu 0.6 returns nothing for a fetch that starts inside a
/// batch), giving up on a send after 30 s.
pub(super) fn one_record_per_batch(
    mut config: ClientConfig,
) -> Result<FutureProducer, TransportError> {
    config.set("linger.ms", "1").set("batch.num.messages", "1");
    if config.get("message.timeout.ms").is_none() && config.get("delivery.timeout.ms").is_none() {
        config.set("message.timeout.ms", "30000");
    }
    confirmed(&mut config)
}
