//! Stub; replaced below.
pub use delivery_core::*;
