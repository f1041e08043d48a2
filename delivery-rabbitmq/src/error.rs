//! lapin's errors as `TransportError`s: the one place that knows this client's errors.

use std::error::Error as StdError;

use delivery_core::transport::{ClientErrors, TransportErrorKind as Kind};

/// lapin's errors: `LAPIN.error(context, source)` is a failure while doing `context`, caused by
/// `source`, of the kind its chain of causes says.
pub(crate) const LAPIN: ClientErrors = ClientErrors::new(kind);

fn kind(error: &(dyn StdError + 'static)) -> Option<Kind> {
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
