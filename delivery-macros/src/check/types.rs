//! The parameter types a handler may never take, by their tokens, and the types the expansion
//! probes against the marker traits.

use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::{GenericArgument, PathArguments, Type, TypeParamBound};

use crate::check::wording::{Forbidden, Wording};
use crate::ctxt::Ctxt;

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
pub(super) fn probe_types(ty: &Type, probes: &mut Vec<Type>) {
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
pub(super) fn param_type(ty: &Type, allow_clock: bool, wording: &Wording, cx: &Ctxt) -> bool {
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
