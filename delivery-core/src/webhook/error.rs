//! Why a delivery was refused. No variant carries a secret or the body.

use std::time::Duration;

use http::{HeaderName, StatusCode};

/// Why [`Verifier::verify_at`](super::Verifier::verify_at) refused a delivery.
///
/// Every variant but [`Misconfigured`](VerifyError::Misconfigured) is the delivery's fault: it is
/// rejected with nothing written and is never retried into success (rule 5). None of them carries
/// a secret or the body, so an error can be logged as is.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// The body is over the verifier's limit; refused before any hashing.
    #[error("webhook body of {size} bytes is over the {limit}-byte limit")]
    BodyTooLarge {
        /// The limit, in bytes ([`Verifier::max_body`](super::Verifier::max_body)).
        limit: usize,
        /// The body's size, in bytes.
        size: usize,
    },
    /// A header the scheme needs is absent.
    #[error("webhook header `{header}` is missing")]
    MissingHeader {
        /// The header's name.
        header: HeaderName,
    },
    /// A header the scheme reads once is present more than once.
    #[error("webhook header `{header}` appears more than once")]
    DuplicateHeader {
        /// The header's name.
        header: HeaderName,
    },
    /// A header is present but unreadable: not visible ASCII, bad hex or base64, a signature of
    /// the wrong length, an unparsable timestamp, a missing `t=` or `v1=`.
    #[error("webhook header `{header}` is malformed: {reason}")]
    MalformedHeader {
        /// The header's name.
        header: HeaderName,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The signed timestamp is further from the verifier's clock than the tolerance, in the past
    /// (a replay) or in the future.
    #[error(
        "webhook timestamp {timestamp} is {}, outside the tolerance of {}s",
        skew(*.timestamp, *.now),
        .tolerance.as_secs()
    )]
    TimestampOutOfTolerance {
        /// The delivery's timestamp, in Unix seconds.
        timestamp: u64,
        /// The verifier's time, in Unix seconds.
        now: u64,
        /// The tolerance in force ([`Verifier::tolerance`](super::Verifier::tolerance)).
        tolerance: Duration,
    },
    /// No signature in the delivery matches the body under any accepted secret.
    #[error("webhook signature does not match the body under any accepted secret")]
    Mismatch,
    /// The verifier itself cannot verify anything: a secret that does not decode, an empty
    /// secret, or a generic scheme whose signed content names a header it does not read. Not the
    /// delivery's fault; [`Verifier::check`](super::Verifier::check) finds it at startup.
    #[error("webhook verifier is misconfigured: {reason}")]
    Misconfigured {
        /// What is wrong.
        reason: &'static str,
    },
}

impl VerifyError {
    /// Whether the signature was well-formed but wrong (a forgery, a wrong secret, or a body
    /// changed in transit).
    pub fn is_mismatch(&self) -> bool {
        matches!(self, VerifyError::Mismatch)
    }

    /// Whether the verifier, not the delivery, is at fault.
    pub fn is_misconfigured(&self) -> bool {
        matches!(self, VerifyError::Misconfigured { .. })
    }

    /// The header this error is about, if any.
    pub fn header(&self) -> Option<&HeaderName> {
        match self {
            VerifyError::MissingHeader { header }
            | VerifyError::DuplicateHeader { header }
            | VerifyError::MalformedHeader { header, .. } => Some(header),
            _ => None,
        }
    }

    /// The status to answer the sender with: `413` for a body over the limit, `500` for a
    /// misconfigured verifier (the sender retries once it is fixed), and `401` for everything
    /// else — a delivery that failed verification, never retried into success.
    pub fn status_code(&self) -> StatusCode {
        match self {
            VerifyError::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            VerifyError::Misconfigured { .. } => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::UNAUTHORIZED,
        }
    }
}

/// How far a timestamp is from the clock, and on which side.
fn skew(timestamp: u64, now: u64) -> String {
    if timestamp > now {
        format!("{}s in the future", timestamp - now)
    } else {
        format!("{}s in the past", now - timestamp)
    }
}
