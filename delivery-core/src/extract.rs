//! Extractors: the parameters a handler may take, each resolved from the unit or the shared state.
//!
//! A parameter type that is not an extractor does not compile. Clocks and id minters are never
//! extractors: the time and the identity of what a handler writes come from the unit (rule 3).

use std::ops::{Deref, DerefMut};

use serde::de::DeserializeOwned;

use crate::unit::{DeliveryCount, Headers, Stamp, Unit, UnitId};

/// Why a unit could not be turned into a handler's parameters. Such a unit never reaches the
/// handler: it goes to the dead letter with reason `malformed`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Malformed(String);

impl Malformed {
    /// A decode failure described by `message`.
    pub fn new(message: impl Into<String>) -> Self {
        Malformed(message.into())
    }

    /// The description.
    pub fn message(&self) -> &str {
        &self.0
    }
}

/// A handler parameter resolved from the delivered unit and the consumer's shared state `S`.
///
/// Implement it for your own extractors; a failure marks the unit malformed.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a handler parameter: it is not resolved from the unit or the shared state",
    label = "not an extractor",
    note = "handler parameters are extractors: `Json<T>`, `State<S>`, `UnitId`, `DeliveryCount`, `Option<Stamp>`, `Stamp`, `Headers`, or a type implementing `FromUnit`",
    note = "a clock or an id minter is never a parameter (rule 3): take times and ids from the unit, so a redelivery writes the same values"
)]
pub trait FromUnit<S>: Sized {
    /// Whether this parameter is the unit's transaction (a database queue's `Tx`): the runtime
    /// then has the unit's handle [begin](crate::Settle::begin) it before the handler runs, and
    /// the acknowledgement commits in it. `false` for every other extractor.
    const IN_TRANSACTION: bool = false;

    /// Resolves the parameter.
    fn from_unit(unit: &Unit, state: &S) -> Result<Self, Malformed>;
}

/// The payload decoded from JSON with serde. Destructure it like axum's:
/// `Json(order): Json<OrderPlaced>`.
///
/// Invalid UTF-8, invalid JSON, an empty payload or the wrong shape make the unit malformed: it
/// goes to the dead letter intact and never reaches the handler.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Json<T>(pub T);

impl<T> Json<T> {
    /// The decoded value.
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> Deref for Json<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> DerefMut for Json<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

impl<T: DeserializeOwned, S> FromUnit<S> for Json<T> {
    #[inline]
    fn from_unit(unit: &Unit, _: &S) -> Result<Self, Malformed> {
        decode_json(unit.payload()).map(Json)
    }
}

/// Decodes a JSON payload, naming what was wrong with it.
#[inline]
pub(crate) fn decode_json<T: DeserializeOwned>(payload: &[u8]) -> Result<T, Malformed> {
    if payload.is_empty() {
        return Err(empty_payload());
    }
    match serde_json::from_slice(payload) {
        Ok(value) => Ok(value),
        Err(error) => Err(undecodable(payload, error)),
    }
}

// The failures are described out of line (and not per payload type): decoding a well-formed
// payload, the common case, stays small enough to inline into the handler.

#[cold]
#[inline(never)]
fn empty_payload() -> Malformed {
    Malformed::new("empty payload")
}

#[cold]
#[inline(never)]
fn undecodable(payload: &[u8], error: serde_json::Error) -> Malformed {
    match std::str::from_utf8(payload) {
        Err(utf8) => Malformed::new(format!("payload is not UTF-8: {utf8}")),
        Ok(_) => Malformed::new(format!("payload does not decode: {error}")),
    }
}

/// The consumer's shared application state (`S: Clone`), given with `Consumer::state`.
/// Destructure it like axum's: `State(app): State<App>`.
#[derive(Clone, Copy, Debug, Default)]
pub struct State<S>(pub S);

impl<S> Deref for State<S> {
    type Target = S;
    fn deref(&self) -> &S {
        &self.0
    }
}

impl<S: Clone> FromUnit<S> for State<S> {
    #[inline]
    fn from_unit(_: &Unit, state: &S) -> Result<Self, Malformed> {
        Ok(State(state.clone()))
    }
}

impl<S> FromUnit<S> for UnitId {
    #[inline]
    fn from_unit(unit: &Unit, _: &S) -> Result<Self, Malformed> {
        Ok(unit.id().clone())
    }
}

impl<S> FromUnit<S> for DeliveryCount {
    #[inline]
    fn from_unit(unit: &Unit, _: &S) -> Result<Self, Malformed> {
        Ok(unit.delivery_count())
    }
}

/// The unit's stamp, if any. A stamp above `i64::MAX` makes the unit malformed, as for
/// [`Stamp`].
impl<S> FromUnit<S> for Option<Stamp> {
    #[inline]
    fn from_unit(unit: &Unit, _: &S) -> Result<Self, Malformed> {
        match unit.stamp() {
            Some(stamp) => storable(stamp).map(Some),
            None => Ok(None),
        }
    }
}

/// A required stamp: a unit without one is malformed. So is a unit whose stamp is above
/// `i64::MAX`: no store can hold it (the guard's column is a `BIGINT`, as are Kafka's offsets and
/// the outbox's sequence), so it could never pass and goes to the dead letter at once (rule 2),
/// rather than failing in `delivery::store` on every delivery up to the bound.
///
/// ```
/// use delivery::{extract::FromUnit, Stamp, Unit};
///
/// let fits = Unit::new("u-1", "{}").with_stamp(Stamp(i64::MAX as u64));
/// assert!(<Stamp as FromUnit<()>>::from_unit(&fits, &()).is_ok());
/// let past = Unit::new("u-2", "{}").with_stamp(Stamp(u64::MAX));
/// let malformed = <Stamp as FromUnit<()>>::from_unit(&past, &()).unwrap_err();
/// assert!(malformed.message().contains("out of range"));
/// ```
impl<S> FromUnit<S> for Stamp {
    #[inline]
    fn from_unit(unit: &Unit, _: &S) -> Result<Self, Malformed> {
        match unit.stamp() {
            Some(stamp) => storable(stamp),
            None => Err(Malformed::new(format!(
                "the unit carries no ordering stamp (rule 4): its transport gives it none, and it \
                 has no `{}` header holding a decimal stamp; have its producer set one (the \
                 outbox relay does), or take `Option<Stamp>`",
                crate::headers::STAMP
            ))),
        }
    }
}

/// `stamp` if a store can hold it (at most `i64::MAX`); else why the unit is malformed.
#[inline]
fn storable(stamp: Stamp) -> Result<Stamp, Malformed> {
    if stamp.0 <= i64::MAX as u64 {
        Ok(stamp)
    } else {
        Err(out_of_range(stamp))
    }
}

#[cold]
#[inline(never)]
fn out_of_range(stamp: Stamp) -> Malformed {
    Malformed::new(format!(
        "the unit's ordering stamp {stamp} is out of range: a stamp is at most i64::MAX \
         ({}), what a store's BIGINT column holds (rule 4)",
        i64::MAX
    ))
}

impl<S> FromUnit<S> for Headers {
    #[inline]
    fn from_unit(unit: &Unit, _: &S) -> Result<Self, Malformed> {
        Ok(unit.headers().clone())
    }
}

/// The whole unit, read-only: id, payload, count, stamp and headers.
impl<S> FromUnit<S> for Unit {
    #[inline]
    fn from_unit(unit: &Unit, _: &S) -> Result<Self, Malformed> {
        Ok(unit.clone())
    }
}

/// Several extractors at once, each resolved from the same unit: a batch's item type that needs
/// more than the payload (`Batch<(Json<Order>, Stamp)>`: a unit without a stamp is malformed and
/// never enters the batch). The unit is malformed if any of them fails.
macro_rules! tuples {
    ($($name:ident),+) => {
        // Not offered in the list of extractors a refused parameter's error shows.
        #[diagnostic::do_not_recommend]
        impl<S, $($name: FromUnit<S>),+> FromUnit<S> for ($($name,)+) {
            const IN_TRANSACTION: bool = false $(|| $name::IN_TRANSACTION)+;

            #[inline]
            fn from_unit(unit: &Unit, state: &S) -> Result<Self, Malformed> {
                Ok(($($name::from_unit(unit, state)?,)+))
            }
        }
    };
}

tuples!(A, B);
tuples!(A, B, C);
tuples!(A, B, C, D);
