//! rdkafka's errors as `TransportError`s: the one place that knows this client's errors.

use std::error::Error as StdError;

use delivery_core::transport::{ClientErrors, TransportErrorKind as Kind};

/// rdkafka's errors: `RDKAFKA.error(context, source)` is a failure while doing `context`, caused by
/// `source`, of the kind its chain of causes says.
pub(crate) const RDKAFKA: ClientErrors = ClientErrors::new(kind);

fn kind(error: &(dyn StdError + 'static)) -> Option<Kind> {
    use rdkafka::error::{KafkaError, RDKafkaErrorCode as C};
    let error = error.downcast_ref::<KafkaError>()?;
    if let KafkaError::ClientConfig(..) | KafkaError::ClientCreation(_) = error {
        return Some(Kind::Misconfigured);
    }
    Some(match error.rdkafka_error_code() {
        Some(
            C::BrokerTransportFailure
            | C::AllBrokersDown
            | C::Resolve
            | C::NetworkException
            | C::RequestTimedOut
            | C::OperationTimedOut
            | C::LeaderNotAvailable
            | C::NotLeaderForPartition
            | C::NotCoordinator
            | C::CoordinatorNotAvailable
            | C::BrokerNotAvailable,
        ) => Kind::ConnectionLost,
        Some(C::MessageTimedOut | C::PurgeQueue | C::PurgeInflight) => Kind::NotConfirmed,
        Some(
            C::InvalidConfig
            | C::UnknownTopicOrPartition
            | C::UnknownTopic
            | C::UnknownPartition
            | C::InvalidReplicationFactor
            | C::InvalidPartitions,
        ) => Kind::Misconfigured,
        Some(
            C::TopicAuthorizationFailed
            | C::GroupAuthorizationFailed
            | C::ClusterAuthorizationFailed
            | C::SaslAuthenticationFailed
            | C::MessageSizeTooLarge
            | C::InvalidRecord
            | C::PolicyViolation,
        ) => Kind::Refused,
        _ => Kind::Other,
    })
}
