//! The one place a client's configuration starts.

use rdkafka::ClientConfig;

/// A client configuration for `brokers` with what every client of this module shares: the
/// user's common properties ([`KafkaTopology::client`](crate::topology::KafkaTopology::client), which
/// [`KafkaTopology::with_client_config`](crate::topology::KafkaTopology::with_client_config)
/// fills from the user's own `ClientConfig`), then `bootstrap.servers`. The one place a client's
/// configuration starts — the consumer, the producers, the attempts reader, the admin client,
/// the dead letter's reader and the relay's sink — each role setting its own keys over it.
pub(crate) fn config(
    brokers: &str,
    common: &std::collections::BTreeMap<String, String>,
) -> ClientConfig {
    let mut config = ClientConfig::new();
    for (key, value) in common {
        config.set(key, value);
    }
    config.set("bootstrap.servers", brokers);
    config
}

#[cfg(test)]
mod tests {
    use crate::topology::KafkaTopology;

    /// Every client the transport builds starts from the topology's common properties: a setting
    /// given once reaches the source's producer (returns, dead letters, redrives) and the
    /// attempts reader too, which the public API cannot reach on their own.
    #[test]
    fn the_common_properties_reach_every_client() {
        let topology = KafkaTopology::new("orders", "billing")
            .client_property("client.id", "acme")
            .client_property("socket.timeout.ms", "1234");
        let config = topology.client_config("127.0.0.1:9092");
        assert_eq!(config.get("client.id"), Some("acme"));
        assert_eq!(config.get("socket.timeout.ms"), Some("1234"));
        assert_eq!(config.get("bootstrap.servers"), Some("127.0.0.1:9092"));

        let bad = topology.client_property("security.protocol", "carrier-pigeon");
        let config = bad.client_config("127.0.0.1:9092");
        let producer = crate::publish::one_record_per_batch(config.clone())
            .err()
            .expect("the producer refuses the setting");
        assert!(
            producer.to_string().contains("security.protocol"),
            "{producer}"
        );
        let reader = crate::attempts::Attempts::new(bad.attempts_topic_name(), config)
            .err()
            .expect("the attempts reader refuses the setting");
        assert!(reader.to_string().contains("security.protocol"), "{reader}");
    }
}
