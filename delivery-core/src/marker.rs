//! Marker traits for the things a handler must never take: clocks, id minters and
//! acknowledgement handles. `#[consumer]` checks every parameter's type against them, which is
//! what catches a clock behind a type alias, a reference, `Arc`, `Box` or `State` (each element of
//! a tuple written in the parameter is checked too). A parameter is refused by what its type is,
//! not by its name: a user's `geo::Instant`, `ClockConfig` or `IdGenerator` is accepted. Marked:
//! std's `SystemTime` and `Instant`, tokio's `Instant`, rand 0.9's generators (feature `rand`),
//! `ulid::Generator` (feature `ulid`), `fastrand::Rng` (feature `fastrand`) and uuid's `ContextV7`
//! (with the outbox stores).
//!
//! Declare your own types:
//!
//! ```
//! struct WallClock;
//! impl delivery_core::Clock for WallClock {}
//!
//! struct OrderNumbers;
//! impl delivery_core::Minter for OrderNumbers {}
//! ```

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::{Arc, Mutex, RwLock};

use crate::extract::State;

/// A source of the current time. A handler that reads it on receipt writes a different value on
/// every delivery (rule 3), so no handler may take one as a parameter.
pub trait Clock {}

/// A source of fresh identifiers or randomness. An id minted on receipt makes every delivery a new
/// record (rule 3), so no handler may take one as a parameter.
pub trait Minter {}

/// Something that can acknowledge or return a unit. Acknowledgement belongs to the runtime, after
/// the handler's effect (rule 1), so no handler may take one as a parameter.
pub trait AckHandle {}

impl Clock for std::time::SystemTime {}
impl Clock for std::time::Instant {}
impl Clock for tokio::time::Instant {}

macro_rules! reach {
    ($($marker:ident),*) => {$(
        impl<T: $marker + ?Sized> $marker for &T {}
        impl<T: $marker + ?Sized> $marker for &mut T {}
        impl<T: $marker + ?Sized> $marker for Box<T> {}
        impl<T: $marker + ?Sized> $marker for Arc<T> {}
        impl<T: $marker + ?Sized> $marker for Rc<T> {}
        impl<T: $marker> $marker for State<T> {}
        impl<T: $marker> $marker for Option<T> {}
        impl<T: $marker + ?Sized> $marker for Mutex<T> {}
        impl<T: $marker + ?Sized> $marker for RwLock<T> {}
        impl<T: $marker + ?Sized> $marker for RefCell<T> {}
        impl<T: $marker> $marker for Cell<T> {}
        impl<T: $marker + ?Sized> $marker for tokio::sync::Mutex<T> {}
        impl<T: $marker + ?Sized> $marker for tokio::sync::RwLock<T> {}
    )*};
}
reach!(Clock, Minter, AckHandle);

// rand's generators: each call hands out fresh randomness; a seeded one kept in the state advances
// on every delivery, so it is a minter as a parameter too.
#[cfg(feature = "ulid")]
impl Minter for ulid::Generator {}
#[cfg(feature = "fastrand")]
impl Minter for fastrand::Rng {}
#[cfg(feature = "rand")]
impl Minter for rand::rngs::ThreadRng {}
#[cfg(feature = "rand")]
impl Minter for rand::rngs::StdRng {}
#[cfg(feature = "rand")]
impl Minter for rand::rngs::SmallRng {}
#[cfg(feature = "rand")]
impl Minter for rand::rngs::OsRng {}
#[cfg(feature = "rand")]
impl Minter for dyn rand::RngCore {}
#[cfg(feature = "rand")]
impl Minter for dyn rand::RngCore + Send {}
#[cfg(feature = "rand")]
impl Minter for dyn rand::RngCore + Send + Sync {}
// uuid's v7 context counts within a millisecond of the clock (present with the outbox stores).
#[cfg(any(feature = "postgres", feature = "sqlite"))]
impl Minter for uuid::ContextV7 {}

#[cfg(feature = "lapin")]
impl AckHandle for lapin::Acker {}
#[cfg(feature = "lapin")]
impl AckHandle for lapin::message::Delivery {}

/// Compile-time probes used by `#[consumer]`'s expansion. Not public API.
///
/// Autoref specialization: `(&Probe::<T>::NEW).clock_probe()` finds the method on `Probe<T>`
/// (which needs `T: Clock`) before the one on `&Probe<T>`, so a clock yields `ClockParameter<T>`, which
/// the assertion refuses with the rule's message.
#[doc(hidden)]
#[allow(missing_docs, unreachable_pub)]
pub mod probe {
    use std::marker::PhantomData;

    use super::{AckHandle, Clock, Minter};

    pub struct Probe<T: ?Sized>(PhantomData<T>);

    impl<T: ?Sized> Probe<T> {
        pub const NEW: Self = Probe(PhantomData);
    }

    /// The probed parameter type `T` is a clock.
    pub struct ClockParameter<T: ?Sized>(PhantomData<T>);
    /// The probed parameter type `T` mints ids or randomness.
    pub struct MinterParameter<T: ?Sized>(PhantomData<T>);
    /// The probed parameter type `T` can acknowledge.
    pub struct AckHandleParameter<T: ?Sized>(PhantomData<T>);
    pub struct Allowed;

    pub trait ClockSpecific<T: ?Sized> {
        fn clock_probe(&self) -> ClockParameter<T> {
            ClockParameter(PhantomData)
        }
    }
    impl<T: Clock + ?Sized> ClockSpecific<T> for Probe<T> {}
    pub trait ClockFallback {
        fn clock_probe(&self) -> Allowed {
            Allowed
        }
    }
    impl<T: ?Sized> ClockFallback for &Probe<T> {}

    pub trait MinterSpecific<T: ?Sized> {
        fn minter_probe(&self) -> MinterParameter<T> {
            MinterParameter(PhantomData)
        }
    }
    impl<T: Minter + ?Sized> MinterSpecific<T> for Probe<T> {}
    pub trait MinterFallback {
        fn minter_probe(&self) -> Allowed {
            Allowed
        }
    }
    impl<T: ?Sized> MinterFallback for &Probe<T> {}

    pub trait AckSpecific<T: ?Sized> {
        fn ack_probe(&self) -> AckHandleParameter<T> {
            AckHandleParameter(PhantomData)
        }
    }
    impl<T: AckHandle + ?Sized> AckSpecific<T> for Probe<T> {}
    pub trait AckFallback {
        fn ack_probe(&self) -> Allowed {
            Allowed
        }
    }
    impl<T: ?Sized> AckFallback for &Probe<T> {}

    #[diagnostic::on_unimplemented(
        message = "a handler must not take a clock: every delivery would write a different time (rule 3)",
        label = "this parameter is a clock",
        note = "take the time from the unit (a field of the payload, its `Stamp`, a header) so a redelivery writes the same value; a clock read that writes nothing, like a latency metric, may use `#[consumer(allow_clock = \"why\")]`"
    )]
    pub trait NotAClock {}
    impl NotAClock for Allowed {}
    pub fn assert_not_clock<T: NotAClock>(_: T) {}

    #[diagnostic::on_unimplemented(
        message = "a handler must not take an id minter or a random source: every delivery would create a new record (rule 3)",
        label = "this parameter mints ids or randomness",
        note = "derive the id from the unit instead: its `UnitId`, an id in the payload, or `Uuid::new_v5(namespace, unit_id)`"
    )]
    pub trait NotAMinter {}
    impl NotAMinter for Allowed {}
    pub fn assert_not_minter<T: NotAMinter>(_: T) {}

    #[diagnostic::on_unimplemented(
        message = "a handler must not take an acknowledgement handle: the runtime acknowledges after the effect (rule 1)",
        label = "this parameter can acknowledge the unit",
        note = "return `Ok(())` once the effect is committed and the runtime acknowledges; return an error and it returns or dead-letters the unit"
    )]
    pub trait NotAnAckHandle {}
    impl NotAnAckHandle for Allowed {}
    pub fn assert_not_ack_handle<T: NotAnAckHandle>(_: T) {}
}
