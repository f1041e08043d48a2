//! Attribute macros for [`delivery`](https://docs.rs/delivery). Use them through the facade:
//! `#[delivery::consumer]`. The documentation with examples lives on the re-exports there.
//!
//! Each attribute is parse -> check -> expand; the checks shared by every attribute (no clock,
//! no minter, no acknowledgement handle, a return type that can fail) are in `check.rs`.

mod attr;
mod check;
mod consumer;
mod ctxt;

use proc_macro::TokenStream;

/// Turns an `async fn` into a unit handler the consumer runtime runs. See `delivery::consumer`.
#[proc_macro_attribute]
pub fn consumer(attr: TokenStream, item: TokenStream) -> TokenStream {
    consumer::expand(attr.into(), item.into()).into()
}
