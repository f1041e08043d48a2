//! Attribute macros for [`delivery`](https://docs.rs/delivery). Use them through the facade:
//! `#[delivery::consumer]`, `#[delivery::webhook(..)]`, `#[delivery::relay]`. The documentation with examples lives on the re-exports there.
//!
//! Each attribute is parse -> check -> expand; the checks shared by every attribute (no clock,
//! no minter, no acknowledgement handle, a return type that can fail) are in `check.rs`.

mod attr;
mod check;
mod consumer;
mod ctxt;
mod relay;
mod span;
mod webhook;

use proc_macro::TokenStream;

/// Turns an `async fn` into a unit handler the consumer runtime runs. See `delivery::consumer`.
#[proc_macro_attribute]
pub fn consumer(attr: TokenStream, item: TokenStream) -> TokenStream {
    consumer::expand(attr.into(), item.into(), consumer::Flavor::Consumer).into()
}

/// Turns an `async fn` into an axum webhook handler that verifies the raw body before parsing it.
/// See `delivery::webhook`.
#[proc_macro_attribute]
pub fn webhook(attr: TokenStream, item: TokenStream) -> TokenStream {
    webhook::expand(attr.into(), item.into()).into()
}

/// Turns an `async fn(record: OutboxRecord<T>, ..) -> Result<Receipt, E>` into a relay function
/// the outbox relay runs. See `delivery::relay`.
#[proc_macro_attribute]
pub fn relay(attr: TokenStream, item: TokenStream) -> TokenStream {
    consumer::expand(attr.into(), item.into(), consumer::Flavor::Relay).into()
}
