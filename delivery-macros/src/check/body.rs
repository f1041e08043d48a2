//! The body scan: clock reads and id mints, found on a body's tokens.

use proc_macro2::{Delimiter, Spacing, Span, TokenStream, TokenTree};
use quote::ToTokens;

use crate::check::wording::{Forbidden, Wording};
use crate::ctxt::Ctxt;

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
pub(super) fn body(tokens: TokenStream, allow_clock: bool, wording: &Wording, cx: &Ctxt) {
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
