//! axum for [`delivery`](https://docs.rs/delivery): `#[webhook]` routes that verify the
//! signature over the raw body before anything parses it ([`webhook`]), the dead-letter web
//! console ([`admin`], feature `admin`) and health ([`health`]). Use it through the `delivery`
//! facade (features `axum`, `admin`); the crate's README shows each, its examples compiled as doc
//! tests of `delivery`.
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "admin")]
pub mod admin;
pub mod health;
pub mod webhook;
