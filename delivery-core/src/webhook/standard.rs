//! Standard Webhooks (and Svix, its origin): `webhook-id`, `webhook-timestamp` and
//! `webhook-signature: v1,<base64> [v1,<base64>...]` over `{id}.{timestamp}.{body}`.

use base64::Engine as _;
use http::{HeaderMap, HeaderName};

use super::VerifyError;
use super::parse::{
    Signed, Tags, base64_tag, malformed, optional, required, signed_value, timestamp,
};
use super::secret::Key;
use super::{Scheme, Secret};

/// The signed content.
const LAYOUT: &str = "{id}.{timestamp}.{body}";

/// The length of `v1,` and the padded base64 of a 32-byte tag.
const ONE_SIGNATURE: usize = 3 + 44;

/// One family of header names: the standard's, or Svix's.
struct Names {
    id: HeaderName,
    timestamp: HeaderName,
    signature: HeaderName,
}

static STANDARD: Names = Names {
    id: HeaderName::from_static("webhook-id"),
    timestamp: HeaderName::from_static("webhook-timestamp"),
    signature: HeaderName::from_static("webhook-signature"),
};

static SVIX: Names = Names {
    id: HeaderName::from_static("svix-id"),
    timestamp: HeaderName::from_static("svix-timestamp"),
    signature: HeaderName::from_static("svix-signature"),
};

/// The standard's names, unless the delivery carries none of them and some of Svix's.
fn names(headers: &HeaderMap) -> &'static Names {
    let has = |n: &Names| {
        [&n.id, &n.timestamp, &n.signature]
            .iter()
            .any(|h| headers.contains_key(*h))
    };
    if !has(&STANDARD) && has(&SVIX) {
        &SVIX
    } else {
        &STANDARD
    }
}

/// The delivery's id (`webhook-id`, or `svix-id`): the unit's identity for idempotency.
pub(super) fn id(headers: &HeaderMap) -> Option<&str> {
    optional(headers, &names(headers).id).ok().flatten()
}

/// Every `v1,` entry is a candidate (one per secret during a rotation); other versions
/// (`v1a,` and future ones) are ignored, as is a `v1,` entry that is not the base64 of 32 bytes —
/// but a header with no usable `v1,` entry at all is malformed.
pub(super) fn parse(headers: &HeaderMap) -> Result<Signed<'_>, VerifyError> {
    // A delivery with `webhook-signature` uses the standard's names: no need to look for others.
    let (names, list) = match optional(headers, &STANDARD.signature)? {
        Some(list) => (&STANDARD, list),
        None => {
            let names = names(headers);
            let list = required(headers, &names.signature)?;
            (names, list)
        }
    };
    let id = required(headers, &names.id)?;
    let ts_text = required(headers, &names.timestamp)?;
    let ts = timestamp(ts_text).ok_or_else(|| malformed(&names.timestamp, "not Unix seconds"))?;
    let signatures: Tags = if list.len() == ONE_SIGNATURE && list.starts_with("v1,") {
        // The usual list, one signature: read without splitting. (Were there a space in it, no
        // entry of the split list could be the 44 characters of a tag either.)
        base64_tag(&list.as_bytes()[3..]).into_iter().collect()
    } else {
        list.split(' ')
            .filter_map(|entry| entry.strip_prefix("v1,"))
            .map(str::as_bytes)
            .filter_map(base64_tag)
            .collect()
    };
    if signatures.is_empty() {
        return Err(malformed(
            &names.signature,
            "no `v1,` entry is the base64 of a 32-byte HMAC",
        ));
    }
    Ok(Signed {
        signatures,
        layout: LAYOUT,
        timestamp_text: ts_text,
        id,
        timestamp: Some(ts),
    })
}

/// The headers a Standard Webhooks sender sends for `body`: `webhook-id`, `webhook-timestamp` and
/// `webhook-signature: v1,<base64>`, one space-separated `v1,` entry per key (several while a
/// secret is rotated). The inverse of `parse`, and the one place a delivery is signed: for the
/// outbox's HTTP sink (`StandardSigner`) and for `testing::sign` alike.
pub(super) fn sign(
    keys: &[Key],
    body: &[u8],
    timestamp: &str,
    id: &str,
    headers: &mut HeaderMap,
) -> Result<(), &'static str> {
    if keys.is_empty() {
        return Err("no secret to sign with");
    }
    let content = Signed::to_sign(LAYOUT, timestamp, id);
    let mut signatures = String::with_capacity(keys.len() * (ONE_SIGNATURE + 1));
    for key in keys {
        if !signatures.is_empty() {
            signatures.push(' ');
        }
        signatures.push_str("v1,");
        base64::engine::general_purpose::STANDARD
            .encode_string(content.tag(key, body), &mut signatures);
    }
    headers.insert(&STANDARD.id, signed_value(id)?);
    headers.insert(&STANDARD.timestamp, signed_value(timestamp)?);
    headers.insert(&STANDARD.signature, signed_value(&signatures)?);
    Ok(())
}

/// The sending side of [`Scheme::StandardWebhooks`]: the HMAC keys of one or more `whsec_`
/// secrets, derived once, exactly as the verifier derives them. Every delivery it signs carries one
/// signature per secret, so during a rotation a receiver that knows any one of them accepts it.
/// Secrets never show in its `Debug`.
#[derive(Clone)]
pub struct StandardSigner {
    keys: Vec<Key>,
}

impl StandardSigner {
    /// A signer with no secret yet: [`add`](StandardSigner::add) one before signing.
    pub fn new() -> Self {
        StandardSigner { keys: Vec::new() }
    }

    /// Also signs with `secret` (`whsec_<base64>`, the prefix optional). `Err` says why the
    /// secret cannot be used (not base64, empty); it never quotes the secret.
    pub fn add(&mut self, secret: &Secret) -> Result<(), &'static str> {
        self.keys.push(Scheme::StandardWebhooks.key(secret)?);
        Ok(())
    }

    /// Sets `webhook-id: id`, `webhook-timestamp: timestamp` (Unix seconds) and
    /// `webhook-signature` over `{id}.{timestamp}.{body}` in `headers`. `Err` when there is no
    /// secret or `id` cannot be a header value the receiver reads back intact.
    pub fn sign(
        &self,
        id: &str,
        timestamp: u64,
        body: &[u8],
        headers: &mut HeaderMap,
    ) -> Result<(), &'static str> {
        sign(&self.keys, body, &timestamp.to_string(), id, headers)
    }
}

impl std::fmt::Debug for StandardSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StandardSigner")
            .field("secrets", &self.keys.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;
    use crate::webhook::Verifier;

    const OLD: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const NEW: &str = "whsec_dGhlIG5ldyBzZWNyZXQga2V5ICEhIQ==";
    const OTHER: &str = "whsec_dGhlIG90aGVyIHNlY3JldCBrZXkgISE=";

    fn signer(secrets: &[&str]) -> StandardSigner {
        let mut signer = StandardSigner::new();
        for secret in secrets {
            signer.add(&Secret::from(*secret)).unwrap();
        }
        signer
    }

    #[test]
    fn one_secret_signs_as_the_testing_signer_and_the_verifier_accepts() {
        let body = br#"{"order_id":"o-1"}"#;
        let mut headers = HeaderMap::new();
        signer(&[OLD])
            .sign("rec-1", 1_700_000_000, body, &mut headers)
            .unwrap();
        assert_eq!(headers["webhook-id"], "rec-1");
        assert_eq!(headers["webhook-timestamp"], "1700000000");
        let at = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let expected = Scheme::StandardWebhooks
            .sign(&Secret::from(OLD), body, 1_700_000_000, "rec-1")
            .unwrap();
        assert_eq!(headers["webhook-signature"], expected["webhook-signature"]);
        let verifier = Verifier::new(Scheme::StandardWebhooks, OLD);
        assert_eq!(verifier.verify_at(&headers, body, at), Ok(()));
        assert_eq!(verifier.unit_id(&headers, body).as_deref(), Some("rec-1"));
    }

    #[test]
    fn a_rotation_sends_one_signature_per_secret_and_either_verifies() {
        let body = br#"{"order_id":"o-2"}"#;
        let mut headers = HeaderMap::new();
        signer(&[NEW, OLD])
            .sign("rec-2", 1_700_000_000, body, &mut headers)
            .unwrap();
        let list = headers["webhook-signature"].to_str().unwrap();
        let entries: Vec<&str> = list.split(' ').collect();
        assert_eq!(entries.len(), 2, "{list}");
        assert!(
            entries
                .iter()
                .all(|e| e.starts_with("v1,") && e.len() == ONE_SIGNATURE)
        );
        let at = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        for secret in [NEW, OLD] {
            let verifier = Verifier::new(Scheme::StandardWebhooks, secret);
            assert_eq!(verifier.verify_at(&headers, body, at), Ok(()), "{secret}");
        }
        let stranger = Verifier::new(Scheme::StandardWebhooks, OTHER);
        assert_eq!(
            stranger.verify_at(&headers, body, at),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            Verifier::new(Scheme::StandardWebhooks, NEW).verify_at(&headers, b"{}", at),
            Err(VerifyError::Mismatch)
        );
    }

    #[test]
    fn unusable_secrets_and_ids_are_refused_and_never_shown() {
        let mut signer = StandardSigner::new();
        assert!(signer.add(&Secret::from("whsec_not base64!")).is_err());
        assert!(signer.add(&Secret::from("whsec_")).is_err());
        assert!(signer.keys.is_empty());
        assert!(
            signer
                .sign("rec-3", 1, b"{}", &mut HeaderMap::new())
                .is_err(),
            "no secret: nothing signed"
        );
        let signer = self::signer(&[OLD]);
        assert!(
            signer
                .sign("rec\t3", 1, b"{}", &mut HeaderMap::new())
                .is_err()
        );
        assert!(!format!("{signer:?}").contains("MfKQ"));
    }
}
