//! sqlx's errors as [`TransportError`]s: the one place that knows the database client's errors.

use delivery_core::transport::{TransportError, TransportErrorKind as Kind};

/// A failure while doing `context`, caused by `error`, of the kind its chain of causes says.
pub(crate) fn transport_error(context: &'static str, error: sqlx::Error) -> TransportError {
    let kind = delivery_core::transport::kind_of(&error, |cause| {
        Some(match cause.downcast_ref::<sqlx::Error>()? {
            sqlx::Error::Io(io) => delivery_core::transport::io_kind(io),
            sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::WorkerCrashed => {
                Kind::ConnectionLost
            }
            sqlx::Error::Configuration(_) | sqlx::Error::Tls(_) => Kind::Misconfigured,
            sqlx::Error::Database(_) => Kind::Refused,
            _ => return None,
        })
    });
    TransportError::new(context, error).with_kind(kind)
}

/// `transport_error` for `context`, as a `map_err` argument.
pub(crate) fn failed(context: &'static str) -> impl FnOnce(sqlx::Error) -> TransportError {
    move |error| transport_error(context, error)
}
