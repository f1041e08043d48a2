//! redis's errors as [`TransportError`]s: the one place that knows this client's errors.

use std::error::Error as StdError;

use delivery_core::transport::{TransportError, TransportErrorKind as Kind};

/// A client error a [`TransportError`] can hold.
pub(crate) trait Error: StdError + Send + Sync + 'static {}
impl<E: StdError + Send + Sync + 'static> Error for E {}

/// A failure while doing `context`, caused by `source`, of the kind its chain of causes says.
pub(crate) fn transport_error(context: &'static str, source: impl Error) -> TransportError {
    TransportError::classified(context, source, one)
}

/// The kind of `error`, this client's errors read anywhere in its chain of causes.
pub(crate) fn kind_of(error: &(dyn StdError + 'static)) -> Kind {
    delivery_core::transport::kind_of(error, one)
}

fn one(error: &(dyn StdError + 'static)) -> Option<Kind> {
    use redis::ErrorKind as E;
    let error = error.downcast_ref::<redis::RedisError>()?;
    if error.is_io_error()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_timeout()
    {
        return Some(Kind::ConnectionLost);
    }
    Some(match error.kind() {
        E::AuthenticationFailed | E::InvalidClientConfig | E::RESP3NotSupported => {
            Kind::Misconfigured
        }
        E::Server(_) | E::Extension => Kind::Refused,
        _ => Kind::Other,
    })
}
