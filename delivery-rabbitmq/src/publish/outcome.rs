//! How the broker settled one publish.

use std::time::Duration;

use delivery_core::transport::{TransportError, TransportErrorKind};

/// How the broker settled one publish.
#[derive(Debug)]
pub(crate) enum Outcome {
    Confirmed,
    Returned {
        code: u16,
        text: String,
    },
    Nacked,
    NotConfirmMode,
    /// The channel or connection was lost before the confirm.
    Lost(String),
    /// No confirm within the timeout.
    TimedOut(Duration),
    /// No channel could be opened to publish on.
    Unavailable(TransportError),
}

impl Outcome {
    /// The kind of failure a publish settled this way is: anything but a confirm leaves the
    /// sender holding its copy.
    pub(crate) fn kind(&self) -> TransportErrorKind {
        match self {
            Outcome::Lost(_) => TransportErrorKind::ConnectionLost,
            Outcome::NotConfirmMode => TransportErrorKind::Misconfigured,
            Outcome::Unavailable(error) => error.kind(),
            Outcome::Confirmed
            | Outcome::Returned { .. }
            | Outcome::Nacked
            | Outcome::TimedOut(_) => TransportErrorKind::NotConfirmed,
        }
    }
}
