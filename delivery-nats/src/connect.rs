//! Connecting to a NATS server, and declaring a topology on it.

use crate::topology::NatsTopology;
use delivery_core::transport::TransportError;

/// Connects to `url` (`nats://host:port`).
pub async fn connect(url: &str) -> Result<async_nats::Client, TransportError> {
    async_nats::connect(url)
        .await
        .map_err(|e| crate::error::NATS.error("connecting to NATS", e))
}

/// Connects to `url` and declares `topology` ([`NatsTopology::declare`]).
pub async fn declare(
    url: &str,
    topology: &NatsTopology,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let client = connect(url).await?;
    topology
        .declare(&async_nats::jetstream::new(client))
        .await?;
    Ok(())
}
