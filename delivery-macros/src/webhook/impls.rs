//! The items `#[webhook]` adds to the shared expansion: `WebhookHandler<S>` and axum's `Handler`.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::Type;
use syn::spanned::Spanned;

use crate::ast::Handler;
use crate::expand::{self, Attrs};
use crate::webhook::args::{Hook, SecretSource, StateSecret};

/// `WebhookHandler<S>` and axum's `Handler`, so that `post(name)` routes to the handler type.
pub(super) fn expand_webhook(
    handler: &Handler<Hook>,
    state: &Type,
    stateless: bool,
    has_errors: bool,
) -> TokenStream {
    let Handler {
        function,
        args,
        own: hook,
    } = handler;
    let krate = args.krate_path();
    let private = quote!(#krate::__private);
    let wp = quote!(#krate::webhook::__private);
    let Attrs { cfgs, .. } = expand::sort_attrs(&function.attrs);
    let vis = &function.vis;
    let name = &function.sig.ident;
    let name_text = name.to_string();
    let rs = format_ident!("__DeliveryRouterState");

    // The handler's own state is taken from the router's (`FromRef`, as axum's `State` does).
    let mut bounds = Vec::new();
    let handler_state = if stateless {
        quote!(())
    } else {
        bounds.push(quote!(#state: #wp::FromRef<#rs>,));
        quote!(<#state as #wp::FromRef<#rs>>::from_ref(__delivery_state))
    };

    let (verifier, cache) = match (&hook.scheme, &hook.secrets) {
        (Some(variant), Some(sources)) if !has_errors => {
            let steps = sources.iter().map(|source| match source {
                SecretSource::Env(var) => quote!(.env(#var)),
                SecretSource::State(secret) => {
                    let StateSecret { closure, ty } = &**secret;
                    let ty = ty.as_ref().unwrap_or(state);
                    bounds.push(quote!(#ty: #wp::FromRef<#rs>,));
                    let span = closure.span();
                    quote_spanned! {span=>
                        .from_state(
                            &<#ty as #wp::FromRef<#rs>>::from_ref(__delivery_state),
                            #closure,
                        )
                    }
                }
            });
            let max_body = hook.max_body.as_ref().map(|n| quote!(.max_body(#n)));
            let credential_headers = hook.credential_headers.iter().flatten();
            let tolerance = hook
                .tolerance_secs
                .as_ref()
                .map(|s| quote!(.tolerance(::core::time::Duration::from_secs(#s))));
            let verifier = quote! {
                #wp::Config::new(#name_text, #krate::webhook::Scheme::#variant)
                    #(#steps)*
                    #max_body
                    #tolerance
                    #(.credential_header(#credential_headers))*
                    .build()
            };
            // Secrets read from the environment only are the same for every state and every
            // request: the verifier is built once per process.
            let env_only = sources.iter().all(|s| matches!(s, SecretSource::Env(_)));
            let cache = env_only.then(|| {
                quote! {
                    fn verifier_cache(&self) -> ::core::option::Option<&'static #wp::VerifierCache> {
                        static CACHE: #wp::VerifierCache = #wp::VerifierCache::new();
                        ::core::option::Option::Some(&CACHE)
                    }
                }
            });
            (verifier, cache)
        }
        // Never runs: the build fails on the errors reported. The type stays usable meanwhile.
        _ => (
            quote!(::core::unreachable!("#[webhook] reported errors")),
            None,
        ),
    };

    let verifier_doc = format!(
        " Builds the verifier of `{name}` from its `secret` sources, read now. Call it at startup to fail fast on a \
         missing or unusable secret (`delivery::webhook::route` does)."
    );

    quote! {
        #(#cfgs)*
        impl #name {
            #[doc = #verifier_doc]
            #[allow(dead_code, clippy::missing_errors_doc)]
            #vis fn verifier<#rs>(
                state: &#rs,
            ) -> ::core::result::Result<#krate::webhook::Verifier, #krate::webhook::WebhookConfigError>
            where
                Self: #wp::WebhookHandler<#rs>,
            {
                <Self as #wp::WebhookHandler<#rs>>::verifier(&#name, state)
            }
        }

        #(#cfgs)*
        const _: () = {
            impl<#rs> #wp::WebhookHandler<#rs> for #name
            where
                #rs: ::core::marker::Send + ::core::marker::Sync + 'static,
                #(#bounds)*
            {
                type State = #state;

                const NAME: &'static str = #name_text;

                // A handler without state has `()`, returned as such.
                #[allow(clippy::unused_unit)]
                fn handler_state(__delivery_state: &#rs) -> #state {
                    #handler_state
                }

                fn verifier(
                    &self,
                    __delivery_state: &#rs,
                ) -> ::core::result::Result<#krate::webhook::Verifier, #krate::webhook::WebhookConfigError> {
                    #verifier
                }

                #cache

                fn run(
                    &self,
                    __delivery_unit: &#private::Unit,
                    __delivery_state: &#state,
                ) -> impl ::core::future::Future<Output = #private::Outcome> + ::core::marker::Send + 'static {
                    <Self as #private::Handler<#state>>::call(self, __delivery_unit, __delivery_state)
                }
            }

            impl<#rs> #wp::axum::handler::Handler<#wp::WebhookMarker, #rs> for #name
            where
                #rs: ::core::clone::Clone + ::core::marker::Send + ::core::marker::Sync + 'static,
                #name: #wp::WebhookHandler<#rs>,
            {
                type Future = #wp::ResponseFuture;

                fn call(self, __delivery_request: #wp::axum::extract::Request, __delivery_state: #rs) -> Self::Future {
                    #wp::serve(self, __delivery_request, __delivery_state)
                }
            }
        };
    }
}
