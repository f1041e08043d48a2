//! Marker traits for the things a handler must never take: clocks, id minters and
//! acknowledgement handles. `#[consumer]` checks every parameter's type against them, which is
//! what catches a clock behind a type alias, a reference, `Arc`, `Box` or `State` (each element of
//! a tuple written in the parameter is checked too). A parameter is refused by what its type is,
//! not by its name: a user's `geo::Instant`, `ClockConfig` or `IdGenerator` is accepted. Marked:
//! std's `SystemTime` and `Instant`, tokio's `Instant`, uuid's `ContextV7` (with the outbox
//! stores), and, one feature per major release (each release's types are other types):
//!
//! | feature | marked |
//! |---|---|
//! | `rand-0_8` | rand 0.8's `ThreadRng`, `StdRng`, `SmallRng`, `OsRng`, `dyn RngCore` |
//! | `rand-0_9` (also `rand`) | rand 0.9's `ThreadRng`, `StdRng`, `SmallRng`, `OsRng`, `dyn RngCore` |
//! | `rand-0_10` | rand 0.10's `ThreadRng`, `StdRng`, `SmallRng`, `Xoshiro128PlusPlus`, `Xoshiro256PlusPlus`, `ChaCha8Rng`, `ChaCha12Rng`, `ChaCha20Rng`, `SysRng`, `dyn Rng` |
//! | `ulid-1`, `ulid-2`, `ulid-3` (also `ulid`) | `ulid::Generator` of that release |
//! | `fastrand-1`, `fastrand-2` (also `fastrand`) | `fastrand::Rng` of that release |
//!
//! Enable the features of every release your service depends on: a generator of a release whose
//! feature is off is refused only where its name says what it is (`StdRng`, `ThreadRng`), not
//! behind an alias.
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

// The generators of rand, ulid and fastrand: each call hands out fresh randomness or a fresh id,
// and a seeded generator kept in the state advances on every delivery, so it is a minter as a
// parameter too. Each major release's generators are other types, so each release has its
// feature, named after it.
macro_rules! minters {
    ($feature:literal: $($ty:ty),+ $(,)?) => {$(
        #[cfg(feature = $feature)]
        impl Minter for $ty {}
    )+};
}
minters!("rand-0_8":
    rand_0_8::rngs::ThreadRng,
    rand_0_8::rngs::StdRng,
    rand_0_8::rngs::SmallRng,
    rand_0_8::rngs::OsRng,
    dyn rand_0_8::RngCore,
    dyn rand_0_8::RngCore + Send,
    dyn rand_0_8::RngCore + Send + Sync,
);
minters!("rand-0_9":
    rand_0_9::rngs::ThreadRng,
    rand_0_9::rngs::StdRng,
    rand_0_9::rngs::SmallRng,
    rand_0_9::rngs::OsRng,
    dyn rand_0_9::RngCore,
    dyn rand_0_9::RngCore + Send,
    dyn rand_0_9::RngCore + Send + Sync,
);
// rand 0.10's core trait is `Rng` (rand_core's, formerly `RngCore`); the OS source is `SysRng`.
minters!("rand-0_10":
    rand_0_10::rngs::ThreadRng,
    rand_0_10::rngs::StdRng,
    rand_0_10::rngs::SmallRng,
    rand_0_10::rngs::Xoshiro128PlusPlus,
    rand_0_10::rngs::Xoshiro256PlusPlus,
    rand_0_10::rngs::ChaCha8Rng,
    rand_0_10::rngs::ChaCha12Rng,
    rand_0_10::rngs::ChaCha20Rng,
    rand_0_10::rngs::SysRng,
    dyn rand_0_10::Rng,
    dyn rand_0_10::Rng + Send,
    dyn rand_0_10::Rng + Send + Sync,
);
minters!("ulid-1": ulid_1::Generator);
minters!("ulid-2": ulid_2::Generator);
minters!("ulid-3": ulid_3::Generator);
minters!("fastrand-1": fastrand_1::Rng);
minters!("fastrand-2": fastrand_2::Rng);
// uuid's v7 context counts within a millisecond of the clock (present with the outbox stores).
impl Minter for uuid::ContextV7 {}

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

    impl<T: ?Sized> AckHandleParameter<T> {
        /// What a transport crate's own probe of its client's handles returns for one.
        pub const NEW: Self = AckHandleParameter(PhantomData);
    }
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

    /// The probe of a client's own acknowledgement handles, which a transport's crate marks
    /// (lapin's `Acker` in delivery-rabbitmq): here none is marked; the `delivery` facade names
    /// the transports' probes under their features.
    pub mod no_transport {
        use super::{AckHandleParameter, Allowed, Probe};

        pub trait TransportAckSpecific<T: ?Sized> {
            fn transport_ack_probe(&self) -> AckHandleParameter<T>;
        }
        pub trait TransportAckFallback {
            fn transport_ack_probe(&self) -> Allowed {
                Allowed
            }
        }
        impl<T: ?Sized> TransportAckFallback for &Probe<T> {}
    }

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

#[cfg(test)]
mod tests {
    use super::Minter;

    fn minter<T: Minter + ?Sized>() {}

    /// The thread-local generators, which no UI case can hold in a `State` (they are not `Send`).
    #[test]
    fn thread_rngs_are_minters() {
        #[cfg(feature = "rand-0_8")]
        minter::<rand_0_8::rngs::ThreadRng>();
        #[cfg(feature = "rand-0_9")]
        minter::<rand_0_9::rngs::ThreadRng>();
        #[cfg(feature = "rand-0_10")]
        minter::<rand_0_10::rngs::ThreadRng>();
    }
}
