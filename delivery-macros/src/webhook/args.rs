//! `#[webhook]`'s own arguments: `scheme`, `secret`, `max_body`, `tolerance_secs` and
//! `credential_headers`, parsed and checked.

use proc_macro2::Span;
use syn::meta::ParseNestedMeta;
use syn::spanned::Spanned;
use syn::{Expr, ExprArray, ExprCall, ExprClosure, Lit, LitInt, LitStr, Pat, Type};

use crate::attr::set;
use crate::ctxt::Ctxt;

pub(super) const KEYS: &str = "`scheme = stripe`, `secret = env(\"VAR\")`, `max_body = bytes`, \
                    `tolerance_secs = seconds`, `credential_headers = [\"X-Api-Key\"]`, \
                    `allow_clock = \"why\"`, `state = Type`, `crate = path`";

/// The schemes by the name written in the attribute, with their `Scheme` variant.
const SCHEMES: &[(&str, &str)] = &[
    ("github", "GitHub"),
    ("stripe", "Stripe"),
    ("standard_webhooks", "StandardWebhooks"),
    ("slack", "Slack"),
    ("shopify", "Shopify"),
];

const SCHEME_LIST: &str = "`github`, `stripe`, `standard_webhooks`, `slack`, `shopify`";

const SECRET_FORMS: &str = "`secret = env(\"VAR\")` (read from the environment at startup), \
                            `secret = |s: &App| s.webhook_secret.clone()` (taken from the state), \
                            or a list such as `secret = [env(\"NEW\"), env(\"OLD\")]` to accept \
                            several while one is rotated";

/// `#[webhook]`'s own arguments.
#[derive(Default)]
pub(crate) struct Hook {
    /// The `Scheme` variant; `None` when missing or unknown (already reported).
    pub(super) scheme: Option<syn::Ident>,
    /// Whether `scheme = ..` was given at all, known or not.
    scheme_given: bool,
    /// Where the secrets come from; `None` when missing or unusable (already reported).
    pub(super) secrets: Option<Vec<SecretSource>>,
    /// Whether `secret = ..` was given at all, usable or not.
    secret_given: bool,
    pub(super) max_body: Option<LitInt>,
    pub(super) tolerance_secs: Option<LitInt>,
    /// `credential_headers = [..]`: header names dropped from the unit, beside the defaults.
    pub(super) credential_headers: Option<Vec<LitStr>>,
}

pub(super) enum SecretSource {
    /// `env("VAR")`: read when the verifier is built.
    Env(LitStr),
    /// `|s: &T| ..`: taken from the state.
    State(Box<StateSecret>),
}

pub(super) struct StateSecret {
    pub(super) closure: ExprClosure,
    /// `T`, when the closure names it.
    pub(super) ty: Option<Type>,
}

/// `credential_headers = ["X-Api-Key", ..]`: a list of header names (HTTP tokens), lowercased as
/// `http` stores them. `None` when it is not one (reported).
fn credential_headers(expr: &Expr, cx: &Ctxt) -> Option<Vec<LitStr>> {
    const FORM: &str = "`credential_headers` lists header names that carry credentials, never copied into the unit: `credential_headers = [\"X-Api-Key\"]` (`Authorization`, `Cookie` and `Proxy-Authorization` always are)";
    let Expr::Array(ExprArray { elems, .. }) = expr else {
        cx.error_spanned_by(expr, FORM);
        return None;
    };
    let mut names = Vec::new();
    for elem in elems {
        let Expr::Lit(syn::ExprLit {
            lit: Lit::Str(name),
            ..
        }) = elem
        else {
            cx.error_spanned_by(elem, FORM);
            return None;
        };
        let value = name.value();
        // RFC 9110 `token`: what `http::HeaderName` accepts.
        let is_token = !value.is_empty()
            && value
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !is_token {
            cx.error_spanned_by(name, format!("{value:?} is not a header name"));
            return None;
        }
        names.push(LitStr::new(&value.to_ascii_lowercase(), name.span()));
    }
    Some(names)
}

impl Hook {
    /// Takes `#[webhook]`'s own keys; answers whether `meta` was one of them.
    pub(super) fn parse(&mut self, meta: &ParseNestedMeta<'_>, cx: &Ctxt) -> syn::Result<bool> {
        if meta.path.is_ident("scheme") {
            let expr: Expr = meta.value()?.parse()?;
            self.scheme_given = true;
            if let Some(variant) = scheme(&expr, cx) {
                set(cx, meta, &mut self.scheme, variant)?;
            }
        } else if meta.path.is_ident("secret") {
            let expr: Expr = meta.value()?.parse()?;
            if self.secret_given {
                cx.error_spanned_by(&meta.path, "duplicate argument `secret`; to accept several secrets while rotating, list them: `secret = [env(\"NEW\"), env(\"OLD\")]`");
                return Ok(true);
            }
            self.secret_given = true;
            self.secrets = secrets(&meta.path, &expr, cx);
        } else if meta.path.is_ident("max_body") {
            let bytes: LitInt = meta.value()?.parse()?;
            match bytes.base10_parse::<usize>() {
                Ok(0) | Err(_) => cx.error_spanned_by(
                    &bytes,
                    "`max_body` is the largest body accepted, in bytes: a positive integer such as `max_body = 65536`",
                ),
                Ok(_) => set(cx, meta, &mut self.max_body, bytes)?,
            }
        } else if meta.path.is_ident("tolerance_secs") {
            let secs: LitInt = meta.value()?.parse()?;
            match secs.base10_parse::<u64>() {
                Err(_) => cx.error_spanned_by(
                    &secs,
                    "`tolerance_secs` is how far a signed timestamp may be from the clock, in seconds, such as `tolerance_secs = 300`",
                ),
                Ok(_) => set(cx, meta, &mut self.tolerance_secs, secs)?,
            }
        } else if meta.path.is_ident("credential_headers") {
            let expr: Expr = meta.value()?.parse()?;
            if let Some(names) = credential_headers(&expr, cx) {
                set(cx, meta, &mut self.credential_headers, names)?;
            }
        } else {
            return Ok(false);
        }
        Ok(true)
    }

    /// `scheme` and `secret` are required; reported on the attribute.
    pub(super) fn require(&self, cx: &Ctxt) {
        if !self.scheme_given {
            cx.push(syn::Error::new(
                Span::call_site(),
                format!("#[webhook] needs `scheme = ..`, the provider's signing scheme: one of {SCHEME_LIST}"),
            ));
        }
        if !self.secret_given {
            cx.push(syn::Error::new(
                Span::call_site(),
                format!(
                    "#[webhook] needs `secret = ..`: a delivery is verified with the provider's signing secret before anything is parsed (rule 5)\n\
                     help: {SECRET_FORMS}"
                ),
            ));
        }
    }

    /// A closure that does not name its state's type takes the handler's; without one, it must.
    pub(super) fn check_closures(&self, state: Option<&Type>, cx: &Ctxt) {
        if state.is_some() {
            return;
        }
        for source in self.secrets.iter().flatten() {
            if let SecretSource::State(secret) = source
                && secret.ty.is_none()
            {
                cx.error_spanned_by(
                    &secret.closure.inputs,
                    "name the state the secret is taken from: `|s: &App| s.webhook_secret.clone()` (the handler takes no `State<..>` to infer it from)",
                );
            }
        }
    }
}

/// `scheme = stripe`: the `Scheme` variant, or an error listing the valid names.
fn scheme(expr: &Expr, cx: &Ctxt) -> Option<syn::Ident> {
    let written = match expr {
        Expr::Path(path) if path.qself.is_none() => path.path.get_ident().map(ToString::to_string),
        Expr::Lit(lit) => match &lit.lit {
            Lit::Str(s) => Some(s.value()),
            _ => None,
        },
        _ => None,
    };
    let Some(written) = written else {
        cx.error_spanned_by(
            expr,
            format!("`scheme` names the provider's signing scheme: one of {SCHEME_LIST}"),
        );
        return None;
    };
    if let Some((_, variant)) = SCHEMES.iter().find(|(name, _)| *name == written) {
        return Some(syn::Ident::new(variant, expr.span()));
    }
    let hint = SCHEMES
        .iter()
        .find(|(name, variant)| {
            written.eq_ignore_ascii_case(variant) || written.eq_ignore_ascii_case(name)
        })
        .map(|(name, _)| format!(" (written `{name}`)"))
        .unwrap_or_default();
    cx.error_spanned_by(
        expr,
        format!("unknown webhook scheme `{written}`; expected one of {SCHEME_LIST}{hint}"),
    );
    None
}

/// `secret = ..`: one source or a list. Errors never quote what was written: it may be a secret.
fn secrets(key: &syn::Path, expr: &Expr, cx: &Ctxt) -> Option<Vec<SecretSource>> {
    match expr {
        Expr::Array(ExprArray { elems, .. }) => {
            if elems.is_empty() {
                cx.error_spanned_by(
                    expr,
                    format!("`secret` lists no secret\nhelp: {SECRET_FORMS}"),
                );
                return None;
            }
            let sources: Vec<_> = elems.iter().map(|e| source(key, e, cx)).collect();
            sources.into_iter().collect()
        }
        _ => source(key, expr, cx).map(|s| vec![s]),
    }
}

fn source(key: &syn::Path, expr: &Expr, cx: &Ctxt) -> Option<SecretSource> {
    match expr {
        Expr::Call(ExprCall { func, args, .. }) if matches!(&**func, Expr::Path(p) if p.path.is_ident("env")) =>
        {
            let name = match args.first() {
                Some(Expr::Lit(lit)) if args.len() == 1 => match &lit.lit {
                    Lit::Str(s) => Some(s.clone()),
                    _ => None,
                },
                _ => None,
            };
            let valid = name.as_ref().is_some_and(|n| {
                let n = n.value();
                !n.is_empty() && !n.contains(['=', '\0'])
            });
            if !valid {
                cx.error_spanned_by(
                    expr,
                    "`env` takes the environment variable's name as a string literal: `env(\"STRIPE_WEBHOOK_SECRET\")`",
                );
                return None;
            }
            name.map(SecretSource::Env)
        }
        Expr::Closure(closure) => closure_source(closure, cx),
        Expr::Lit(_) => {
            // Spanned on the key, and the value is never repeated: it may be a real secret.
            cx.error_spanned_by(
                key,
                format!(
                    "a webhook secret must not be written in the source: it would be in the repository and the binary\n\
                     help: {SECRET_FORMS}"
                ),
            );
            None
        }
        Expr::Macro(m) if m.mac.path.is_ident("env") || m.mac.path.is_ident("option_env") => {
            cx.error_spanned_by(
                &m.mac.path,
                "`env!` reads the variable when the crate is compiled and puts the secret in the binary\n\
                 help: write `env(\"VAR\")` (no `!`): the variable is read when the verifier is built, at startup",
            );
            None
        }
        _ => {
            cx.error_spanned_by(
                expr,
                format!("`secret` takes `env(\"VAR\")`, a closure over the state, or a list of them\nhelp: {SECRET_FORMS}"),
            );
            None
        }
    }
}

fn closure_source(closure: &ExprClosure, cx: &Ctxt) -> Option<SecretSource> {
    if closure.asyncness.is_some() {
        cx.error_spanned_by(
            closure.asyncness,
            "the secret closure runs when the verifier is built and cannot be async: `|s: &App| s.webhook_secret.clone()`",
        );
        return None;
    }
    if closure.inputs.len() != 1 {
        cx.error_spanned_by(
            &closure.inputs,
            "the secret closure takes the state by reference: `|s: &App| s.webhook_secret.clone()`",
        );
        return None;
    }
    let ty = match &closure.inputs[0] {
        Pat::Type(typed) => match &*typed.ty {
            Type::Reference(r) if r.mutability.is_none() => Some((*r.elem).clone()),
            other => {
                cx.error_spanned_by(
                    other,
                    "the secret closure borrows the state: `|s: &App| ..`",
                );
                return None;
            }
        },
        _ => None,
    };
    Some(SecretSource::State(Box::new(StateSecret {
        closure: closure.clone(),
        ty,
    })))
}
