//! lapin's errors as [`TransportError`]s: the one place that knows this client's errors.

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
    use lapin::ErrorKind as E;
    use lapin::protocol::{AMQPErrorKind, AMQPHardError, AMQPSoftError};
    let error = error.downcast_ref::<lapin::Error>()?;
    Some(match error.kind() {
        E::IOError(io) | E::RuntimeShutdownError(io) => delivery_core::transport::io_kind(io),
        E::InvalidConnectionState(_) | E::InvalidChannelState(..) | E::MissingHeartbeatError => {
            Kind::ConnectionLost
        }
        E::AuthProviderError(_) | E::InvalidProtocolVersion(_) | E::NoDefaultRuntime => {
            Kind::Misconfigured
        }
        E::ProtocolError(amqp) => match amqp.kind() {
            AMQPErrorKind::Soft(AMQPSoftError::PRECONDITIONFAILED) => Kind::Misconfigured,
            AMQPErrorKind::Soft(_) => Kind::Refused,
            AMQPErrorKind::Hard(AMQPHardError::CONNECTIONFORCED) => Kind::ConnectionLost,
            AMQPErrorKind::Hard(_) => Kind::Refused,
        },
        _ => return None,
    })
}
