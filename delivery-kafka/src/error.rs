//! rdkafka's errors as [`TransportError`]s: the one place that knows this client's errors.

use std::error::Error as StdError;

use delivery_core::transport::{TransportError, TransportErrorKind as Kind};

/// A client error a [`TransportError`] can hold.
pub(crate) trait Error: StdError + Send + Sync + 'static {}
impl<E: StdError + Send + Sync + 'static> Error for E {}

/// A failure while doing `context`, caused by `source`, of the kind its chain of causes says.
pub(crate) fn transport_error(context: &'static str, source: impl Error) -> TransportError {
    TransportError::classified(context, source, one)
}

fn one(error: &(dyn StdError + 'static)) -> Option<Kind> {
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
