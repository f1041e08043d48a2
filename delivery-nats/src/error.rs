//! async-nats's errors as [`TransportError`]s: the one place that knows this client's errors.

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
    use async_nats::jetstream::context::{PublishError, PublishErrorKind as P};
    use async_nats::{ConnectError, ConnectErrorKind as C};
    if let Some(error) = error.downcast_ref::<ConnectError>() {
        return Some(match error.kind() {
            C::Io | C::TimedOut | C::Dns | C::MaxReconnects => Kind::ConnectionLost,
            C::Authentication | C::AuthorizationViolation | C::Tls | C::ServerParse => {
                Kind::Misconfigured
            }
        });
    }
    let error = error.downcast_ref::<PublishError>()?;
    Some(match error.kind() {
        P::BrokenPipe => Kind::ConnectionLost,
        P::TimedOut | P::MaxAckPending | P::Other => Kind::NotConfirmed,
        P::StreamNotFound => Kind::Misconfigured,
        P::WrongLastMessageId | P::WrongLastSequence | P::MaxPayloadExceeded => Kind::Refused,
    })
}
