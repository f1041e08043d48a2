//! The checks every handler attribute shares. Token-level checks here give the precise message on
//! the offending tokens; the type-level probes emitted by the expansion catch what tokens cannot
//! show (a type alias, a user type marked as a clock or minter).

use proc_macro2::{Spacing, Span, TokenStream, TokenTree};
use quote::ToTokens;
use syn::{GenericArgument, PathArguments, ReturnType, Type, TypeParamBound};

use crate::ctxt::Ctxt;

/// What a forbidden thing is, with the rule it breaks and what to do instead.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Forbidden {
    Clock,
    Minter,
    AckHandle,
}

impl Forbidden {
    fn param_message(self, name: &str) -> String {
        match self {
            Forbidden::Clock => format!(
                "a handler must not take a clock (`{name}`): every delivery would write a different time (rule 3)\n\
                 help: take the time from the unit (a field of the payload, its `Stamp`, a header) so a redelivery writes the same value"
            ),
            Forbidden::Minter => format!(
                "a handler must not take an id minter or a random source (`{name}`): every delivery would create a new record (rule 3)\n\
                 help: derive ids from the unit: its `UnitId`, an id in the payload, or `Uuid::new_v5(namespace, unit_id)`"
            ),
            Forbidden::AckHandle => format!(
                "a handler must not take an acknowledgement handle (`{name}`): the runtime acknowledges after the effect (rule 1)\n\
                 help: return `Ok(())` once the effect is committed and the runtime acknowledges; return an error and it returns or dead-letters the unit"
            ),
        }
    }

    fn call_message(self, call: &str) -> String {
        match self {
            Forbidden::Clock => format!(
                "a handler must not read the clock (`{call}`): every delivery would write a different time (rule 3)\n\
                 help: take the time from the unit (a field of the payload, its `Stamp`, a header); a clock read that writes nothing, \
                 like a latency metric, may be declared with `#[consumer(allow_clock = \"why\")]`"
            ),
            Forbidden::Minter => format!(
                "a handler must not mint ids or randomness (`{call}`): every delivery would create a new record (rule 3)\n\
                 help: derive the id from the unit: its `UnitId`, an id in the payload, or `Uuid::new_v5(namespace, unit_id.as_str().as_bytes())`"
            ),
            Forbidden::AckHandle => unreachable!("acknowledgement is found by type, not by call"),
        }
    }
}

/// Types a handler parameter may never be, by the last segment of their path.
fn forbidden_type(segments: &[String]) -> Option<Forbidden> {
    let last = segments.last()?.as_str();
    let in_path = |name: &str| segments.iter().any(|s| s == name);
    match last {
        "SystemTime" | "Instant" | "Utc" | "Local" | "OffsetDateTime" | "Zoned" | "Clock" => Some(Forbidden::Clock),
        "Timestamp" if in_path("jiff") || segments.len() == 1 => Some(Forbidden::Clock),
        "ThreadRng" | "StdRng" | "SmallRng" | "OsRng" | "ChaCha8Rng" | "ChaCha12Rng" | "ChaCha20Rng" | "Rng"
        | "RngCore" | "CryptoRng" | "TryRngCore" | "Minter" => Some(Forbidden::Minter),
        "Generator" if in_path("ulid") => Some(Forbidden::Minter),
        "ContextV7" | "Context" if in_path("uuid") => Some(Forbidden::Minter),
        "Acker" | "MemoryHandle" | "Settle" => Some(Forbidden::AckHandle),
        "Delivery" if in_path("lapin") => Some(Forbidden::AckHandle),
        _ => None,
    }
}

/// Wrappers a forbidden type is still reachable through as a parameter.
const WRAPPERS: &[&str] = &[
    "Arc", "Rc", "Box", "State", "Option", "Mutex", "RwLock", "RefCell", "Cell", "DateTime",
];

/// Checks one parameter type; reports the first forbidden type reachable in it.
pub(crate) fn param_type(ty: &Type, allow_clock: bool, cx: &Ctxt) -> bool {
    match find_forbidden_type(ty, allow_clock) {
        Some((kind, tokens, name)) => {
            cx.error_spanned_by(tokens, kind.param_message(&name));
            false
        }
        None => true,
    }
}

fn find_forbidden_type(ty: &Type, allow_clock: bool) -> Option<(Forbidden, TokenStream, String)> {
    let allowed = |kind: Forbidden| !(allow_clock && kind == Forbidden::Clock);
    match ty {
        Type::Reference(r) => find_forbidden_type(&r.elem, allow_clock),
        Type::Paren(p) => find_forbidden_type(&p.elem, allow_clock),
        Type::Group(g) => find_forbidden_type(&g.elem, allow_clock),
        Type::Ptr(p) => find_forbidden_type(&p.elem, allow_clock),
        Type::Path(path) => {
            let segments: Vec<String> = path.path.segments.iter().map(|s| s.ident.to_string()).collect();
            if let Some(kind) = forbidden_type(&segments).filter(|k| allowed(*k)) {
                return Some((kind, path.to_token_stream(), path.path.segments.last()?.ident.to_string()));
            }
            let last = path.path.segments.last()?;
            if !WRAPPERS.contains(&last.ident.to_string().as_str()) {
                return None;
            }
            let PathArguments::AngleBracketed(args) = &last.arguments else { return None };
            args.args.iter().find_map(|arg| match arg {
                GenericArgument::Type(inner) => find_forbidden_type(inner, allow_clock),
                _ => None,
            })
        }
        Type::TraitObject(t) => bounds(&t.bounds, allow_clock),
        Type::ImplTrait(t) => bounds(&t.bounds, allow_clock),
        _ => None,
    }
}

fn bounds(
    bounds: &syn::punctuated::Punctuated<TypeParamBound, syn::Token![+]>,
    allow_clock: bool,
) -> Option<(Forbidden, TokenStream, String)> {
    bounds.iter().find_map(|bound| {
        let TypeParamBound::Trait(t) = bound else { return None };
        let segments: Vec<String> = t.path.segments.iter().map(|s| s.ident.to_string()).collect();
        let kind = forbidden_type(&segments)?;
        if allow_clock && kind == Forbidden::Clock {
            return None;
        }
        Some((kind, t.path.to_token_stream(), segments.last()?.clone()))
    })
}

/// Calls that read the clock: `Type::function` pairs.
const CLOCK_CALLS: &[(&str, &str)] = &[
    ("SystemTime", "now"),
    ("Instant", "now"),
    ("Utc", "now"),
    ("Local", "now"),
    ("Utc", "today"),
    ("Local", "today"),
    ("OffsetDateTime", "now_utc"),
    ("OffsetDateTime", "now_local"),
    ("Timestamp", "now"),
    ("Zoned", "now"),
];

/// Calls that mint ids or randomness.
const MINT_CALLS: &[(&str, &str)] = &[
    ("Uuid", "new_v4"),
    ("Uuid", "now_v1"),
    ("Uuid", "now_v6"),
    ("Uuid", "now_v7"),
    ("Ulid", "new"),
    ("Ulid", "generate"),
    ("rand", "random"),
    ("rand", "rng"),
    ("StdRng", "from_entropy"),
    ("SmallRng", "from_entropy"),
    ("StdRng", "from_os_rng"),
    ("SmallRng", "from_os_rng"),
    ("ChaCha20Rng", "from_entropy"),
    ("ChaCha20Rng", "from_os_rng"),
    ("getrandom", "getrandom"),
    ("getrandom", "fill"),
    ("fastrand", "u64"),
    ("fastrand", "u32"),
];

/// Names that mint wherever they appear: `thread_rng()` imported bare, `OsRng`, `nanoid!`.
const MINT_NAMES: &[&str] = &["thread_rng", "OsRng"];
const MINT_MACROS: &[&str] = &["nanoid"];

/// Scans a body's tokens — every nested block, closure, async block and macro call's tokens — for
/// clock reads and id mints. Reports each one on its tokens.
pub(crate) fn body(tokens: TokenStream, allow_clock: bool, cx: &Ctxt) {
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    for (i, token) in tokens.iter().enumerate() {
        match token {
            TokenTree::Group(group) => body(group.stream(), allow_clock, cx),
            TokenTree::Ident(first) => {
                let first_name = first.to_string();
                if let Some(second) = path_continuation(&tokens[i + 1..]) {
                    let pair = (first_name.as_str(), second.to_string());
                    let matches = |list: &[(&str, &str)]| list.iter().any(|(a, b)| *a == pair.0 && *b == pair.1);
                    let call = format!("{}::{}", pair.0, pair.1);
                    if matches(CLOCK_CALLS) && !allow_clock {
                        report(cx, first.span(), second.span(), Forbidden::Clock.call_message(&call));
                    } else if matches(MINT_CALLS) {
                        report(cx, first.span(), second.span(), Forbidden::Minter.call_message(&call));
                    }
                }
                if MINT_NAMES.contains(&first_name.as_str()) {
                    report(cx, first.span(), first.span(), Forbidden::Minter.call_message(&first_name));
                }
                let is_macro = matches!(tokens.get(i + 1), Some(TokenTree::Punct(p)) if p.as_char() == '!');
                if is_macro && MINT_MACROS.contains(&first_name.as_str()) {
                    report(cx, first.span(), first.span(), Forbidden::Minter.call_message(&format!("{first_name}!")));
                }
            }
            _ => {}
        }
    }
}

/// `:: ident` (with optional turbofish-free spacing) after an identifier.
fn path_continuation(rest: &[TokenTree]) -> Option<&proc_macro2::Ident> {
    match rest {
        [TokenTree::Punct(a), TokenTree::Punct(b), TokenTree::Ident(ident), ..]
            if a.as_char() == ':' && a.spacing() == Spacing::Joint && b.as_char() == ':' =>
        {
            Some(ident)
        }
        _ => None,
    }
}

fn report(cx: &Ctxt, start: Span, end: Span, message: String) {
    // An error spanning from the first to the last token of the call.
    let mut first = proc_macro2::Ident::new("__delivery_start", start).into_token_stream();
    first.extend(proc_macro2::Ident::new("__delivery_end", end).into_token_stream());
    cx.push(syn::Error::new_spanned(first, message));
}

/// The return type: a handler that cannot report a failure swallows it (rule 1). Returns the type
/// to check at the type level when the tokens cannot tell.
pub(crate) fn return_type<'a>(output: &'a ReturnType, name: &syn::Ident, cx: &Ctxt) -> Option<&'a Type> {
    let ty = match output {
        ReturnType::Default => {
            cx.error_spanned_by(
                name,
                format!(
                    "`{name}` returns `()`, which cannot report a failure: a failed unit would be acknowledged (rule 1)\n\
                     help: return `Result<(), HandlerError>` (or any `Result<_, E>` with `E: Into<HandlerError>`)"
                ),
            );
            return None;
        }
        ReturnType::Type(_, ty) => ty,
    };
    let cannot_fail = match &**ty {
        Type::Tuple(_) | Type::Never(_) => true,
        Type::Path(p) => p.qself.is_none()
            && p.path.get_ident().is_some_and(|i| {
                matches!(
                    i.to_string().as_str(),
                    "bool" | "u8" | "u16" | "u32" | "u64" | "u128" | "usize" | "i8" | "i16" | "i32" | "i64" | "i128"
                        | "isize" | "f32" | "f64" | "char" | "str" | "String"
                )
            }),
        _ => false,
    };
    if cannot_fail {
        cx.error_spanned_by(
            ty,
            format!(
                "a handler returning `{}` cannot report a failure: a failed unit would be acknowledged (rule 1)\n\
                 help: return `Result<(), HandlerError>` (or any `Result<_, E>` with `E: Into<HandlerError>`)",
                ty.to_token_stream().to_string().replace(' ', "")
            ),
        );
        return None;
    }
    Some(ty)
}
