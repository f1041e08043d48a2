//! Why a verifier could not be built ([`WebhookConfigError`]), what a secret closure may return
//! ([`IntoSecrets`]), and the builder the attribute's arguments fill ([`Config`]).

use std::env::VarError;
use std::fmt;
use std::time::Duration;

use delivery_core::webhook::{Scheme, Secret, Verifier, VerifyError};

/// Why a webhook's verifier could not be built: its secret is missing or unusable. Never carries
/// the secret.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WebhookConfigError {
    /// An environment variable a secret is read from is not set.
    #[error(
        "webhook `{webhook}` has no usable signing secret: environment variable `{var}` is not set"
    )]
    MissingEnv {
        /// The handler's name.
        webhook: &'static str,
        /// The variable's name.
        var: &'static str,
    },
    /// An environment variable a secret is read from is set, but empty.
    #[error(
        "webhook `{webhook}` has no usable signing secret: environment variable `{var}` is empty"
    )]
    EmptyEnv {
        /// The handler's name.
        webhook: &'static str,
        /// The variable's name.
        var: &'static str,
    },
    /// An environment variable a secret is read from is not valid UTF-8.
    #[error(
        "webhook `{webhook}` has no usable signing secret: environment variable `{var}` is not valid UTF-8"
    )]
    NotUnicodeEnv {
        /// The handler's name.
        webhook: &'static str,
        /// The variable's name.
        var: &'static str,
    },
    /// No secret at all: the state gave none (an empty list, or `None`).
    #[error("webhook `{webhook}` has no usable signing secret: the state gave none")]
    NoSecret {
        /// The handler's name.
        webhook: &'static str,
    },
    /// A secret the scheme cannot use (a Standard Webhooks secret that is not base64, say).
    #[error(
        "webhook `{webhook}` has no usable signing secret: the secret from {origin} cannot be used: {reason}"
    )]
    Unusable {
        /// The handler's name.
        webhook: &'static str,
        /// Where the secret came from.
        origin: SecretOrigin,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// Where a webhook secret came from, for an error that names it without showing it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecretOrigin {
    /// The environment variable of this name (`secret = env("VAR")`).
    Env(&'static str),
    /// The state (`secret = |s: &App| ..`).
    State,
}

impl fmt::Display for SecretOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretOrigin::Env(var) => write!(f, "environment variable `{var}`"),
            SecretOrigin::State => f.write_str("the state"),
        }
    }
}

impl WebhookConfigError {
    /// The name of the handler whose secret is at fault.
    pub fn webhook(&self) -> &'static str {
        match self {
            WebhookConfigError::MissingEnv { webhook, .. }
            | WebhookConfigError::EmptyEnv { webhook, .. }
            | WebhookConfigError::NotUnicodeEnv { webhook, .. }
            | WebhookConfigError::NoSecret { webhook }
            | WebhookConfigError::Unusable { webhook, .. } => webhook,
        }
    }

    /// The environment variable at fault, if one is.
    pub fn var(&self) -> Option<&'static str> {
        match self {
            WebhookConfigError::MissingEnv { var, .. }
            | WebhookConfigError::EmptyEnv { var, .. }
            | WebhookConfigError::NotUnicodeEnv { var, .. } => Some(var),
            WebhookConfigError::Unusable {
                origin: SecretOrigin::Env(var),
                ..
            } => Some(var),
            _ => None,
        }
    }
}

/// What a secret closure (`secret = |s: &App| ..`) may return: one secret, none, or several.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a webhook secret",
    label = "the secret closure returns `{Self}`",
    note = "a secret taken from the state is a `String`, `&'static str` or `Secret`; an `Option` of one (`None`: none from here); or a `Vec` or array of them (several, while one is rotated)"
)]
pub trait IntoSecrets {
    /// The secrets, in order.
    fn into_secrets(self) -> Vec<Secret>;
}

impl IntoSecrets for Secret {
    fn into_secrets(self) -> Vec<Secret> {
        vec![self]
    }
}

impl IntoSecrets for String {
    fn into_secrets(self) -> Vec<Secret> {
        vec![Secret::from(self)]
    }
}

impl IntoSecrets for &str {
    fn into_secrets(self) -> Vec<Secret> {
        vec![Secret::from(self)]
    }
}

impl IntoSecrets for &String {
    fn into_secrets(self) -> Vec<Secret> {
        vec![Secret::from(self)]
    }
}

impl<T: IntoSecrets> IntoSecrets for Option<T> {
    fn into_secrets(self) -> Vec<Secret> {
        self.map_or_else(Vec::new, IntoSecrets::into_secrets)
    }
}

impl<T: IntoSecrets> IntoSecrets for Vec<T> {
    fn into_secrets(self) -> Vec<Secret> {
        self.into_iter()
            .flat_map(IntoSecrets::into_secrets)
            .collect()
    }
}

impl<T: IntoSecrets, const N: usize> IntoSecrets for [T; N] {
    fn into_secrets(self) -> Vec<Secret> {
        self.into_iter()
            .flat_map(IntoSecrets::into_secrets)
            .collect()
    }
}

/// Builds a verifier from the attribute's arguments. Not public API.
#[doc(hidden)]
pub struct Config {
    webhook: &'static str,
    scheme: Scheme,
    secrets: Vec<(SecretOrigin, Secret)>,
    error: Option<WebhookConfigError>,
    max_body: Option<usize>,
    tolerance: Option<Duration>,
    credential_headers: Vec<&'static str>,
}

impl Config {
    pub fn new(webhook: &'static str, scheme: Scheme) -> Self {
        Config {
            webhook,
            scheme,
            secrets: Vec::new(),
            error: None,
            max_body: None,
            tolerance: None,
            credential_headers: Vec::new(),
        }
    }

    /// `env("VAR")`: read now.
    pub fn env(mut self, var: &'static str) -> Self {
        if self.error.is_some() {
            return self;
        }
        let webhook = self.webhook;
        match std::env::var(var) {
            Ok(value) if value.is_empty() => {
                self.error = Some(WebhookConfigError::EmptyEnv { webhook, var });
            }
            Ok(value) => self
                .secrets
                .push((SecretOrigin::Env(var), Secret::from(value))),
            Err(VarError::NotPresent) => {
                self.error = Some(WebhookConfigError::MissingEnv { webhook, var });
            }
            Err(VarError::NotUnicode(_)) => {
                self.error = Some(WebhookConfigError::NotUnicodeEnv { webhook, var });
            }
        }
        self
    }

    /// `|s: &T| ..`: the closure's secrets, taken from `state` now.
    pub fn from_state<T, F, R>(mut self, state: &T, secrets: F) -> Self
    where
        F: FnOnce(&T) -> R,
        R: IntoSecrets,
    {
        if self.error.is_none() {
            let secrets = secrets(state).into_secrets();
            self.secrets
                .extend(secrets.into_iter().map(|s| (SecretOrigin::State, s)));
        }
        self
    }

    pub fn max_body(mut self, bytes: usize) -> Self {
        self.max_body = Some(bytes);
        self
    }

    pub fn tolerance(mut self, tolerance: Duration) -> Self {
        self.tolerance = Some(tolerance);
        self
    }

    /// `credential_headers = [..]`: one name (checked by the attribute).
    pub fn credential_header(mut self, name: &'static str) -> Self {
        self.credential_headers.push(name);
        self
    }

    pub fn build(self) -> Result<Verifier, WebhookConfigError> {
        if let Some(error) = self.error {
            return Err(error);
        }
        let webhook = self.webhook;
        // Each secret on its own first, so an unusable one is named by where it came from.
        for (origin, secret) in &self.secrets {
            if let Err(VerifyError::Misconfigured { reason }) =
                Verifier::new(self.scheme.clone(), secret.clone()).check()
            {
                return Err(WebhookConfigError::Unusable {
                    webhook,
                    origin: *origin,
                    reason,
                });
            }
        }
        let mut secrets = self.secrets.into_iter().map(|(_, secret)| secret);
        let first = secrets
            .next()
            .ok_or(WebhookConfigError::NoSecret { webhook })?;
        let mut verifier = secrets.fold(Verifier::new(self.scheme, first), Verifier::also_accept);
        if let Some(bytes) = self.max_body {
            verifier = verifier.max_body(bytes);
        }
        if let Some(tolerance) = self.tolerance {
            verifier = verifier.tolerance(tolerance);
        }
        Ok(self
            .credential_headers
            .into_iter()
            .fold(verifier, Verifier::credential_header))
    }
}
