//! `#[webhook]`: what it adds to the shared stages.
//!
//! A webhook handler is a consumer handler whose unit arrives over HTTP, signed by a third party.
//! The annotated `async fn` goes through the shared checks and expansion as a `#[consumer]` does
//! (a unit struct of the same name implementing `Handler<S>`, the function kept as
//! `name::handle`), plus:
//! - a parameter that reads the request body before it is verified (axum's `Json`, `Form`,
//!   `Bytes`, `String`, `Request`, `Body`) is refused (rule 5), by its tokens where they tell and
//!   by its type otherwise;
//! - `scheme = ..` and `secret = ..` are required; a secret is never written in the source;
//! - `credential_headers = ["X-Api-Key"]` names headers, beside `Authorization`, `Cookie` and
//!   `Proxy-Authorization`, that are never copied into the unit (checked as header names here);
//! - the struct implements `WebhookHandler<S>` (how to build its verifier, how to run it against
//!   the router's state) and axum's `Handler`, so `post(name)` routes to it.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::meta::ParseNestedMeta;
use syn::spanned::Spanned;
use syn::{
    Expr, ExprArray, ExprCall, ExprClosure, GenericArgument, Lit, LitInt, LitStr, Pat,
    PathArguments, Type,
};

use crate::ast::Handler;
use crate::attr::{Args, set};
use crate::check::{self, Checked, Wording};
use crate::ctxt::Ctxt;
use crate::expand::{self, Attrs};
use crate::kind::{Kind, Runtime};

const KEYS: &str = "`scheme = stripe`, `secret = env(\"VAR\")`, `max_body = bytes`, \
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
    scheme: Option<syn::Ident>,
    /// Whether `scheme = ..` was given at all, known or not.
    scheme_given: bool,
    /// Where the secrets come from; `None` when missing or unusable (already reported).
    secrets: Option<Vec<SecretSource>>,
    /// Whether `secret = ..` was given at all, usable or not.
    secret_given: bool,
    max_body: Option<LitInt>,
    tolerance_secs: Option<LitInt>,
    /// `credential_headers = [..]`: header names dropped from the unit, beside the defaults.
    credential_headers: Option<Vec<LitStr>>,
}

enum SecretSource {
    /// `env("VAR")`: read when the verifier is built.
    Env(LitStr),
    /// `|s: &T| ..`: taken from the state.
    State(Box<StateSecret>),
}

struct StateSecret {
    closure: ExprClosure,
    /// `T`, when the closure names it.
    ty: Option<Type>,
}

pub(crate) struct Webhook;

impl Kind for Webhook {
    const NAME: &'static str = "webhook";
    const RUNTIME: Runtime = Runtime::CONSUMER;
    const WORDING: Wording = check::HANDLER;
    type Own = Hook;

    fn parse_args(attr: TokenStream, cx: &Ctxt) -> (Args, Hook) {
        let mut hook = Hook::default();
        let args = Args::parse_with(attr, cx, KEYS, |meta| hook.parse(meta, cx));
        hook.require(cx);
        (args, hook)
    }

    fn check(handler: &Handler<Hook>, checked: &mut Checked, cx: &Ctxt) {
        check_raw_body(handler, checked, cx);
        handler.own.check_closures(checked.state.as_ref(), cx);
    }

    fn default_state() -> Option<Type> {
        Some(unit_state())
    }

    fn assert_extractor(krate: &TokenStream, ty: &Type, state: &TokenStream) -> TokenStream {
        let check = extractor(krate, ty, state);
        quote!(let _ = #check;)
    }

    fn extract(krate: &TokenStream, ty: &Type, state: &TokenStream) -> TokenStream {
        let extractor = extractor(krate, ty, state);
        quote!((#extractor)(__delivery_unit, __delivery_state))
    }

    fn expand(handler: &Handler<Hook>, checked: &Checked, has_errors: bool) -> TokenStream {
        match &checked.state {
            Some(state) => expand_webhook(handler, state, false, has_errors),
            None => expand_webhook(handler, &unit_state(), true, has_errors),
        }
    }
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

/// The state of a handler that takes none: its parameters come from the unit alone.
fn unit_state() -> Type {
    syn::parse_quote!(())
}

impl Hook {
    /// Takes `#[webhook]`'s own keys; answers whether `meta` was one of them.
    fn parse(&mut self, meta: &ParseNestedMeta<'_>, cx: &Ctxt) -> syn::Result<bool> {
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
    fn require(&self, cx: &Ctxt) {
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
    fn check_closures(&self, state: Option<&Type>, cx: &Ctxt) {
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

/// Types that read the request body, by their path's last segment: anywhere, or when the path
/// names a crate that defines a body extractor (`axum::Json`, `http::Request`).
const RAW_BODY: &[&str] = &[
    "Bytes",
    "BytesMut",
    "String",
    "RawForm",
    "Multipart",
    "RawBody",
];
const RAW_BODY_QUALIFIED: &[&str] = &["Json", "Form", "Request", "Body"];
const BODY_CRATES: &[&str] = &["axum", "axum_core", "axum_extra", "bytes", "http", "hyper"];
const PASS_THROUGH: &[&str] = &["Option", "Result", "Box"];

/// Rule 5 by tokens: a parameter that reads the body before the generated handler verified it.
/// Types the tokens leave open (a bare `Json` could be `delivery::Json` or axum's) are checked by
/// type in the expansion.
fn check_raw_body(handler: &Handler<Hook>, checked: &mut Checked, cx: &Ctxt) {
    for (typed, param) in handler.params().zip(&mut checked.params) {
        if let Some((tokens, name)) = reads_raw_body(&typed.ty) {
            cx.error_spanned_by(
                tokens,
                format!(
                    "a webhook handler must not take `{name}`: it reads the request body before its signature is verified (rule 5)\n\
                     help: the generated handler reads the raw body and verifies it first; take `delivery::Json<T>` for the verified payload, or `delivery::Unit` for the verified bytes"
                ),
            );
            param.ok = false;
        }
    }
}

fn reads_raw_body(ty: &Type) -> Option<(TokenStream, String)> {
    match ty {
        Type::Reference(r) => reads_raw_body(&r.elem),
        Type::Paren(p) => reads_raw_body(&p.elem),
        Type::Group(g) => reads_raw_body(&g.elem),
        Type::Path(path) if path.qself.is_none() => {
            let segments = &path.path.segments;
            let last = segments.last()?;
            let name = last.ident.to_string();
            let first = segments.first()?.ident.to_string();
            let qualified = segments.len() > 1 && BODY_CRATES.contains(&first.as_str());
            if RAW_BODY.contains(&name.as_str())
                || (qualified && RAW_BODY_QUALIFIED.contains(&name.as_str()))
            {
                let shown = segments
                    .iter()
                    .map(|s| s.ident.to_string())
                    .collect::<Vec<_>>()
                    .join("::");
                return Some((path.to_token_stream(), shown));
            }
            if !PASS_THROUGH.contains(&name.as_str()) {
                return None;
            }
            let PathArguments::AngleBracketed(args) = &last.arguments else {
                return None;
            };
            args.args.iter().find_map(|arg| match arg {
                GenericArgument::Type(inner) => reads_raw_body(inner),
                _ => None,
            })
        }
        _ => None,
    }
}

/// The function resolving one parameter of type `ty` against `state`, as an expression of type
/// `fn(&Unit, &S) -> Result<T, Malformed>`: an extractor, an error with rule 5's message for a
/// type that reads the raw body (axum's `Json` imported as `Json`), or the usual "not an
/// extractor" error. Chosen at the call site, where the types are concrete.
fn extractor(krate: &TokenStream, ty: &Type, state: &TokenStream) -> TokenStream {
    let wp = quote!(#krate::webhook::__private);
    let span = ty.span();
    quote_spanned! {span=>
        {
            #[allow(unused_imports)]
            use #wp::{ViaAnything as _, ViaFromUnit as _, ViaRawBody as _};
            (&&#wp::Extract::<#ty, #state>::NEW).extractor()
        }
    }
}

/// `WebhookHandler<S>` and axum's `Handler`, so that `post(name)` routes to the handler type.
fn expand_webhook(
    handler: &Handler<Hook>,
    state: &Type,
    stateless: bool,
    has_errors: bool,
) -> TokenStream {
    let Handler {
        function,
        args,
        own: hook,
    } = handler;
    let krate = args.krate_path();
    let private = quote!(#krate::__private);
    let wp = quote!(#krate::webhook::__private);
    let Attrs { cfgs, .. } = expand::sort_attrs(&function.attrs);
    let vis = &function.vis;
    let name = &function.sig.ident;
    let name_text = name.to_string();
    let rs = format_ident!("__DeliveryRouterState");

    // The handler's own state is taken from the router's (`FromRef`, as axum's `State` does).
    let mut bounds = Vec::new();
    let handler_state = if stateless {
        quote!(())
    } else {
        bounds.push(quote!(#state: #wp::FromRef<#rs>,));
        quote!(<#state as #wp::FromRef<#rs>>::from_ref(__delivery_state))
    };

    let (verifier, cache) = match (&hook.scheme, &hook.secrets) {
        (Some(variant), Some(sources)) if !has_errors => {
            let steps = sources.iter().map(|source| match source {
                SecretSource::Env(var) => quote!(.env(#var)),
                SecretSource::State(secret) => {
                    let StateSecret { closure, ty } = &**secret;
                    let ty = ty.as_ref().unwrap_or(state);
                    bounds.push(quote!(#ty: #wp::FromRef<#rs>,));
                    let span = closure.span();
                    quote_spanned! {span=>
                        .from_state(
                            &<#ty as #wp::FromRef<#rs>>::from_ref(__delivery_state),
                            #closure,
                        )
                    }
                }
            });
            let max_body = hook.max_body.as_ref().map(|n| quote!(.max_body(#n)));
            let credential_headers = hook.credential_headers.iter().flatten();
            let tolerance = hook
                .tolerance_secs
                .as_ref()
                .map(|s| quote!(.tolerance(::core::time::Duration::from_secs(#s))));
            let verifier = quote! {
                #wp::Config::new(#name_text, #krate::webhook::Scheme::#variant)
                    #(#steps)*
                    #max_body
                    #tolerance
                    #(.credential_header(#credential_headers))*
                    .build()
            };
            // Secrets read from the environment only are the same for every state and every
            // request: the verifier is built once per process.
            let env_only = sources.iter().all(|s| matches!(s, SecretSource::Env(_)));
            let cache = env_only.then(|| {
                quote! {
                    fn verifier_cache(&self) -> ::core::option::Option<&'static #wp::VerifierCache> {
                        static CACHE: #wp::VerifierCache = #wp::VerifierCache::new();
                        ::core::option::Option::Some(&CACHE)
                    }
                }
            });
            (verifier, cache)
        }
        // Never runs: the build fails on the errors reported. The type stays usable meanwhile.
        _ => (
            quote!(::core::unreachable!("#[webhook] reported errors")),
            None,
        ),
    };

    let verifier_doc = format!(
        " Builds the verifier of `{name}` from its `secret` sources, read now. Call it at startup to fail fast on a \
         missing or unusable secret (`delivery::webhook::route` does)."
    );

    quote! {
        #(#cfgs)*
        impl #name {
            #[doc = #verifier_doc]
            #[allow(dead_code, clippy::missing_errors_doc)]
            #vis fn verifier<#rs>(
                state: &#rs,
            ) -> ::core::result::Result<#krate::webhook::Verifier, #krate::webhook::WebhookConfigError>
            where
                Self: #wp::WebhookHandler<#rs>,
            {
                <Self as #wp::WebhookHandler<#rs>>::verifier(&#name, state)
            }
        }

        #(#cfgs)*
        const _: () = {
            impl<#rs> #wp::WebhookHandler<#rs> for #name
            where
                #rs: ::core::marker::Send + ::core::marker::Sync + 'static,
                #(#bounds)*
            {
                type State = #state;

                const NAME: &'static str = #name_text;

                // A handler without state has `()`, returned as such.
                #[allow(clippy::unused_unit)]
                fn handler_state(__delivery_state: &#rs) -> #state {
                    #handler_state
                }

                fn verifier(
                    &self,
                    __delivery_state: &#rs,
                ) -> ::core::result::Result<#krate::webhook::Verifier, #krate::webhook::WebhookConfigError> {
                    #verifier
                }

                #cache

                fn run(
                    &self,
                    __delivery_unit: &#private::Unit,
                    __delivery_state: &#state,
                ) -> impl ::core::future::Future<Output = #private::Outcome> + ::core::marker::Send + 'static {
                    <Self as #private::Handler<#state>>::call(self, __delivery_unit, __delivery_state)
                }
            }

            impl<#rs> #wp::axum::handler::Handler<#wp::WebhookMarker, #rs> for #name
            where
                #rs: ::core::clone::Clone + ::core::marker::Send + ::core::marker::Sync + 'static,
                #name: #wp::WebhookHandler<#rs>,
            {
                type Future = #wp::ResponseFuture;

                fn call(self, __delivery_request: #wp::axum::extract::Request, __delivery_state: #rs) -> Self::Future {
                    #wp::serve(self, __delivery_request, __delivery_state)
                }
            }
        };
    }
}
