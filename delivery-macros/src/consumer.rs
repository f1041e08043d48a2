//! `#[consumer]`: parse -> check -> expand.
//!
//! The annotated `async fn` becomes a unit struct of the same name implementing `Handler<S>`; the
//! function as written stays callable as `name::handle(..)`.

use proc_macro2::TokenStream;
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::{Attribute, FnArg, GenericArgument, ItemFn, PathArguments, Type};

use crate::attr::Args;
use crate::check::{self, Wording};
use crate::ctxt::Ctxt;
use crate::relay;
use crate::span;

pub(crate) fn expand(attr: TokenStream, item: TokenStream, flavor: Flavor) -> TokenStream {
    let function = match parse_handler(item, flavor) {
        Ok(function) => function,
        Err(errors) => return errors,
    };
    let cx = Ctxt::new();
    let args = Args::parse(attr, &cx);
    let shape_ok = check_shape(&function, flavor, &cx);
    let checked = shape_ok.then(|| check_signature(&function, &args, flavor, &cx));
    let errors = cx.check().err();
    match checked {
        // The function cannot become a handler at all: keep it as written so an IDE still knows
        // it, plus every error.
        None => quote! {
            #[allow(dead_code)]
            #function
            #errors
        },
        // Errors, if any, are reported; the handler type is still generated (with the checks that
        // still apply) so the places that use it raise no second, misleading error.
        Some(checked) => {
            let expansion = expand_checked(&function, &args, &checked, errors.is_some(), flavor);
            quote!(#expansion #errors)
        }
    }
}

/// The annotated item as a function, or the item unchanged plus an error saying what the attribute
/// goes on.
pub(crate) fn parse_handler(item: TokenStream, flavor: Flavor) -> Result<ItemFn, TokenStream> {
    syn::parse2(item.clone()).map_err(|error| {
        let noun = flavor.noun();
        let error = syn::Error::new(
            error.span(),
            format!("#[{noun}] goes on an `async fn` handler: {error}"),
        )
        .to_compile_error();
        quote!(#item #error)
    })
}

/// Which attribute is expanding: the expansion below is shared, and differs only in how a
/// parameter is extracted (a webhook refuses axum's body extractors with rule 5's message; a
/// relay function's parameters come from the outbox record) and in what the function returns (a
/// relay function returns the sink's `Receipt`, rule 6).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
    Consumer,
    Webhook,
    Relay,
}

impl Flavor {
    pub(crate) fn noun(self) -> &'static str {
        match self {
            Flavor::Consumer => "consumer",
            Flavor::Webhook => "webhook",
            Flavor::Relay => "relay",
        }
    }

    /// How the shared checks word their errors.
    pub(crate) fn wording(self) -> Wording {
        match self {
            Flavor::Relay => relay::WORDING,
            Flavor::Consumer | Flavor::Webhook => check::HANDLER,
        }
    }
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

/// What makes a function unusable as a handler, whatever its types.
pub(crate) fn check_shape(function: &ItemFn, flavor: Flavor, cx: &Ctxt) -> bool {
    let sig = &function.sig;
    let noun = flavor.noun();
    let mut ok = true;
    if sig.asyncness.is_none() {
        cx.error_spanned_by(
            sig.fn_token,
            format!("a {noun} handler must be an `async fn`"),
        );
        ok = false;
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        cx.error_spanned_by(
            &sig.generics,
            format!("a {noun} handler cannot be generic: name the concrete types it takes"),
        );
        ok = false;
    }
    if let Some(variadic) = &sig.variadic {
        cx.error_spanned_by(variadic, format!("a {noun} handler cannot be variadic"));
        ok = false;
    }
    for input in &sig.inputs {
        if let FnArg::Receiver(receiver) = input {
            cx.error_spanned_by(receiver, format!("a {noun} handler is a free function; take the state as `State<S>` instead of `self`"));
            ok = false;
        }
    }
    for input in &sig.inputs {
        if let FnArg::Typed(typed) = input
            && !check::binding_names(&typed.pat, &sig.ident, cx)
        {
            ok = false;
        }
    }
    ok
}

pub(crate) fn check_signature(
    function: &ItemFn,
    args: &Args,
    flavor: Flavor,
    cx: &Ctxt,
) -> Checked {
    let sig = &function.sig;
    let wording = flavor.wording();
    let allow_clock = args.allow_clock.is_some();
    let mut params = Vec::new();
    let mut state = args.state.clone();
    let mut state_from_param = false;
    for input in &sig.inputs {
        let FnArg::Typed(typed) = input else { continue };
        let ok = check::param_type(&typed.ty, allow_clock, &wording, cx);
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
    check::body(function.block.to_token_stream(), allow_clock, &wording, cx);
    let output = check::return_type(&sig.output, &sig.ident, &wording, cx).cloned();
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

/// Attributes by where they belong: docs on the type and the function, `cfg` on every generated
/// item, everything else (`allow`, `inline`, `tracing::instrument`, ...) on the function.
pub(crate) struct Attrs<'a> {
    pub(crate) docs: Vec<&'a Attribute>,
    pub(crate) cfgs: Vec<&'a Attribute>,
    pub(crate) other: Vec<&'a Attribute>,
}

pub(crate) fn sort_attrs(attrs: &[Attribute]) -> Attrs<'_> {
    let mut sorted = Attrs {
        docs: Vec::new(),
        cfgs: Vec::new(),
        other: Vec::new(),
    };
    for attr in attrs {
        if attr.path().is_ident("doc") {
            sorted.docs.push(attr);
        } else if attr.path().is_ident("cfg") || attr.path().is_ident("cfg_attr") {
            sorted.cfgs.push(attr);
        } else {
            sorted.other.push(attr);
        }
    }
    sorted
}

pub(crate) fn expand_checked(
    function: &ItemFn,
    args: &Args,
    checked: &Checked,
    has_errors: bool,
    flavor: Flavor,
) -> TokenStream {
    let krate = args.krate_path();
    let private = quote!(#krate::__private);
    let ItemFn {
        attrs,
        vis,
        sig,
        block,
    } = function;
    let Attrs { docs, cfgs, other } = sort_attrs(attrs);
    let name = &sig.ident;
    let inputs = &sig.inputs;
    let output = &sig.output;

    // The state the parameters are resolved against: the `State<T>` parameter's `T`, `state = T`,
    // or any state at all when the handler takes none.
    let (impl_generics, state_ty, where_clause) = match &checked.state {
        Some(ty) => (quote!(), quote!(#ty), quote!()),
        None => {
            let extractor_trait = match flavor {
                Flavor::Relay => quote!(#private::FromRecord),
                Flavor::Consumer | Flavor::Webhook => quote!(#private::FromUnit),
            };
            let bounds = checked.params.iter().map(|p| {
                let ty = &p.ty;
                quote!(#ty: #extractor_trait<__DeliveryState>,)
            });
            (
                quote!(<__DeliveryState: ::core::marker::Send + ::core::marker::Sync + 'static>),
                quote!(__DeliveryState),
                quote!(where #(#bounds)*),
            )
        }
    };
    let check_state = checked
        .state
        .as_ref()
        .map_or_else(|| quote!(()), |ty| quote!(#ty));

    // Each parameter: not a clock (unless declared safe), not a minter, not an acknowledgement
    // handle — by type, which sees through aliases and wrappers. Whether it is an extractor is
    // checked here when the impl below does not (a generic state, or errors already found).
    let param_checks = checked.params.iter().filter(|p| p.ok).map(|p| {
        let ty = &p.ty;
        let (start, end) = span::range(ty);
        let probe = |method: &str| {
            let method = format_ident!("{}", method);
            quote!((&#private::probe::Probe::<#ty>::NEW).#method())
        };
        let clock = args.allow_clock.is_none().then(|| {
            let call = span::call(
                start,
                end,
                quote!(#private::probe::assert_not_clock),
                probe("clock_probe"),
            );
            quote!(#call;)
        });
        let minter = span::call(
            start,
            end,
            quote!(#private::probe::assert_not_minter),
            probe("minter_probe"),
        );
        let ack = span::call(
            start,
            end,
            quote!(#private::probe::assert_not_ack_handle),
            probe("ack_probe"),
        );
        let extractor = (checked.state.is_none() || has_errors).then(|| match flavor {
            Flavor::Consumer => {
                quote_spanned!(start=> #private::assert_extractor::<#ty, #check_state>();)
            }
            Flavor::Relay => {
                quote_spanned!(start=> #private::assert_record_extractor::<#ty, #check_state>();)
            }
            Flavor::Webhook => {
                let check = crate::webhook::extractor(&krate, ty, &check_state);
                quote!(let _ = #check;)
            }
        });
        quote! {
            #clock
            #minter;
            #ack;
            #extractor
        }
    });

    // The return value's conversion, in one place, spanned to the return type: a type that cannot
    // report a failure is refused here.
    let outcome_fn = checked.output.as_ref().map(|ty| {
        let (start, end) = span::range(ty);
        if flavor == Flavor::Relay {
            let convert = span::call(
                start,
                end,
                quote!(#private::Returned::new),
                quote!(__delivery_returned),
            );
            let convert = span::expr(start, end, quote!((&&#convert).attempt()));
            return quote! {
                #[allow(dead_code)]
                fn __delivery_outcome(__delivery_returned: #ty) -> #private::Attempt {
                    use #private::{AttemptViaBoxError as _, AttemptViaHandlerError as _, AttemptViaNothing as _};
                    #convert
                }
            };
        }
        let convert = span::call(
            start,
            end,
            quote!(#private::Returned::new),
            quote!(__delivery_returned),
        );
        let convert = span::expr(start, end, quote!((&&#convert).outcome()));
        quote! {
            #[allow(dead_code)]
            fn __delivery_outcome(__delivery_returned: #ty) -> #private::Outcome {
                use #private::{ViaBoxError as _, ViaHandlerError as _, ViaNothing as _};
                #convert
            }
        }
    });

    let call_body = if has_errors || checked.output.is_none() {
        // Never runs: the build fails on the errors above. It keeps the type usable meanwhile.
        let message = format!("#[{}] reported errors", flavor.noun());
        quote!(async { ::core::unreachable!(#message) })
    } else {
        let malformed = match flavor {
            Flavor::Relay => quote!(#private::Attempt::Malformed),
            Flavor::Consumer | Flavor::Webhook => quote!(#private::malformed),
        };
        let bindings: Vec<_> = (0..checked.params.len())
            .map(|i| format_ident!("__delivery_arg{}", i))
            .collect();
        let extracts = checked.params.iter().map(|p| {
            let ty = &p.ty;
            let (start, end) = span::range(ty);
            let call = match flavor {
                Flavor::Consumer => {
                    let path = quote!(#private::extract::<#ty, #state_ty>);
                    span::call(start, end, path, quote!(__delivery_unit, __delivery_state))
                }
                Flavor::Relay => {
                    let path = quote!(#private::extract_record::<#ty, #state_ty>);
                    span::call(start, end, path, quote!(__delivery_unit, __delivery_state))
                }
                Flavor::Webhook => {
                    let extractor = crate::webhook::extractor(&krate, ty, &state_ty);
                    quote!((#extractor)(__delivery_unit, __delivery_state))
                }
            };
            quote!(#call?)
        });
        quote! {
            let __delivery_args = (|| -> ::core::result::Result<_, #private::Malformed> {
                ::core::result::Result::Ok((#(#extracts,)*))
            })();
            async move {
                match __delivery_args {
                    ::core::result::Result::Ok((#(#bindings,)*)) => {
                        __delivery_outcome(#name::handle(#(#bindings),*).await)
                    }
                    ::core::result::Result::Err(__delivery_error) => #malformed(__delivery_error),
                }
            }
        }
    };

    let clock_doc = args.allow_clock.as_ref().map(|reason| {
        let text = format!(
            " Reads the clock by a recorded exception: {}",
            reason.value()
        );
        quote!(#[doc = ""] #[doc = #text])
    });
    let handle_doc = match flavor {
        Flavor::Relay => format!(
            " The relay function `{name}` as written. Call it directly in tests; the relay calls it through `Relay`."
        ),
        Flavor::Consumer | Flavor::Webhook => format!(
            " The handler `{name}` as written. Call it directly in tests; the runtime calls it through `Handler`."
        ),
    };
    let trait_impl = match flavor {
        Flavor::Relay => quote! {
            impl #impl_generics #private::Relay<#state_ty> for #name #where_clause {
                fn call(
                    &self,
                    __delivery_unit: &#private::Record,
                    __delivery_state: &#state_ty,
                ) -> impl ::core::future::Future<Output = #private::Attempt> + ::core::marker::Send + 'static {
                    #call_body
                }
            }
        },
        Flavor::Consumer | Flavor::Webhook => quote! {
            impl #impl_generics #private::Handler<#state_ty> for #name #where_clause {
                fn call(
                    &self,
                    __delivery_unit: &#private::Unit,
                    __delivery_state: &#state_ty,
                ) -> impl ::core::future::Future<Output = #private::Outcome> + ::core::marker::Send + 'static {
                    #call_body
                }
            }
        },
    };

    quote! {
        #(#cfgs)*
        #(#docs)*
        #clock_doc
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug)]
        #vis struct #name;

        #(#cfgs)*
        impl #name {
            #(#docs)*
            #[doc = ""]
            #[doc = #handle_doc]
            #[allow(clippy::unused_async, clippy::missing_errors_doc)]
            #(#other)*
            #vis async fn handle(#inputs) #output #block
        }

        #(#cfgs)*
        const _: () = {
            use #private::probe::{AckFallback as _, AckSpecific as _, ClockFallback as _, ClockSpecific as _, MinterFallback as _, MinterSpecific as _};

            #[allow(dead_code, clippy::all)]
            fn __delivery_checks() {
                #(#param_checks)*
            }

            #outcome_fn

            #trait_impl
        };
    }
}
