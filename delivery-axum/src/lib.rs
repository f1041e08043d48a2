#![doc = include_str!("../README.md")]
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "admin")]
pub mod admin;
pub mod health;
pub mod webhook;
