//! Rule 5: a parameter that reads the request body before its signature is verified is refused,
//! by its tokens here and by its type in the expansion's extractors.

use proc_macro2::TokenStream;
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{GenericArgument, PathArguments, Type};

use crate::ast::Handler;
use crate::check::Checked;
use crate::ctxt::Ctxt;
use crate::webhook::args::Hook;

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
pub(super) fn check_raw_body(handler: &Handler<Hook>, checked: &mut Checked, cx: &Ctxt) {
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
pub(super) fn extractor(krate: &TokenStream, ty: &Type, state: &TokenStream) -> TokenStream {
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
