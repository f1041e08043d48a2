//! Expand: the pipeline every attribute runs (parse -> check -> expand), and the wrapper it
//! generates: the annotated `async fn` becomes a unit struct of the same name implementing the
//! attribute's runtime trait; the function as written stays callable as `name::handle(..)`.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::{Attribute, ItemFn};

use crate::ast::{self, Handler};
use crate::check::{self, Checked};
use crate::ctxt::Ctxt;
use crate::kind::Kind;
use crate::span;

/// `#[K](attr)` on `item`.
pub(crate) fn attribute<K: Kind>(attr: TokenStream, item: TokenStream) -> TokenStream {
    let function = match ast::function(item, K::NAME) {
        Ok(function) => function,
        Err(errors) => return errors,
    };
    let cx = Ctxt::new();
    let (args, own) = K::parse_args(attr, &cx);
    let handler = Handler {
        function,
        args,
        own,
    };
    let shape_ok = check::shape(&handler.function, K::NAME, &cx);
    let checked = shape_ok.then(|| {
        let mut checked = check::signature(&handler, &K::WORDING, &cx);
        if let Some((position, _)) = checked.batch.take_if(|_| !K::BATCHES) {
            // Refused once, here: expanded as a unit handler, with no probe on the parameter.
            checked.params[position].ok = false;
            let ty = &checked.params[position].ty;
            cx.error_spanned_by(
                ty,
                format!(
                    "a #[{}] function handles one unit at a time: `Batch<T>` is for a #[consumer]",
                    K::NAME
                ),
            );
        }
        K::check(&handler, &mut checked, &cx);
        checked
    });
    let errors = cx.check().err();
    match checked {
        // The function cannot become a handler at all: keep it as written so an IDE still knows
        // it, plus every error.
        None => {
            let function = &handler.function;
            quote! {
                #[allow(dead_code)]
                #function
                #errors
            }
        }
        // Errors, if any, are reported; the handler type is still generated (with the checks that
        // still apply) so the places that use it raise no second, misleading error.
        Some(checked) => {
            let has_errors = errors.is_some();
            let wrapper = wrapper::<K>(&handler, &checked, has_errors);
            let own = K::expand(&handler, &checked, has_errors);
            quote!(#wrapper #own #errors)
        }
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

/// The unit struct, the function as `name::handle`, the type-level checks and the runtime trait's
/// impl.
fn wrapper<K: Kind>(handler: &Handler<K::Own>, checked: &Checked, has_errors: bool) -> TokenStream {
    let runtime = &K::RUNTIME;
    let args = &handler.args;
    let krate = args.krate_path();
    let private = quote!(#krate::__private);
    let ItemFn {
        attrs,
        vis,
        sig,
        block,
    } = &handler.function;
    let Attrs { docs, cfgs, other } = sort_attrs(attrs);
    let name = &sig.ident;
    let inputs = &sig.inputs;
    let output = &sig.output;
    let state = checked.state.clone().or_else(K::default_state);

    // The state the parameters are resolved against: the `State<T>` parameter's `T`, `state = T`,
    // the attribute's default, or any state at all when the handler takes none.
    let (impl_generics, state_ty, where_clause) = match &state {
        Some(ty) => (quote!(), quote!(#ty), quote!()),
        None => {
            let extractor = format_ident!("{}", runtime.extractor);
            let bounds = (0..checked.params.len()).map(|i| {
                let ty = extracted(checked, i);
                quote!(#ty: #private::#extractor<__DeliveryState>,)
            });
            (
                quote!(<__DeliveryState: ::core::marker::Send + ::core::marker::Sync + 'static>),
                quote!(__DeliveryState),
                quote!(where #(#bounds)*),
            )
        }
    };
    let check_state = state.as_ref().map_or_else(|| quote!(()), |ty| quote!(#ty));

    // Each parameter: not a clock (unless declared safe), not a minter, not an acknowledgement
    // handle — by type, which sees through aliases and wrappers. Whether it is an extractor is
    // checked here when the impl below does not (a generic state, or errors already found).
    let param_checks = checked
        .params
        .iter()
        .enumerate()
        .filter(|(_, p)| p.ok)
        .map(|(i, p)| {
            let probes = p.probes.iter().map(|ty| {
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
                // A client's own acknowledgement handles (lapin's `Acker`), which the transport's
                // crate marks: the facade names them under its features.
                let transport_ack = span::call(
                    start,
                    end,
                    quote!(#private::probe::assert_not_ack_handle),
                    probe("transport_ack_probe"),
                );
                quote! {
                    #clock
                    #minter;
                    #ack;
                    #transport_ack;
                }
            });
            let extractor = (state.is_none() || has_errors)
                .then(|| K::assert_extractor(&krate, extracted(checked, i), &check_state));
            quote! {
                #(#probes)*
                #extractor
            }
        });

    let clock_doc = args.allow_clock.as_ref().map(|reason| {
        let text = format!(
            " Reads the clock by a recorded exception: {}",
            reason.value()
        );
        quote!(#[doc = ""] #[doc = #text])
    });
    let handle_doc = format!(
        " The {} `{name}` as written. Call it directly in tests; the {} calls it through `{}`.",
        runtime.function, runtime.caller, runtime.handler
    );
    // The runtime trait's impl: a batch handler's, or a unit handler's.
    let runtime_impl = if let Some((position, item)) = &checked.batch {
        BatchImpl {
            name,
            krate: &krate,
            private: &private,
            impl_generics: &impl_generics,
            state_ty: &state_ty,
            where_clause: &where_clause,
            position: *position,
            item,
        }
        .expand::<K>(checked, has_errors)
    } else {
        // The return value's conversion, in one place, spanned to the return type: a type that cannot
        // report a failure is refused here.
        let outcome = format_ident!("{}", runtime.outcome);
        let outcome_fn = checked.output.as_ref().map(|ty| {
            let convert = converted(ty, &private, runtime.convert);
            let via = runtime
                .convert_traits
                .iter()
                .map(|t| format_ident!("{}", t));
            quote! {
                #[allow(dead_code)]
                fn __delivery_outcome(__delivery_returned: #ty) -> #private::#outcome {
                    use #private::{#(#via as _),*};
                    #convert
                }
            }
        });

        let call_body = if has_errors || checked.output.is_none() {
            // Never runs: the build fails on the errors above. It keeps the type usable meanwhile.
            let message = format!("#[{}] reported errors", K::NAME);
            quote!(async { ::core::unreachable!(#message) })
        } else {
            let malformed = runtime.malformed.iter().map(|s| format_ident!("{}", s));
            let malformed = quote!(#private #(::#malformed)*);
            let bindings: Vec<_> = (0..checked.params.len())
                .map(|i| format_ident!("__delivery_arg{}", i))
                .collect();
            let extracts = checked.params.iter().map(|p| {
                let call = K::extract(&krate, &p.ty, &state_ty);
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

        // Whether the handler takes the unit's transaction: any of its parameters' own answer.
        let in_transaction = runtime
            .in_transaction
            .filter(|_| !has_errors && checked.output.is_some())
            .map(|name| {
                let name = format_ident!("{}", name);
                let extractor = format_ident!("{}", runtime.extractor);
                let types = checked.params.iter().map(|p| &p.ty);
                quote! {
                    const #name: bool = false #(|| <#types as #private::#extractor<#state_ty>>::#name)*;
                }
            });
        let handler_trait = format_ident!("{}", runtime.handler);
        let input = format_ident!("{}", runtime.input);

        quote! {
            #outcome_fn

            impl #impl_generics #private::#handler_trait<#state_ty> for #name #where_clause {
                #in_transaction

                fn call(
                    &self,
                    __delivery_unit: &#private::#input,
                    __delivery_state: &#state_ty,
                ) -> impl ::core::future::Future<Output = #private::#outcome> + ::core::marker::Send + 'static {
                    #call_body
                }
            }
        }
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
            use #private::transport_probe::{TransportAckFallback as _, TransportAckSpecific as _};

            #[allow(dead_code, clippy::all)]
            fn __delivery_checks() {
                #(#param_checks)*
            }

            #runtime_impl
        };
    }
}

/// The return value converted by its first route (autoref specialization):
/// `(&&Returned::new(__delivery_returned)).method()`, spanned to the return type `ty`, so a type
/// that cannot report a failure is refused on it.
fn converted(ty: &syn::Type, private: &TokenStream, method: &str) -> TokenStream {
    let (start, end) = span::range(ty);
    let returned = span::call(
        start,
        end,
        quote!(#private::Returned::new),
        quote!(__delivery_returned),
    );
    let method = format_ident!("{}", method);
    span::expr(start, end, quote!((&&#returned).#method()))
}

/// The type a parameter is resolved with: its own, or a batch's item type for `Batch<T>`.
fn extracted(checked: &Checked, i: usize) -> &syn::Type {
    match &checked.batch {
        Some((position, item)) if *position == i => item,
        _ => &checked.params[i].ty,
    }
}

/// A batch handler's impl of `BatchHandler<S>`: each unit decoded with the batch's item type, the
/// other parameters (its state) resolved against the batch's first unit, the return value turned
/// into a `BatchOutcome`.
struct BatchImpl<'a> {
    name: &'a syn::Ident,
    krate: &'a TokenStream,
    private: &'a TokenStream,
    impl_generics: &'a TokenStream,
    state_ty: &'a TokenStream,
    where_clause: &'a TokenStream,
    position: usize,
    item: &'a syn::Type,
}

impl BatchImpl<'_> {
    fn expand<K: Kind>(&self, checked: &Checked, has_errors: bool) -> TokenStream {
        let BatchImpl {
            name,
            krate,
            private,
            impl_generics,
            state_ty,
            where_clause,
            position,
            item,
        } = self;
        let outcome_fn = checked.output.as_ref().map(|ty| {
            let convert = converted(ty, private, "batch_outcome");
            quote! {
                #[allow(dead_code)]
                fn __delivery_outcome(__delivery_returned: #ty) -> #private::BatchOutcome {
                    use #private::{BatchViaHandlerError as _, BatchViaBoxError as _, BatchViaNothing as _};
                    #convert
                }
            }
        });
        let call_body = if has_errors || checked.output.is_none() {
            let message = format!("#[{}] reported errors", K::NAME);
            quote!(async { ::core::unreachable!(#message) })
        } else {
            let bindings: Vec<_> = (0..checked.params.len())
                .map(|i| format_ident!("__delivery_arg{}", i))
                .collect();
            let extracts = checked.params.iter().enumerate().map(|(i, p)| {
                if i == *position {
                    quote!(__delivery_batch)
                } else {
                    let call = K::extract(krate, &p.ty, state_ty);
                    quote!(#call?)
                }
            });
            quote! {
                let __delivery_unit = __delivery_batch[0].unit().clone();
                let __delivery_unit = &__delivery_unit;
                let __delivery_args = (move || -> ::core::result::Result<_, #private::Malformed> {
                    ::core::result::Result::Ok((#(#extracts,)*))
                })();
                async move {
                    match __delivery_args {
                        ::core::result::Result::Ok((#(#bindings,)*)) => {
                            __delivery_outcome(#name::handle(#(#bindings),*).await)
                        }
                        ::core::result::Result::Err(__delivery_error) => #private::batch_malformed(__delivery_error),
                    }
                }
            }
        };
        quote! {
            #outcome_fn

            impl #impl_generics #private::BatchHandler<#state_ty> for #name #where_clause {
                type Item = #item;

                fn decode(
                    &self,
                    __delivery_unit: &#private::Unit,
                    __delivery_state: &#state_ty,
                ) -> ::core::result::Result<#item, #private::Malformed> {
                    const {
                        ::core::assert!(
                            !<#item as #private::FromUnit<#state_ty>>::IN_TRANSACTION,
                            "a batch's units cannot each take their own transaction: the handler \
                             writes the whole batch in one transaction of its own (take the pool \
                             in its `State` and begin it there)"
                        )
                    };
                    #private::extract::<#item, #state_ty>(__delivery_unit, __delivery_state)
                }

                fn call(
                    &self,
                    __delivery_batch: #private::Batch<#item>,
                    __delivery_state: &#state_ty,
                ) -> impl ::core::future::Future<Output = #private::BatchOutcome> + ::core::marker::Send + 'static {
                    #call_body
                }
            }
        }
    }
}
