//! Check: the rules every handler attribute holds a function to. Token-level checks here give the
//! precise message on the offending tokens; the type-level probes emitted by the expansion catch
//! what tokens cannot show (a type alias, a user type marked as a clock or minter).

pub(crate) mod body;
pub(crate) mod types;
pub(crate) mod wording;

use quote::ToTokens;
use syn::{FnArg, GenericArgument, ItemFn, PathArguments, ReturnType, Type};

use crate::ast::Handler;
use crate::check::body::body;
use crate::check::types::{param_type, probe_types};
use crate::check::wording::Wording;
use crate::ctxt::Ctxt;

/// What the checks learned, for the expansion.
pub(crate) struct Checked {
    pub(crate) params: Vec<Param>,
    pub(crate) state: Option<Type>,
    /// The return type, when its tokens passed the check.
    pub(crate) output: Option<Type>,
    /// A batch handler's `Batch<T>` parameter: its position and `T`.
    pub(crate) batch: Option<(usize, Type)>,
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
    let mut batch = None;
    for (position, typed) in handler.params().enumerate() {
        if let Some(item) = batch_param(&typed.ty) {
            match batch {
                None => batch = Some((position, item.clone())),
                Some(_) => cx.error_spanned_by(
                    &typed.ty,
                    "a batch handler takes one `Batch<T>`: every unit of the batch is decoded with its `T`",
                ),
            }
        }
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
        batch,
    }
}

/// `T` of a `Batch<T>` parameter.
pub(crate) fn batch_param(ty: &Type) -> Option<&Type> {
    generic_of(ty, "Batch")
}

/// `T` of a `State<T>` parameter.
pub(crate) fn state_param(ty: &Type) -> Option<&Type> {
    generic_of(ty, "State")
}

/// `T` of a `Name<T>` type.
fn generic_of<'a>(ty: &'a Type, name: &str) -> Option<&'a Type> {
    let Type::Path(path) = ty else { return None };
    let last = path.path.segments.last()?;
    if last.ident != name {
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
