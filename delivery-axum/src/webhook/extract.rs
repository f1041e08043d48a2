//! How the expansion of `#[webhook]` picks each parameter's extractor (autoref specialization),
//! refusing the types that read the body before it is verified (rule 5).

use std::marker::PhantomData;

use bytes::Bytes;

use delivery_core::extract::{FromUnit, Malformed};
use delivery_core::unit::Unit;

/// A handler parameter's extractor, chosen where the types are concrete (autoref
/// specialization): `(&&Extract::<T, S>::NEW).extractor()` finds
/// 1. `T: FromUnit<S>`: its `from_unit`;
/// 2. a type that reads the raw body (axum's `Json`, `Form`, `Bytes`, `String`, `Request`,
///    `Body`): refused with rule 5's message ([`VerifiedFirst`]);
/// 3. anything else: refused with `FromUnit`'s "not an extractor" message.
///
/// Not public API.
#[doc(hidden)]
pub struct Extract<T, S>(PhantomData<fn() -> (T, S)>);

impl<T, S> Extract<T, S> {
    pub const NEW: Self = Extract(PhantomData);
}

/// Resolves one parameter from the unit and the state.
#[doc(hidden)]
pub type ExtractFn<T, S> = fn(&Unit, &S) -> Result<T, Malformed>;

#[doc(hidden)]
pub trait ViaFromUnit<T, S> {
    fn extractor(&self) -> ExtractFn<T, S>;
}

impl<T: FromUnit<S>, S> ViaFromUnit<T, S> for &Extract<T, S> {
    #[inline]
    fn extractor(&self) -> ExtractFn<T, S> {
        T::from_unit
    }
}

#[doc(hidden)]
pub trait ViaRawBody<T, S> {
    fn extractor(&self) -> ExtractFn<T, S>
    where
        T: VerifiedFirst;
}

impl<T: ReadsRawBody, S> ViaRawBody<T, S> for &&Extract<T, S> {
    fn extractor(&self) -> ExtractFn<T, S>
    where
        T: VerifiedFirst,
    {
        unreachable!("no type implements VerifiedFirst")
    }
}

#[doc(hidden)]
pub trait ViaAnything<T, S> {
    fn extractor(&self) -> ExtractFn<T, S>
    where
        T: FromUnit<S>;
}

impl<T, S> ViaAnything<T, S> for Extract<T, S> {
    #[inline]
    fn extractor(&self) -> ExtractFn<T, S>
    where
        T: FromUnit<S>,
    {
        T::from_unit
    }
}

/// Types that read the request body: as a webhook handler's parameter they would read (or parse)
/// it before the generated handler verified it. Not public API.
#[doc(hidden)]
pub trait ReadsRawBody {}

impl<T> ReadsRawBody for ::axum::Json<T> {}
impl<T> ReadsRawBody for ::axum::Form<T> {}
impl ReadsRawBody for ::axum::extract::RawForm {}
impl ReadsRawBody for ::axum::body::Body {}
impl<B> ReadsRawBody for ::axum::http::Request<B> {}
impl ReadsRawBody for Bytes {}
impl ReadsRawBody for bytes::BytesMut {}
impl ReadsRawBody for String {}
impl<T: ReadsRawBody> ReadsRawBody for Option<T> {}
impl<T: ReadsRawBody, E> ReadsRawBody for Result<T, E> {}

/// Nothing implements it: a parameter that reaches this bound reads the body unverified.
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "a webhook handler must not take `{Self}`: it reads the request body before its signature is verified (rule 5)",
    label = "reads the body before it is verified",
    note = "the generated handler reads the raw body and verifies it first; take `delivery::Json<T>` for the verified payload, or `delivery::Unit` for the verified bytes"
)]
pub trait VerifiedFirst {}
