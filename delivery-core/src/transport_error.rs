//! A failure of the transport itself: [`TransportError`] and its [`TransportErrorKind`]
//! (re-exported in [`transport`](crate::transport)).

use std::error::Error as StdError;

/// A failure of the transport itself (a lost connection, an unconfirmed publish), with what was
/// being done and a [`kind`](TransportError::kind) to match on.
///
/// ```
/// use delivery_core::transport::{TransportError, TransportErrorKind};
///
/// let lost = TransportError::new(
///     "consuming",
///     std::io::Error::from(std::io::ErrorKind::ConnectionReset),
/// );
/// assert_eq!(lost.kind(), TransportErrorKind::ConnectionLost);
/// assert!(lost.is_transient());
///
/// let nacked = TransportError::msg("publishing", "the broker nacked the publish")
///     .with_kind(TransportErrorKind::NotConfirmed);
/// assert_eq!(nacked.to_string(), "publishing: the broker nacked the publish");
/// ```
#[derive(Debug, thiserror::Error)]
#[error("{context}: {message}")]
pub struct TransportError {
    context: &'static str,
    kind: TransportErrorKind,
    message: String,
    #[source]
    source: Option<Box<dyn StdError + Send + Sync + 'static>>,
}

/// What kind of failure a [`TransportError`] is: whether waiting helps, and who must act.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum TransportErrorKind {
    /// The connection to the server is lost, or could not be made (refused, reset, timed out, a
    /// missed heartbeat): the operation may pass once the server is back. Sources reconnect.
    #[error("connection lost")]
    ConnectionLost,
    /// A publish the server did not confirm (a publisher-confirm `nack`, a message returned
    /// unroutable, no confirm or delivery report in time): it may or may not be held, so the
    /// sender keeps its copy and tries again (rule 6).
    #[error("not confirmed")]
    NotConfirmed,
    /// The server refused the operation (access refused, not found, a precondition failed, a
    /// command error): trying again as it is will not pass.
    #[error("refused by the server")]
    Refused,
    /// The client or topology is configured wrongly (a bad URL or credentials, a client property
    /// the library rejects, a queue declared with other arguments): fix the configuration.
    #[error("misconfigured")]
    Misconfigured,
    /// Anything else (an unexpected reply, an operation on something this client does not own).
    #[error("transport failure")]
    Other,
}

impl TransportError {
    /// A failure while doing `context`, caused by `source`. The kind is read off the source's
    /// type where it is an error this crate knows (`std::io::Error`, a [`TransportError`]),
    /// anywhere in its chain of causes; [`Other`](TransportErrorKind::Other) otherwise. A transport
    /// reads its client's errors with [`kind_of`] and sets the kind with
    /// [`with_kind`](Self::with_kind).
    pub fn new(context: &'static str, source: impl StdError + Send + Sync + 'static) -> Self {
        TransportError {
            context,
            kind: kind_of(&source, |_| None),
            message: source.to_string(),
            source: Some(Box::new(source)),
        }
    }

    /// A failure while doing `context`, caused by `source`, of the kind `client` reads off it (a
    /// transport's reading of its own client's errors, asked first at each cause of the chain) or,
    /// where `client` does not know it, as [`new`](Self::new) reads it.
    pub fn classified(
        context: &'static str,
        source: impl StdError + Send + Sync + 'static,
        client: impl Fn(&(dyn StdError + 'static)) -> Option<TransportErrorKind>,
    ) -> Self {
        let kind = kind_of(&source, client);
        TransportError::new(context, source).with_kind(kind)
    }

    /// A failure while doing `context`, described by `message`, of kind
    /// [`Other`](TransportErrorKind::Other) until [`with_kind`](Self::with_kind) says otherwise.
    pub fn msg(context: &'static str, message: impl Into<String>) -> Self {
        TransportError {
            context,
            kind: TransportErrorKind::Other,
            message: message.into(),
            source: None,
        }
    }

    /// The same failure, of kind `kind`.
    pub fn with_kind(mut self, kind: TransportErrorKind) -> Self {
        self.kind = kind;
        self
    }

    /// What was being done.
    pub fn context(&self) -> &'static str {
        self.context
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> TransportErrorKind {
        self.kind
    }

    /// Whether trying again later may pass: a lost connection or an unconfirmed publish.
    pub fn is_transient(&self) -> bool {
        matches!(
            self.kind,
            TransportErrorKind::ConnectionLost | TransportErrorKind::NotConfirmed
        )
    }
}

/// A transport's reading of its own client's errors: what each adapter's `error.rs` writes (the
/// kind of one of its client's errors, beside that client). Making a [`TransportError`] of an
/// error and reading the kind of a chain of causes are the same for every client: they are here.
///
/// ```
/// use std::error::Error;
/// use delivery_core::transport::{ClientErrors, TransportErrorKind};
///
/// fn kind(error: &(dyn Error + 'static)) -> Option<TransportErrorKind> {
///     error.is::<std::fmt::Error>().then_some(TransportErrorKind::Refused)
/// }
/// const FMT: ClientErrors = ClientErrors::new(kind);
///
/// let error = FMT.error("writing", std::fmt::Error);
/// assert_eq!(error.kind(), TransportErrorKind::Refused);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct ClientErrors {
    kind: fn(&(dyn StdError + 'static)) -> Option<TransportErrorKind>,
}

impl ClientErrors {
    /// A client whose errors `kind` reads: the kind of one cause where it is one of this client's
    /// errors, `None` otherwise.
    pub const fn new(kind: fn(&(dyn StdError + 'static)) -> Option<TransportErrorKind>) -> Self {
        ClientErrors { kind }
    }

    /// A failure while doing `context`, caused by `source`, of the kind its chain of causes says
    /// ([`TransportError::classified`] with this client's reading).
    pub fn error(
        &self,
        context: &'static str,
        source: impl StdError + Send + Sync + 'static,
    ) -> TransportError {
        TransportError::classified(context, source, self.kind)
    }

    /// The kind of `error`, this client's errors read anywhere in its chain of causes.
    pub fn kind_of(&self, error: &(dyn StdError + 'static)) -> TransportErrorKind {
        kind_of(error, self.kind)
    }
}

/// The kind of `error` as [`TransportError::new`] reads it (a [`TransportError`] or a
/// `std::io::Error` anywhere in its chain of causes), asking `client` first at each cause: a
/// transport passes the reading of its own client's errors, so each client's errors are known
/// beside that client.
///
/// ```
/// use delivery_core::transport::{TransportErrorKind, kind_of};
///
/// let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
/// assert_eq!(kind_of(&reset, |_| None), TransportErrorKind::ConnectionLost);
/// ```
pub fn kind_of(
    error: &(dyn StdError + 'static),
    client: impl Fn(&(dyn StdError + 'static)) -> Option<TransportErrorKind>,
) -> TransportErrorKind {
    let mut next = Some(error);
    while let Some(error) = next {
        if let Some(kind) = client(error).or_else(|| known(error)) {
            return kind;
        }
        next = error.source();
    }
    TransportErrorKind::Other
}

/// The kind of one cause this crate knows by its type.
fn known(error: &(dyn StdError + 'static)) -> Option<TransportErrorKind> {
    if let Some(error) = error.downcast_ref::<TransportError>() {
        return Some(error.kind);
    }
    error.downcast_ref::<std::io::Error>().map(io_kind)
}

/// The kind of an I/O failure: refused permission, a bad address, or (anything else) a lost
/// connection. Clients that wrap an I/O error read its kind here.
pub fn io_kind(error: &std::io::Error) -> TransportErrorKind {
    use std::io::ErrorKind as E;
    match error.kind() {
        E::PermissionDenied => TransportErrorKind::Refused,
        E::InvalidInput | E::AddrNotAvailable => TransportErrorKind::Misconfigured,
        _ => TransportErrorKind::ConnectionLost,
    }
}
