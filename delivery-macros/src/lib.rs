//! Attribute macros for [`delivery`](https://docs.rs/delivery). Use them through the facade:
//! `#[delivery::consumer]`, `#[delivery::webhook(..)]`, `#[delivery::relay]`. The documentation with examples lives on the re-exports there.
//!
//! Each attribute is parse (`ast.rs`, `attr.rs`) -> check (`check.rs`) -> expand (`expand.rs`),
//! stages shared by every attribute. An attribute's own file (`consumer.rs`, `webhook.rs`,
//! `relay.rs`) supplies what differs, as a `kind::Kind`: its runtime trait, the wording of its
//! errors, and its own arguments, checks and items.

mod ast;
mod attr;
mod check;
mod consumer;
mod ctxt;
mod expand;
mod kind;
mod relay;
mod span;
#[cfg(test)]
mod sweep;
mod webhook;

use proc_macro::TokenStream;

/// Turns an `async fn` into a unit handler the consumer runtime runs. See `delivery::consumer`.
#[proc_macro_attribute]
pub fn consumer(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::attribute::<consumer::Consumer>(attr.into(), item.into()).into()
}

/// Turns an `async fn` into an axum webhook handler that verifies the raw body before parsing it.
/// See `delivery::webhook`.
#[proc_macro_attribute]
pub fn webhook(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::attribute::<webhook::Webhook>(attr.into(), item.into()).into()
}

/// Turns an `async fn(record: OutboxRecord<T>, ..) -> Result<Receipt, E>` into a relay function
/// the outbox relay runs. See `delivery::relay`.
#[proc_macro_attribute]
pub fn relay(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::attribute::<relay::Relay>(attr.into(), item.into()).into()
}
