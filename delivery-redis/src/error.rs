//! redis's errors as `TransportError`s: the one place that knows this client's errors.

use std::error::Error as StdError;

use delivery_core::transport::{ClientErrors, TransportErrorKind as Kind};

/// redis's errors: `REDIS.error(context, source)` is a failure while doing `context`, caused by
/// `source`, of the kind its chain of causes says.
pub(crate) const REDIS: ClientErrors = ClientErrors::new(kind);

fn kind(error: &(dyn StdError + 'static)) -> Option<Kind> {
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
