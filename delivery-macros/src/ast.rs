//! Parse: the tokens an attribute is given, as a handler. Nothing is judged here; the checks are in
//! `check.rs`.

use proc_macro2::TokenStream;
use quote::quote;
use syn::{FnArg, ItemFn, PatType};

use crate::attr::Args;

/// A handler as written: the annotated function and the attribute's arguments.
pub(crate) struct Handler<Own> {
    /// The function, kept whole: it is emitted again as `name::handle`, or as it is when it
    /// cannot become a handler.
    pub(crate) function: ItemFn,
    /// The arguments every attribute shares.
    pub(crate) args: Args,
    /// The attribute's own arguments (`#[webhook]`'s scheme and secrets), `()` when it has none.
    pub(crate) own: Own,
}

impl<Own> Handler<Own> {
    /// The parameters other than `self` (which the shape check refuses), in order.
    pub(crate) fn params(&self) -> impl Iterator<Item = &PatType> {
        self.function
            .sig
            .inputs
            .iter()
            .filter_map(|input| match input {
                FnArg::Typed(typed) => Some(typed),
                FnArg::Receiver(_) => None,
            })
    }
}

/// The annotated item as a function, or the item unchanged plus an error saying what `#[name]`
/// goes on.
pub(crate) fn function(item: TokenStream, name: &str) -> Result<ItemFn, TokenStream> {
    syn::parse2(item.clone()).map_err(|error| {
        let error = syn::Error::new(
            error.span(),
            format!("#[{name}] goes on an `async fn` handler: {error}"),
        )
        .to_compile_error();
        quote!(#item #error)
    })
}
