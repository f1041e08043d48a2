//! async-nats's errors as `TransportError`s: the one place that knows this client's errors.

use std::error::Error as StdError;

use delivery_core::transport::{ClientErrors, TransportErrorKind as Kind};

/// async-nats's errors: `NATS.error(context, source)` is a failure while doing `context`, caused by
/// `source`, of the kind its chain of causes says.
pub(crate) const NATS: ClientErrors = ClientErrors::new(kind);

fn kind(error: &(dyn StdError + 'static)) -> Option<Kind> {
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
