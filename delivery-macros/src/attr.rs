//! The arguments every handler attribute shares: `allow_clock = "why"`, `state = Type`,
//! `crate = path`. An attribute with arguments of its own (`#[webhook]`'s `scheme`, `secret`, ...)
//! parses them through [`Args::parse_with`].

use proc_macro2::TokenStream;
use quote::quote;
use syn::meta::ParseNestedMeta;
use syn::{LitStr, Path, Type};

use crate::ctxt::Ctxt;

/// Arguments of `#[consumer(...)]` (and of the attributes sharing its checks).
#[derive(Default)]
pub(crate) struct Args {
    /// The recorded reason for a clock read that writes nothing.
    pub(crate) allow_clock: Option<LitStr>,
    /// The shared state type, when no `State<T>` parameter names it.
    pub(crate) state: Option<Type>,
    /// Where the runtime is, when not at `::delivery`.
    pub(crate) krate: Option<Path>,
}

const KEYS: &str = "`allow_clock = \"why\"`, `state = Type`, `crate = path`";

impl Args {
    pub(crate) fn parse(attr: TokenStream, cx: &Ctxt) -> Args {
        Args::parse_with(attr, cx, KEYS, |_| Ok(false))
    }

    /// The shared arguments, plus the attribute's own: `extra` is offered every key first and
    /// answers whether it took it. An unknown key is an error listing `keys`.
    pub(crate) fn parse_with(
        attr: TokenStream,
        cx: &Ctxt,
        keys: &str,
        mut extra: impl FnMut(&ParseNestedMeta<'_>) -> syn::Result<bool>,
    ) -> Args {
        let mut args = Args::default();
        let parser = syn::meta::parser(|meta| {
            if extra(&meta)? {
                Ok(())
            } else if meta.path.is_ident("allow_clock") {
                let reason: LitStr = meta.value()?.parse()?;
                if reason.value().trim().is_empty() {
                    cx.error_spanned_by(&reason, "`allow_clock` needs the reason a clock read is safe here, e.g. `allow_clock = \"latency metric only; writes nothing\"`");
                }
                set(cx, &meta, &mut args.allow_clock, reason)
            } else if meta.path.is_ident("state") {
                let ty: Type = meta.value()?.parse()?;
                set(cx, &meta, &mut args.state, ty)
            } else if meta.path.is_ident("crate") {
                let value = meta.value()?;
                let path = if value.peek(LitStr) {
                    value.parse::<LitStr>()?.parse()?
                } else {
                    value.parse()?
                };
                set(cx, &meta, &mut args.krate, path)
            } else {
                Err(meta.error(format!("unknown argument; expected one of {keys}")))
            }
        });
        if let Err(error) = syn::parse::Parser::parse2(parser, attr) {
            cx.push(error);
        }
        args
    }

    /// The path generated code names the runtime by: `crate = path`, or `::delivery`.
    pub(crate) fn krate_path(&self) -> TokenStream {
        match &self.krate {
            Some(path) => quote!(#path),
            None => quote!(::delivery),
        }
    }
}

/// Stores an argument's value, or reports the key as given twice.
pub(crate) fn set<T>(
    cx: &Ctxt,
    meta: &ParseNestedMeta<'_>,
    slot: &mut Option<T>,
    value: T,
) -> syn::Result<()> {
    if slot.is_some() {
        let name = meta
            .path
            .get_ident()
            .map(ToString::to_string)
            .unwrap_or_default();
        cx.error_spanned_by(&meta.path, format!("duplicate argument `{name}`"));
    } else {
        *slot = Some(value);
    }
    Ok(())
}
