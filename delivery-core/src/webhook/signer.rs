//! The sending side of Standard Webhooks: [`StandardSigner`].

use http::HeaderMap;

use super::scheme::Scheme;
use super::secret::{Key, Secret};
use super::standard::sign;

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

impl Default for StandardSigner {
    /// [`StandardSigner::new`]: no secret yet.
    fn default() -> Self {
        StandardSigner::new()
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
    use crate::webhook::error::VerifyError;
    use crate::webhook::standard::ONE_SIGNATURE;

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
