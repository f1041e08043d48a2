//! Check: the rules every handler attribute holds a function to. Token-level checks here give the
//! precise message on the offending tokens; the type-level probes emitted by the expansion catch
//! what tokens cannot show (a type alias, a user type marked as a clock or minter).

use proc_macro2::{Delimiter, Spacing, Span, TokenStream, TokenTree};
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
             help: take the time from the unit (a field of the payload, its `Stamp`, a header); to time a latency metric \
             or wait for a deadline, use `delivery::Stopwatch`, which writes nothing"
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
    /// The types probed against the marker traits: `ty` and the tuple elements inside it.
    pub(crate) probes: Vec<Type>,
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
        let mut probes = vec![(*typed.ty).clone()];
        probe_types(&typed.ty, &mut probes);
        params.push(Param {
            ty: (*typed.ty).clone(),
            probes,
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

/// Types a handler parameter may never be, by their path — only where the path itself says what
/// the type is: a name only std or the RNG crates use (`SystemTime`, `ThreadRng`), or a common name
/// under its crate (`chrono::Local`, `std::time::Instant`, `rand::Rng`). A bare `Instant`, `Local`,
/// `Clock` or `Rng` may be the user's own (`geo::Instant` imported, a `billing::Local`), so the
/// marker traits decide it by what it is, in the expansion's probes (std's and tokio's `Instant`
/// are clocks there; `rand`'s generators are minters under the `rand` feature).
fn forbidden_type(segments: &[String]) -> Option<Forbidden> {
    let last = segments.last()?.as_str();
    let under = |crates: &[&str]| segments.len() >= 2 && crates.contains(&segments[0].as_str());
    match last {
        "SystemTime" => Some(Forbidden::Clock),
        "Instant" if under(&["std", "core", "tokio", "quanta", "coarsetime"]) => {
            Some(Forbidden::Clock)
        }
        "Utc" | "Local" if under(&["chrono"]) => Some(Forbidden::Clock),
        "ThreadRng" | "StdRng" | "SmallRng" | "OsRng" | "ChaCha8Rng" | "ChaCha12Rng"
        | "ChaCha20Rng" => Some(Forbidden::Minter),
        "Rng" | "RngCore" | "CryptoRng" | "TryRngCore"
            if under(&["rand", "rand_core", "fastrand"]) =>
        {
            Some(Forbidden::Minter)
        }
        "Generator" if under(&["ulid"]) => Some(Forbidden::Minter),
        "ContextV7" | "Context" if under(&["uuid"]) => Some(Forbidden::Minter),
        "Acker" | "MemoryHandle" | "Settle" => Some(Forbidden::AckHandle),
        "Delivery" if segments.iter().any(|s| s == "lapin") => Some(Forbidden::AckHandle),
        // rdkafka's consumers commit offsets: an offset confirms every unit before it.
        "StreamConsumer" | "BaseConsumer" => Some(Forbidden::AckHandle),
        _ => None,
    }
}

/// Wrappers a forbidden type is still reachable through as a parameter.
const WRAPPERS: &[&str] = &[
    "Arc", "Rc", "Box", "State", "Option", "Mutex", "RwLock", "RefCell", "Cell",
];

/// The types the expansion probes against the marker traits for one parameter: the type itself
/// (the markers reach through references and the wrappers above) and every element of a tuple
/// reachable through them (`State<(u32, Instant)>`), which no marker impl can reach.
fn probe_types(ty: &Type, probes: &mut Vec<Type>) {
    match ty {
        Type::Reference(r) => probe_types(&r.elem, probes),
        Type::Paren(p) => probe_types(&p.elem, probes),
        Type::Group(g) => probe_types(&g.elem, probes),
        Type::Array(a) => probe_types(&a.elem, probes),
        Type::Slice(a) => probe_types(&a.elem, probes),
        Type::Tuple(t) => {
            for elem in &t.elems {
                probes.push(elem.clone());
                probe_types(elem, probes);
            }
        }
        Type::Path(path) => {
            let Some(last) = path.path.segments.last() else {
                return;
            };
            if !WRAPPERS.contains(&last.ident.to_string().as_str()) {
                return;
            }
            if let PathArguments::AngleBracketed(args) = &last.arguments {
                for arg in &args.args {
                    if let GenericArgument::Type(inner) = arg {
                        probe_types(inner, probes);
                    }
                }
            }
        }
        _ => {}
    }
}

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

pub(crate) fn find_forbidden_type(
    ty: &Type,
    allow_clock: bool,
) -> Option<(Forbidden, TokenStream, String)> {
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

/// Calls that read the clock: `Type::function`, whatever path leads to the type.
const CLOCK_CALLS: &[(&str, &str)] = &[
    ("SystemTime", "now"),
    ("SystemTime", "elapsed"),
    ("Instant", "now"),
    ("Instant", "elapsed"),
    ("Utc", "now"),
    ("Local", "now"),
    ("Utc", "today"),
    ("Local", "today"),
    ("OffsetDateTime", "now_utc"),
    ("OffsetDateTime", "now_local"),
    ("UtcDateTime", "now"),
    ("Timestamp", "now"),
    ("Zoned", "now"),
];

/// Calls that mint ids or randomness: `Type::function`, whatever path leads to the type. uuid's
/// `new_v7` fills its random bits itself; `new_v1` and `new_v6` are refused through the
/// `Timestamp::now` they are usually given (from a payload's time they are deterministic).
const MINT_CALLS: &[(&str, &str)] = &[
    ("Uuid", "new_v4"),
    ("Uuid", "now_v1"),
    ("Uuid", "now_v6"),
    ("Uuid", "now_v7"),
    ("Uuid", "new_v7"),
    ("Ulid", "new"),
    ("Ulid", "generate"),
    ("Ulid", "from_datetime"),
    ("Ulid", "with_source"),
    ("Ulid", "from_datetime_with_source"),
    ("Context", "new_random"),
    ("Ksuid", "new"),
    ("Ksuid", "generate"),
    ("KsuidMs", "new"),
];

/// Types every associated call of which hands out fresh randomness (`ThreadRng::default()`).
const MINT_TYPES: &[&str] = &["ThreadRng", "OsRng"];

/// Seedable generators, and the constructors that seed them from entropy rather than from a value
/// (`StdRng::seed_from_u64(..)` from the unit is deterministic and allowed).
const SEEDABLE_RNGS: &[&str] = &[
    "StdRng",
    "SmallRng",
    "ChaCha8Rng",
    "ChaCha12Rng",
    "ChaCha20Rng",
    "Pcg32",
    "Pcg64",
    "Xoshiro256PlusPlus",
];
const ENTROPY_SEEDS: &[&str] = &[
    "from_entropy",
    "from_os_rng",
    "try_from_os_rng",
    "from_rng",
    "try_from_rng",
    "from_thread_rng",
];

/// Crates every path into which mints randomness or ids (`fastrand::u64`, `getrandom::fill`,
/// `nanoid::nanoid!`, `cuid::cuid2()`), but for `with_seed` (a seed taken from the unit).
const MINT_CRATES: &[&str] = &["fastrand", "getrandom", "nanoid", "cuid", "cuid2"];

/// `rand::` is refused for its free functions, not its traits and types.
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

/// Free functions and macros that mint when called by their bare name, as after a module-level
/// `use rand::random;` the attribute cannot see: rand's ([`RAND_FUNCTIONS`] but `fill`, too common
/// a name), and `getrandom()`, `nanoid!()`, `cuid2()`.
const BARE_MINT_CALLS: &[&str] = &["getrandom", "nanoid", "cuid1", "cuid2"];

/// Names that mint wherever they appear, called or passed on: `thread_rng`, `OsRng`.
const MINT_NAMES: &[&str] = &["thread_rng", "OsRng"];

/// What follows a path in a body.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Next<'a> {
    /// `path(..)` or `path::<T>(..)`.
    Call,
    /// `path!(..)`.
    Macro,
    /// `path.method`.
    Method(&'a str),
    Other,
}

/// What a path written in a body does, by its segments (an import or rename inside the body
/// already resolved): the kind of forbidden thing and the segment the error starts at.
pub(crate) fn classify(segments: &[String], next: Next<'_>) -> Option<(Forbidden, usize)> {
    let n = segments.len();
    let last = segments.last()?.as_str();
    // `UNIX_EPOCH.elapsed()`: the time since the epoch, read now.
    if last == "UNIX_EPOCH" && next == Next::Method("elapsed") {
        return Some((Forbidden::Clock, n - 1));
    }
    if n >= 2 {
        let pair = (segments[n - 2].as_str(), last);
        let listed = |list: &[(&str, &str)]| list.contains(&pair);
        if listed(CLOCK_CALLS) {
            return Some((Forbidden::Clock, n - 2));
        }
        if listed(MINT_CALLS)
            || MINT_TYPES.contains(&pair.0)
            || (SEEDABLE_RNGS.contains(&pair.0) && ENTROPY_SEEDS.contains(&pair.1))
        {
            return Some((Forbidden::Minter, n - 2));
        }
        let first = segments[0].as_str();
        let crate_mints = (first == "rand" && RAND_FUNCTIONS.contains(&last))
            || (MINT_CRATES.contains(&first) && last != "with_seed")
            || (first == "ulid" && segments.iter().any(|s| s == "Generator"));
        if crate_mints {
            return Some((Forbidden::Minter, 0));
        }
    }
    let bare_mints =
        (RAND_FUNCTIONS.contains(&last) && last != "fill") || BARE_MINT_CALLS.contains(&last);
    if n == 1 && matches!(next, Next::Call | Next::Macro) && bare_mints {
        return Some((Forbidden::Minter, 0));
    }
    segments
        .iter()
        .position(|s| MINT_NAMES.contains(&s.as_str()))
        .map(|i| (Forbidden::Minter, i))
}

/// A forbidden call found in a body, on its tokens.
pub(crate) struct Finding {
    pub(crate) kind: Forbidden,
    /// The call as written, from the first token the error covers: `Utc::now`, `rand::random`.
    pub(crate) call: String,
    start: Span,
    end: Span,
}

/// Scans a body's tokens — every nested block, closure, async block and macro call's tokens — for
/// clock reads and id mints, and reports each one on its tokens.
///
/// A `use` inside the body (plain or renamed with `as`) is followed; a module-level import is out
/// of a token scan's sight, so a bare call is judged by its name alone (`random()`,
/// `thread_rng()`), and a type imported or renamed at module level is judged by its own name
/// (`Utc::now()` is refused wherever `Utc` comes from; `Wall::now()` after a module-level
/// `use std::time::SystemTime as Wall;` is not seen).
fn body(tokens: TokenStream, allow_clock: bool, wording: &Wording, cx: &Ctxt) {
    for finding in scan_body(tokens, allow_clock) {
        report(
            cx,
            finding.start,
            finding.end,
            (wording.call)(finding.kind, &finding.call),
        );
    }
}

/// The findings of [`body`], in the order written.
pub(crate) fn scan_body(tokens: TokenStream, allow_clock: bool) -> Vec<Finding> {
    let mut imports = Vec::new();
    collect_imports(tokens.clone(), &mut imports);
    let mut findings = Vec::new();
    scan(tokens, allow_clock, &imports, &mut findings);
    findings
}

/// An imported name and the path it stands for.
type Import = (String, Vec<String>);

/// `use` items inside the body: `use rand::random;`, `use std::time::{SystemTime as Wall};`.
fn collect_imports(tokens: TokenStream, imports: &mut Vec<Import>) {
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            TokenTree::Group(group) => collect_imports(group.stream(), imports),
            TokenTree::Ident(ident) if ident == "use" => {
                let end = tokens[i + 1..]
                    .iter()
                    .position(|t| matches!(t, TokenTree::Punct(p) if p.as_char() == ';'))
                    .map_or(tokens.len(), |p| i + 1 + p);
                // A leading `::` (`use ::rand::random;`) names the same crate.
                let tree: TokenStream = tokens[i + 1..end]
                    .iter()
                    .skip_while(|t| matches!(t, TokenTree::Punct(p) if p.as_char() == ':'))
                    .cloned()
                    .collect();
                if let Ok(tree) = syn::parse2::<syn::UseTree>(tree) {
                    use_tree(&tree, &mut Vec::new(), imports);
                }
                i = end;
            }
            _ => {}
        }
        i += 1;
    }
}

fn use_tree(tree: &syn::UseTree, prefix: &mut Vec<String>, imports: &mut Vec<Import>) {
    let full = |prefix: &Vec<String>, ident: &syn::Ident| {
        let mut path = prefix.clone();
        if ident != "self" {
            path.push(ident.to_string());
        }
        path
    };
    match tree {
        syn::UseTree::Path(path) => {
            prefix.push(path.ident.to_string());
            use_tree(&path.tree, prefix, imports);
            prefix.pop();
        }
        syn::UseTree::Name(name) => {
            let path = full(prefix, &name.ident);
            if let Some(last) = path.last() {
                imports.push((last.clone(), path));
            }
        }
        syn::UseTree::Rename(rename) => {
            imports.push((rename.rename.to_string(), full(prefix, &rename.ident)));
        }
        syn::UseTree::Group(group) => {
            for tree in &group.items {
                use_tree(tree, prefix, imports);
            }
        }
        syn::UseTree::Glob(_) => {}
    }
}

/// Keywords a path may follow: `return ::rand::random()` starts a path.
const KEYWORDS: &[&str] = &[
    "return", "in", "use", "break", "move", "else", "match", "if", "while", "let", "yield",
];

fn is_punct(token: Option<&TokenTree>, c: char) -> bool {
    matches!(token, Some(TokenTree::Punct(p)) if p.as_char() == c)
}

/// `::` at `tokens[at..]`.
fn path_sep(tokens: &[TokenTree], at: usize) -> bool {
    matches!(tokens.get(at), Some(TokenTree::Punct(p)) if p.as_char() == ':' && p.spacing() == Spacing::Joint)
        && is_punct(tokens.get(at + 1), ':')
}

fn scan(tokens: TokenStream, allow_clock: bool, imports: &[Import], found: &mut Vec<Finding>) {
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    let mut in_use = false;
    for (i, token) in tokens.iter().enumerate() {
        // A `use` item names paths without calling them: the calls through it are reported.
        match token {
            TokenTree::Ident(ident) if ident == "use" => in_use = true,
            TokenTree::Punct(p) if in_use && p.as_char() == ';' => in_use = false,
            _ => {}
        }
        if in_use {
            continue;
        }
        let first = match token {
            TokenTree::Group(group) => {
                scan(group.stream(), allow_clock, imports, found);
                continue;
            }
            TokenTree::Ident(ident) => ident,
            _ => continue,
        };
        // Only where a path starts: not after `::` (or `>::`, `<SystemTime>::now`), not a method
        // or field after `.`, not a function being defined.
        let before = |back: usize| i.checked_sub(back).and_then(|j| tokens.get(j));
        let continues = i >= 2
            && path_sep(&tokens, i - 2)
            && match before(3) {
                Some(TokenTree::Ident(prev)) => !KEYWORDS.contains(&prev.to_string().as_str()),
                Some(TokenTree::Punct(p)) => p.as_char() == '>',
                _ => false,
            };
        let continues = continues
            || is_punct(before(1), '.')
            || matches!(before(1), Some(TokenTree::Ident(kw)) if kw == "fn");
        if continues {
            continue;
        }
        let mut written = vec![first.clone()];
        let mut j = i + 1;
        loop {
            // `<SystemTime>::now`: the path goes on after the closing `>`.
            let at = if is_punct(tokens.get(j), '>') {
                j + 1
            } else {
                j
            };
            match tokens.get(at + 2) {
                Some(TokenTree::Ident(ident)) if path_sep(&tokens, at) => {
                    written.push(ident.clone());
                    j = at + 3;
                }
                _ => break,
            }
        }
        let method = match (tokens.get(j), tokens.get(j + 1)) {
            (Some(TokenTree::Punct(dot)), Some(TokenTree::Ident(method)))
                if dot.as_char() == '.' =>
            {
                Some(method)
            }
            _ => None,
        };
        let method_name = method.map(ToString::to_string);
        let next = match (tokens.get(j), &method_name) {
            (_, Some(name)) => Next::Method(name),
            (Some(TokenTree::Group(g)), _) if g.delimiter() == Delimiter::Parenthesis => Next::Call,
            (Some(TokenTree::Punct(p)), _) if p.as_char() == '!' => Next::Macro,
            _ if path_sep(&tokens, j) && is_punct(tokens.get(j + 2), '<') => Next::Call,
            _ => Next::Other,
        };
        let names: Vec<String> = written.iter().map(ToString::to_string).collect();
        // An import inside the body: its first segment stands for the imported path.
        let (resolved, offset) = match imports.iter().find(|(name, _)| *name == names[0]) {
            Some((_, path)) if !path.is_empty() => {
                let mut resolved = path.clone();
                resolved.extend(names[1..].iter().cloned());
                (resolved, path.len() - 1)
            }
            _ => (names.clone(), 0),
        };
        let Some((kind, from)) = classify(&resolved, next) else {
            continue;
        };
        if kind == Forbidden::Clock && allow_clock {
            continue;
        }
        let from = from.saturating_sub(offset).min(written.len() - 1);
        let mut call = names[from..].join("::");
        let mut end = written[written.len() - 1].span();
        if let (Next::Method(name), Some(method)) = (next, method)
            && resolved.last().is_some_and(|s| s == "UNIX_EPOCH")
        {
            call = format!("{call}.{name}");
            end = method.span();
        }
        found.push(Finding {
            kind,
            call,
            start: written[from].span(),
            end,
        });
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
