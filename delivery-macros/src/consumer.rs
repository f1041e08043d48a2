//! `#[consumer]`: parse -> check -> expand.
//!
//! The annotated `async fn` becomes a unit struct of the same name implementing
//! `Handler<S>`; the function as written stays callable as `name::handle(..)`.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, GenericArgument, ItemFn, PathArguments, Type};

use crate::attr::Args;
use crate::check;
use crate::ctxt::Ctxt;

pub(crate) fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    let function: ItemFn = match syn::parse2(item.clone()) {
        Ok(function) => function,
        Err(error) => {
            let error = syn::Error::new(
                error.span(),
                format!("#[consumer] goes on an `async fn` handler: {error}"),
            );
            let error = error.to_compile_error();
            return quote!(#item #error);
        }
    };
    let cx = Ctxt::new();
    let args = Args::parse(attr, &cx);
    let checked = check_signature(&function, &args, &cx);
    if let Err(errors) = cx.check() {
        // Keep the function so an IDE still knows it, plus every error.
        return quote! {
            #[allow(dead_code)]
            #function
            #errors
        };
    }
    expand_checked(&function, &args, &checked)
}

/// What the checks learned, for the expansion.
struct Checked {
    params: Vec<Type>,
    state: Option<Type>,
    output: Option<Type>,
}

fn check_signature(function: &ItemFn, args: &Args, cx: &Ctxt) -> Checked {
    let sig = &function.sig;
    let allow_clock = args.allow_clock.is_some();
    if sig.asyncness.is_none() {
        cx.error_spanned_by(sig.fn_token, "a consumer handler must be an `async fn`");
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        cx.error_spanned_by(&sig.generics, "a consumer handler cannot be generic: name the concrete types it takes");
    }
    if let Some(variadic) = &sig.variadic {
        cx.error_spanned_by(variadic, "a consumer handler cannot be variadic");
    }
    let mut params = Vec::new();
    let mut state = args.state.clone();
    let mut state_from_param = false;
    for input in &sig.inputs {
        match input {
            FnArg::Receiver(receiver) => {
                cx.error_spanned_by(receiver, "a consumer handler is a free function; take the state as `State<S>` instead of `self`");
            }
            FnArg::Typed(typed) => {
                check::param_type(&typed.ty, allow_clock, cx);
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
                params.push((*typed.ty).clone());
            }
        }
    }
    check::body(function.block.to_token_stream_inner(), allow_clock, cx);
    let output = check::return_type(&sig.output, &sig.ident, cx).cloned();
    Checked { params, state, output }
}

/// `T` of a `State<T>` parameter.
fn state_param(ty: &Type) -> Option<&Type> {
    let Type::Path(path) = ty else { return None };
    let last = path.path.segments.last()?;
    if last.ident != "State" {
        return None;
    }
    let PathArguments::AngleBracketed(args) = &last.arguments else { return None };
    match args.args.first()? {
        GenericArgument::Type(inner) => Some(inner),
        _ => None,
    }
}

trait BlockTokens {
    fn to_token_stream_inner(&self) -> TokenStream;
}

impl BlockTokens for syn::Block {
    fn to_token_stream_inner(&self) -> TokenStream {
        quote::ToTokens::to_token_stream(self)
    }
}

fn expand_checked(function: &ItemFn, args: &Args, checked: &Checked) -> TokenStream {
    let krate = match &args.krate {
        Some(path) => quote!(#path),
        None => quote!(::delivery),
    };
    let private = quote!(#krate::__private);
    let ItemFn { attrs, vis, sig, block } = function;
    let name = &sig.ident;
    let inputs = &sig.inputs;
    let output = &sig.output;

    // The state the parameters are resolved against: the `State<T>` parameter's `T`, `state = T`,
    // or any state at all when the handler takes none.
    let (impl_generics, state_ty) = match &checked.state {
        Some(ty) => (quote!(), quote!(#ty)),
        None => (quote!(<__DeliveryState: ::core::marker::Send + ::core::marker::Sync + 'static>), quote!(__DeliveryState)),
    };
    let generic_bounds = if checked.state.is_none() {
        let bounds = checked.params.iter().map(|ty| quote!(#ty: #private::FromUnit<__DeliveryState>,));
        quote!(where #(#bounds)*)
    } else {
        quote!()
    };

    // Each parameter: not a clock (unless declared safe), not a minter, not an acknowledgement
    // handle — by type, which sees through aliases and wrappers. With a concrete state, whether it
    // is an extractor is checked by the `extract` call in the impl below, spanned the same way.
    let param_checks = checked.params.iter().map(|ty| {
        let span = ty.span();
        let probe = quote_spanned!(span=> (&#private::probe::Probe::<#ty>::NEW));
        let clock = args.allow_clock.is_none().then(|| quote_spanned! {span=>
            #private::probe::assert_not_clock(#probe.clock_probe());
        });
        let extractor = checked.state.is_none().then(|| quote_spanned! {span=>
            #private::assert_extractor::<#ty, ()>();
        });
        quote_spanned! {span=>
            #clock
            #private::probe::assert_not_minter(#probe.minter_probe());
            #private::probe::assert_not_ack_handle(#probe.ack_probe());
            #extractor
        }
    });
    let output_span = checked.output.as_ref().map_or_else(|| name.span(), |ty| ty.span());

    let bindings: Vec<_> = (0..checked.params.len()).map(|i| format_ident!("__delivery_arg{}", i)).collect();
    let extracts = checked.params.iter().map(|ty| {
        quote_spanned!(ty.span()=> #private::extract::<#ty, #state_ty>(__delivery_unit, __delivery_state)?)
    });

    let into_outcome = quote_spanned!(output_span=> #private::into_outcome(__delivery_returned));
    let clock_doc = args.allow_clock.as_ref().map(|reason| {
        let text = format!(" Reads the clock by a recorded exception: {}", reason.value());
        quote!(#[doc = ""] #[doc = #text])
    });
    let handle_doc = format!(" The handler `{name}` as written. Call it directly in tests; the runtime calls it through `Handler`.");

    quote! {
        #(#attrs)*
        #clock_doc
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug)]
        #vis struct #name;

        impl #name {
            #[doc = #handle_doc]
            #vis async fn handle(#inputs) #output #block
        }

        const _: () = {
            use #private::probe::{AckFallback as _, AckSpecific as _, ClockFallback as _, ClockSpecific as _, MinterFallback as _, MinterSpecific as _};

            #[allow(dead_code, clippy::all)]
            fn __delivery_checks() {
                #(#param_checks)*
            }

            impl #impl_generics #private::Handler<#state_ty> for #name #generic_bounds {
                fn call(
                    &self,
                    __delivery_unit: &#private::Unit,
                    __delivery_state: &#state_ty,
                ) -> impl ::core::future::Future<Output = #private::Outcome> + ::core::marker::Send + 'static {
                    let __delivery_args = (|| -> ::core::result::Result<_, #private::Malformed> {
                        ::core::result::Result::Ok((#(#extracts,)*))
                    })();
                    async move {
                        match __delivery_args {
                            ::core::result::Result::Ok((#(#bindings,)*)) => {
                                let __delivery_returned = #name::handle(#(#bindings),*).await;
                                #into_outcome
                            }
                            ::core::result::Result::Err(__delivery_error) => #private::malformed(__delivery_error),
                        }
                    }
                }
            }
        };
    }
}
