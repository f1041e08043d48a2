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

mod args;
mod impls;
mod raw_body;

use proc_macro2::TokenStream;
use quote::quote;
use syn::Type;

use crate::ast::Handler;
use crate::attr::Args;
use crate::check::Checked;
use crate::check::wording::{self, Wording};
use crate::ctxt::Ctxt;
use crate::kind::{Kind, Runtime};
use crate::webhook::args::{Hook, KEYS};
use crate::webhook::impls::expand_webhook;
use crate::webhook::raw_body::{check_raw_body, extractor};

pub(crate) struct Webhook;

impl Kind for Webhook {
    const NAME: &'static str = "webhook";
    const RUNTIME: Runtime = Runtime::CONSUMER;
    const WORDING: Wording = wording::HANDLER;
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

/// The state of a handler that takes none: its parameters come from the unit alone.
fn unit_state() -> Type {
    syn::parse_quote!(())
}
