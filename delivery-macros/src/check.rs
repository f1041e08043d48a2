//! Check: the rules every handler attribute holds a function to. Token-level checks here give the
//! precise message on the offending tokens; the type-level probes emitted by the expansion catch
//! what tokens cannot show (a type alias, a user type marked as a clock or minter).

use proc_macro2::{Spacing, Span, TokenStream, TokenTree};
use quote::ToTokens;
use syn::{FnArg, GenericArgument, ItemFn, PathArguments, ReturnType, Type, TypeParamBound};

use crate::ast::Handler;
use crate::ctxt::Ctxt;

/// What a forbidden thing is, with the rule it breaks and what to do instead.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Forbidden {
    Clock,
    Minter,
    AckHandle,
}

/// How the checks word their errors: what the function is and which rule it breaks. A unit
/// handler is held to rules 1 and 3 ([`HANDLER`]); an attribute whose function is something else
/// (`#[relay]`) words its own.
pub(crate) struct Wording {
    /// A parameter of a forbidden type, named by its path's last segment.
    pub(crate) param: fn(Forbidden, &str) -> String,
    /// A forbidden call in the body, as written (`SystemTime::now`).
    pub(crate) call: fn(Forbidden, &str) -> String,
    /// A function that returns `()` by having no return type.
    pub(crate) returns_nothing: fn(&syn::Ident) -> String,
    /// A return type that cannot carry a failure, as written (`bool`).
    pub(crate) cannot_fail: fn(&str) -> String,
}

/// The wording for a unit handler (`#[consumer]`, `#[webhook]`).
pub(crate) const HANDLER: Wording = Wording {
    param: handler_param,
    call: handler_call,
    returns_nothing: handler_returns_nothing,
    cannot_fail: handler_cannot_fail,
};

fn handler_param(kind: Forbidden, name: &str) -> String {
    match kind {
        Forbidden::Clock => format!(
            "a handler must not take a clock (`{name}`): every delivery would write a different time (rule 3)\n\
             help: take the time from the unit (a field of the payload, its `Stamp`, a header) so a redelivery writes the same value"
        ),
        Forbidden::Minter => format!(
            "a handler must not take an id minter or a random source (`{name}`): every delivery would create a new record (rule 3)\n\
             help: derive the id from the unit: its `UnitId`, an id in the payload, or `Uuid::new_v5(&namespace, unit_id.as_str().as_bytes())`"
        ),
        Forbidden::AckHandle => format!(
            "a handler must not take an acknowledgement handle (`{name}`): the runtime acknowledges after the effect (rule 1)\n\
             help: return `Ok(())` once the effect is committed and the runtime acknowledges; return an error and it returns or dead-letters the unit"
        ),
    }
}

fn handler_call(kind: Forbidden, call: &str) -> String {
    match kind {
        Forbidden::Clock => format!(
            "a handler must not read the clock (`{call}`): every delivery would write a different time (rule 3)\n\
             help: take the time from the unit (a field of the payload, its `Stamp`, a header); a clock read that writes nothing, \
             like a latency metric, may be declared with `#[consumer(allow_clock = \"why\")]`"
        ),
        Forbidden::Minter => format!(
            "a handler must not mint ids or randomness (`{call}`): every delivery would create a new record (rule 3)\n\
             help: derive the id from the unit: its `UnitId`, an id in the payload, or `Uuid::new_v5(&namespace, unit_id.as_str().as_bytes())`"
        ),
        Forbidden::AckHandle => unreachable!("acknowledgement is found by type, not by call"),
    }
}

fn handler_returns_nothing(name: &syn::Ident) -> String {
    format!(
        "`{name}` returns `()`, which cannot report a failure: a failed unit would be acknowledged (rule 1)\n\
         help: return `Result<(), HandlerError>` (or any `Result<_, E>` with `E: Into<HandlerError>`)"
    )
}

fn handler_cannot_fail(ty: &str) -> String {
    format!(
        "a handler returning `{ty}` cannot report a failure: a failed unit would be acknowledged (rule 1)\n\
         help: return `Result<(), HandlerError>` (or any `Result<_, E>` with `E: Into<HandlerError>`)"
    )
}

/// What the checks learned, for the expansion.
pub(crate) struct Checked {
    pub(crate) params: Vec<Param>,
    pub(crate) state: Option<Type>,
    /// The return type, when its tokens passed the check.
    pub(crate) output: Option<Type>,
}

pub(crate) struct Param {
    pub(crate) ty: Type,
    /// Whether the token-level checks passed; the type-level ones are emitted only then.
    pub(crate) ok: bool,
}

/// What makes a function unusable as a `#[name]` handler, whatever its types.
pub(crate) fn shape(function: &ItemFn, name: &str, cx: &Ctxt) -> bool {
    let sig = &function.sig;
    let mut ok = true;
    if sig.asyncness.is_none() {
        cx.error_spanned_by(
            sig.fn_token,
            format!("a {name} handler must be an `async fn`"),
        );
        ok = false;
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        cx.error_spanned_by(
            &sig.generics,
            format!("a {name} handler cannot be generic: name the concrete types it takes"),
        );
        ok = false;
    }
    if let Some(variadic) = &sig.variadic {
        cx.error_spanned_by(variadic, format!("a {name} handler cannot be variadic"));
        ok = false;
    }
    for input in &sig.inputs {
        if let FnArg::Receiver(receiver) = input {
            cx.error_spanned_by(receiver, format!("a {name} handler is a free function; take the state as `State<S>` instead of `self`"));
            ok = false;
        }
    }
    for input in &sig.inputs {
        if let FnArg::Typed(typed) = input
            && !binding_names(&typed.pat, &sig.ident, cx)
        {
            ok = false;
        }
    }
    ok
}

/// The parameters, the body and the return type of a function that passed [`shape`].
pub(crate) fn signature<Own>(handler: &Handler<Own>, wording: &Wording, cx: &Ctxt) -> Checked {
    let sig = &handler.function.sig;
    let allow_clock = handler.args.allow_clock.is_some();
    let mut params = Vec::new();
    let mut state = handler.args.state.clone();
    let mut state_from_param = false;
    for typed in handler.params() {
        let ok = param_type(&typed.ty, allow_clock, wording, cx);
        if let Some(inner) = state_param(&typed.ty) {
            match &state {
                Some(_) if state_from_param => cx.error_spanned_by(
                    &typed.ty,
                    "a handler takes its shared state once: put everything it needs in one state type",
                ),
                Some(_) => cx.error_spanned_by(
                    &typed.ty,
                    "the state type is given twice: by `state = ..` and by this `State<..>` parameter; keep one",
                ),
                None => {
                    state = Some(inner.clone());
                    state_from_param = true;
                }
            }
        }
        params.push(Param {
            ty: (*typed.ty).clone(),
            ok,
        });
    }
    body(
        handler.function.block.to_token_stream(),
        allow_clock,
        wording,
        cx,
    );
    let output = return_type(&sig.output, &sig.ident, wording, cx).cloned();
    Checked {
        params,
        state,
        output,
    }
}

/// `T` of a `State<T>` parameter.
fn state_param(ty: &Type) -> Option<&Type> {
    let Type::Path(path) = ty else { return None };
    let last = path.path.segments.last()?;
    if last.ident != "State" {
        return None;
    }
    let PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    match args.args.first()? {
        GenericArgument::Type(inner) => Some(inner),
        _ => None,
    }
}

/// Types a handler parameter may never be, by the last segment of their path.
fn forbidden_type(segments: &[String]) -> Option<Forbidden> {
    let last = segments.last()?.as_str();
    let in_path = |name: &str| segments.iter().any(|s| s == name);
    match last {
        "SystemTime" | "Instant" | "Utc" | "Local" | "OffsetDateTime" | "Zoned" | "Clock" => {
            Some(Forbidden::Clock)
        }
        // A bare `Timestamp` is too often a user's own value type (or extractor) to refuse.
        "Timestamp" if in_path("jiff") => Some(Forbidden::Clock),
        "ThreadRng" | "StdRng" | "SmallRng" | "OsRng" | "ChaCha8Rng" | "ChaCha12Rng"
        | "ChaCha20Rng" | "Rng" | "RngCore" | "CryptoRng" | "TryRngCore" | "Minter" => {
            Some(Forbidden::Minter)
        }
        "Generator" if in_path("ulid") => Some(Forbidden::Minter),
        "ContextV7" | "Context" if in_path("uuid") => Some(Forbidden::Minter),
        "Acker" | "MemoryHandle" | "Settle" => Some(Forbidden::AckHandle),
        "Delivery" if in_path("lapin") => Some(Forbidden::AckHandle),
        // rdkafka's consumers commit offsets: an offset confirms every unit before it.
        "StreamConsumer" | "BaseConsumer" => Some(Forbidden::AckHandle),
        _ => None,
    }
}

/// Wrappers a forbidden type is still reachable through as a parameter.
const WRAPPERS: &[&str] = &[
    "Arc", "Rc", "Box", "State", "Option", "Mutex", "RwLock", "RefCell", "Cell", "DateTime",
];

/// Checks one parameter type; reports the first forbidden type reachable in it.
fn param_type(ty: &Type, allow_clock: bool, wording: &Wording, cx: &Ctxt) -> bool {
    match find_forbidden_type(ty, allow_clock) {
        Some((kind, tokens, name)) => {
            cx.error_spanned_by(tokens, (wording.param)(kind, &name));
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
        Type::Array(a) => find_forbidden_type(&a.elem, allow_clock),
        Type::Slice(a) => find_forbidden_type(&a.elem, allow_clock),
        Type::Tuple(t) => t
            .elems
            .iter()
            .find_map(|elem| find_forbidden_type(elem, allow_clock)),
        Type::Path(path) => {
            let segments = segment_names(&path.path);
            if let Some(kind) = forbidden_type(&segments).filter(|k| allowed(*k)) {
                return Some((
                    kind,
                    path.to_token_stream(),
                    path.path.segments.last()?.ident.to_string(),
                ));
            }
            let last = path.path.segments.last()?;
            if !WRAPPERS.contains(&last.ident.to_string().as_str()) {
                return None;
            }
            let PathArguments::AngleBracketed(args) = &last.arguments else {
                return None;
            };
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
        let TypeParamBound::Trait(t) = bound else {
            return None;
        };
        let segments = segment_names(&t.path);
        let kind = forbidden_type(&segments)?;
        if allow_clock && kind == Forbidden::Clock {
            return None;
        }
        Some((kind, t.path.to_token_stream(), segments.last()?.clone()))
    })
}

fn segment_names(path: &syn::Path) -> Vec<String> {
    path.segments.iter().map(|s| s.ident.to_string()).collect()
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

/// Types whose every associated call above reads the clock, for renamed imports.
const CLOCK_TYPES: &[&str] = &[
    "SystemTime",
    "Instant",
    "Utc",
    "Local",
    "OffsetDateTime",
    "Timestamp",
    "Zoned",
];

/// Calls that mint ids or randomness.
const MINT_CALLS: &[(&str, &str)] = &[
    ("Uuid", "new_v4"),
    ("Uuid", "now_v1"),
    ("Uuid", "now_v6"),
    ("Uuid", "now_v7"),
    ("Ulid", "new"),
    ("Ulid", "generate"),
    ("StdRng", "from_entropy"),
    ("SmallRng", "from_entropy"),
    ("StdRng", "from_os_rng"),
    ("SmallRng", "from_os_rng"),
    ("ChaCha20Rng", "from_entropy"),
    ("ChaCha20Rng", "from_os_rng"),
];

/// Crates whose free functions all mint randomness (`rand::random_range`, `fastrand::u64`,
/// `getrandom::fill`); `rand::` is limited to its free functions, not its traits and types.
const MINT_CRATES: &[&str] = &["fastrand", "getrandom"];
const RAND_FUNCTIONS: &[&str] = &[
    "random",
    "random_range",
    "random_bool",
    "random_ratio",
    "random_iter",
    "rng",
    "thread_rng",
    "fill",
];

/// Names that mint wherever they appear: `thread_rng()` imported bare, `OsRng`, `nanoid!`.
const MINT_NAMES: &[&str] = &["thread_rng", "OsRng"];
const MINT_MACROS: &[&str] = &["nanoid"];

/// Scans a body's tokens — every nested block, closure, async block and macro call's tokens — for
/// clock reads and id mints. Reports each one on its tokens.
///
/// A limit of any token scan: a clock type renamed by a `use` outside the function (`use
/// std::time::SystemTime as Wall;` at the top of the module) is not seen; the same rename inside
/// the body is.
fn body(tokens: TokenStream, allow_clock: bool, wording: &Wording, cx: &Ctxt) {
    let mut renamed = Vec::new();
    collect_renames(tokens.clone(), &mut renamed);
    scan(tokens, allow_clock, &renamed, wording, cx);
}

/// `use ...::SystemTime as Wall;` inside the body: `Wall` is then a clock type too.
fn collect_renames(tokens: TokenStream, renamed: &mut Vec<(String, String)>) {
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    for (i, token) in tokens.iter().enumerate() {
        match token {
            TokenTree::Group(group) => collect_renames(group.stream(), renamed),
            TokenTree::Ident(original) => {
                if let [TokenTree::Ident(as_kw), TokenTree::Ident(alias), ..] = &tokens[i + 1..] {
                    let original = original.to_string();
                    if as_kw == "as"
                        && (CLOCK_TYPES.contains(&original.as_str())
                            || original == "Uuid"
                            || original == "Ulid")
                    {
                        renamed.push((alias.to_string(), original));
                    }
                }
            }
            _ => {}
        }
    }
}

fn scan(
    tokens: TokenStream,
    allow_clock: bool,
    renamed: &[(String, String)],
    wording: &Wording,
    cx: &Ctxt,
) {
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    for (i, token) in tokens.iter().enumerate() {
        match token {
            TokenTree::Group(group) => scan(group.stream(), allow_clock, renamed, wording, cx),
            TokenTree::Ident(first) => {
                let written = first.to_string();
                let first_name = renamed
                    .iter()
                    .find(|(alias, _)| *alias == written)
                    .map_or(written.clone(), |(_, original)| original.clone());
                if let Some(second) = path_continuation(&tokens[i + 1..]) {
                    let second_name = second.to_string();
                    let pair = (first_name.as_str(), second_name.as_str());
                    let listed = |list: &[(&str, &str)]| list.iter().any(|(a, b)| (*a, *b) == pair);
                    let call = format!("{written}::{second_name}");
                    let mints = listed(MINT_CALLS)
                        || (MINT_CRATES.contains(&pair.0)
                            && pair.1.starts_with(|c: char| c.is_lowercase()))
                        || (pair.0 == "rand" && RAND_FUNCTIONS.contains(&pair.1));
                    if listed(CLOCK_CALLS) && !allow_clock {
                        report(
                            cx,
                            first.span(),
                            second.span(),
                            (wording.call)(Forbidden::Clock, &call),
                        );
                    } else if mints {
                        report(
                            cx,
                            first.span(),
                            second.span(),
                            (wording.call)(Forbidden::Minter, &call),
                        );
                    }
                }
                // `UNIX_EPOCH.elapsed()`: the time since the epoch, read now.
                if written == "UNIX_EPOCH"
                    && !allow_clock
                    && let [TokenTree::Punct(dot), TokenTree::Ident(method), ..] = &tokens[i + 1..]
                    && dot.as_char() == '.'
                    && method == "elapsed"
                {
                    let call = "UNIX_EPOCH.elapsed".to_owned();
                    report(
                        cx,
                        first.span(),
                        method.span(),
                        (wording.call)(Forbidden::Clock, &call),
                    );
                }
                if MINT_NAMES.contains(&written.as_str()) {
                    report(
                        cx,
                        first.span(),
                        first.span(),
                        (wording.call)(Forbidden::Minter, &written),
                    );
                }
                let is_macro =
                    matches!(tokens.get(i + 1), Some(TokenTree::Punct(p)) if p.as_char() == '!');
                if is_macro && MINT_MACROS.contains(&written.as_str()) {
                    report(
                        cx,
                        first.span(),
                        first.span(),
                        (wording.call)(Forbidden::Minter, &format!("{written}!")),
                    );
                }
            }
            _ => {}
        }
    }
}

/// The `ident` of `:: ident` after an identifier, or of `> :: ident` (a qualified path such as
/// `<SystemTime>::now`).
fn path_continuation(rest: &[TokenTree]) -> Option<&proc_macro2::Ident> {
    let rest = match rest {
        [TokenTree::Punct(gt), tail @ ..] if gt.as_char() == '>' => tail,
        _ => rest,
    };
    match rest {
        [
            TokenTree::Punct(a),
            TokenTree::Punct(b),
            TokenTree::Ident(ident),
            ..,
        ] if a.as_char() == ':' && a.spacing() == Spacing::Joint && b.as_char() == ':' => {
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

/// The return type: a function that cannot report a failure swallows it (rule 1; a relay function,
/// rule 6). Returns the type to check at the type level when the tokens cannot tell.
fn return_type<'a>(
    output: &'a ReturnType,
    name: &syn::Ident,
    wording: &Wording,
    cx: &Ctxt,
) -> Option<&'a Type> {
    let ty = match output {
        ReturnType::Default => {
            cx.error_spanned_by(name, (wording.returns_nothing)(name));
            return None;
        }
        ReturnType::Type(_, ty) => ty,
    };
    let cannot_fail = match &**ty {
        Type::Tuple(_) | Type::Never(_) => true,
        Type::Path(p) => {
            p.qself.is_none()
                && p.path.get_ident().is_some_and(|i| {
                    matches!(
                        i.to_string().as_str(),
                        "bool"
                            | "u8"
                            | "u16"
                            | "u32"
                            | "u64"
                            | "u128"
                            | "usize"
                            | "i8"
                            | "i16"
                            | "i32"
                            | "i64"
                            | "i128"
                            | "isize"
                            | "f32"
                            | "f64"
                            | "char"
                            | "str"
                            | "String"
                    )
                })
        }
        _ => false,
    };
    if cannot_fail {
        let written = ty.to_token_stream().to_string().replace(' ', "");
        cx.error_spanned_by(ty, (wording.cannot_fail)(&written));
        return None;
    }
    Some(ty)
}

/// A binding named like the handler itself (`Json(push)` in `async fn push`) would resolve to the
/// unit struct the attribute generates under that name, and rustc would report a confusing type
/// mismatch; say what happened instead.
/// Returns whether every binding is fine.
fn binding_names(pat: &syn::Pat, handler: &syn::Ident, cx: &Ctxt) -> bool {
    use syn::Pat;
    // Every binding is checked (no short circuit), so every offending one is reported.
    let all = |pats: &mut dyn Iterator<Item = &Pat>| {
        let mut ok = true;
        for p in pats {
            ok &= binding_names(p, handler, cx);
        }
        ok
    };
    match pat {
        Pat::Ident(binding) => {
            let mut ok = true;
            if binding.ident == *handler {
                ok = false;
                cx.error_spanned_by(
                    &binding.ident,
                    format!(
                        "this binding is named like the handler, `{handler}`, which the attribute turns into a \
                         unit struct of that name, so the pattern would match the struct instead of binding\n\
                         help: rename the binding (or the handler)"
                    ),
                );
            }
            if let Some((_, sub)) = &binding.subpat {
                ok = binding_names(sub, handler, cx) && ok;
            }
            ok
        }
        Pat::TupleStruct(p) => all(&mut p.elems.iter()),
        Pat::Tuple(p) => all(&mut p.elems.iter()),
        Pat::Struct(p) => all(&mut p.fields.iter().map(|f| &*f.pat)),
        Pat::Reference(p) => binding_names(&p.pat, handler, cx),
        Pat::Paren(p) => binding_names(&p.pat, handler, cx),
        Pat::Type(p) => binding_names(&p.pat, handler, cx),
        Pat::Slice(p) => all(&mut p.elems.iter()),
        _ => true,
    }
}
