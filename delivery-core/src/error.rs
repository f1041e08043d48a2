//! What a handler says when it fails: return the unit for redelivery, or reject it for good.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

/// Any error, boxed: what [`HandlerError::retry`] and [`HandlerError::reject`] take.
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// The failure a handler returns.
///
/// - [`HandlerError::retry`] — transient (a dependency is down, a lock timed out): the unit is
///   returned and delivered again after a backoff, up to the bound (rule 2).
/// - [`HandlerError::reject`] — permanent (the unit is refused and can never succeed): the unit
///   goes to the dead letter at once, intact, without burning redeliveries.
///
/// `?` on any ordinary error means *retry*, the safe default: a failure that is not understood is
/// never acknowledged. A unit already applied is **not** a failure: return `Ok` (rule 3).
///
/// ```
/// use delivery_core::HandlerError;
///
/// #[derive(Debug)]
/// struct UnknownSku(String);
/// impl std::fmt::Display for UnknownSku {
///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
///         write!(f, "unknown sku {}", self.0)
///     }
/// }
/// impl std::error::Error for UnknownSku {}
///
/// fn check(sku: &str) -> Result<(), HandlerError> {
///     let parsed: u32 = sku.parse()?; // a ParseIntError here means: retry
///     if parsed == 0 {
///         return Err(UnknownSku(sku.into())).map_err(HandlerError::reject);
///     }
///     if parsed > 9_999 {
///         return Err(HandlerError::reject(format!("sku {parsed} is out of range")));
///     }
///     Ok(())
/// }
/// assert!(check("x").unwrap_err().is_retry());
/// assert!(check("0").unwrap_err().is_reject());
/// ```
pub struct HandlerError {
    kind: FailureKind,
    source: BoxError,
    delay: Option<Duration>,
}

/// Whether a failure may pass on redelivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailureKind {
    /// Transient: return the unit for redelivery after a backoff.
    Retry,
    /// Permanent: move the unit to the dead letter now.
    Reject,
}

impl HandlerError {
    /// A transient failure: the unit is returned and redelivered after a backoff.
    ///
    /// Takes any error (`std::error::Error + Send + Sync`), an `anyhow::Error`, a boxed error, or a
    /// message (`&str`, `String`).
    pub fn retry<E>(error: E) -> Self
    where
        E: Into<BoxError>,
    {
        HandlerError {
            kind: FailureKind::Retry,
            source: error.into(),
            delay: None,
        }
    }

    /// A permanent failure: the unit goes to the dead letter directly. Takes what
    /// [`retry`](Self::retry) takes.
    pub fn reject<E>(error: E) -> Self
    where
        E: Into<BoxError>,
    {
        HandlerError {
            kind: FailureKind::Reject,
            source: error.into(),
            delay: None,
        }
    }

    /// Asks for the next attempt no sooner than `delay` from now — a receiver's `Retry-After`.
    /// The backoff still applies: a consumer returns the unit after the longer of the two, the
    /// relay retries the record after the longer of the two, and a webhook answers 503 with a
    /// `Retry-After` header (whole seconds, rounded up). Meaningless on a reject.
    ///
    /// ```
    /// use std::time::Duration;
    /// use delivery_core::{HandlerError, IntoOutcome, Outcome};
    ///
    /// let failed: Result<(), HandlerError> =
    ///     Err(HandlerError::retry("429 from the ledger").after(Duration::from_secs(5)));
    /// assert!(matches!(
    ///     failed.into_outcome(),
    ///     Outcome::RetryAfter { after, .. } if after == Duration::from_secs(5)
    /// ));
    /// ```
    pub fn after(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// The delay asked for with [`after`](Self::after), if any.
    pub fn delay(&self) -> Option<Duration> {
        self.delay
    }

    /// Whether the unit should be returned for redelivery.
    pub fn is_retry(&self) -> bool {
        self.kind == FailureKind::Retry
    }

    /// Whether the unit should go to the dead letter directly.
    pub fn is_reject(&self) -> bool {
        self.kind == FailureKind::Reject
    }

    /// Which kind of failure this is.
    pub fn kind(&self) -> FailureKind {
        self.kind
    }

    /// The underlying error.
    pub fn source(&self) -> &(dyn StdError + Send + Sync + 'static) {
        &*self.source
    }

    /// The underlying error, owned.
    pub fn into_source(self) -> BoxError {
        self.source
    }
}

/// `?` on an ordinary error means retry.
impl<E> From<E> for HandlerError
where
    E: StdError + Send + Sync + 'static,
{
    fn from(error: E) -> Self {
        HandlerError::retry(error)
    }
}

impl fmt::Debug for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerError")
            .field("kind", &self.kind)
            .field("source", &self.source)
            .field("delay", &self.delay)
            .finish()
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.source, f)?;
        let mut next = self.source.source();
        while let Some(cause) = next {
            write!(f, ": {cause}")?;
            next = cause.source();
        }
        Ok(())
    }
}
