//! Marker traits for the things a handler must never take: clocks, id minters and
//! acknowledgement handles. `#[consumer]` checks every parameter's type against them, which is
//! what catches a clock behind a type alias, a reference, `Arc`, `Box` or `State`.
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

use std::rc::Rc;
use std::sync::Arc;

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
    )*};
}
reach!(Clock, Minter, AckHandle);

#[cfg(feature = "lapin")]
impl AckHandle for lapin::acker::Acker {}
#[cfg(feature = "lapin")]
impl AckHandle for lapin::message::Delivery {}

/// Compile-time probes used by `#[consumer]`'s expansion. Not public API.
#[doc(hidden)]
pub mod probe {
    use std::marker::PhantomData;

    /// Carries a parameter's type to the checks (autoref specialization: the impl on `Probe<T>`
    /// with the marker bound wins over the one on `&Probe<T>` when the bound holds).
    pub struct Probe<T: ?Sized>(PhantomData<T>);

    impl<T: ?Sized> Probe<T> {
        pub const NEW: Self = Probe(PhantomData);
    }

    pub struct Found;
    pub struct Fine;

    macro_rules! probe {
        ($marker:ident, $specific:ident, $fallback:ident, $method:ident, $assert:ident, $not:ident,
         $message:literal, $label:literal, $note:literal) => {
            pub trait $specific {
                fn $method(&self) -> Found {
                    Found
                }
            }
            impl<T: super::$marker + ?Sized> $specific for Probe<T> {}
            pub trait $fallback {
                fn $method(&self) -> Fine {
                    Fine
                }
            }
            impl<T: ?Sized> $fallback for &Probe<T> {}

            #[diagnostic::on_unimplemented(message = $message, label = $label, note = $note)]
            pub trait $not {}
            impl $not for Fine {}
            pub fn $assert<T: $not>(_: T) {}
        };
    }

    probe!(Clock, ClockSpecific, ClockFallback, clock_probe, assert_not_clock, NotAClock,
        "a handler must not take a clock: every delivery would write a different time (rule 3)",
        "this parameter is a clock",
        "take the time from the unit (a field of the payload, its `Stamp`, a header) so a redelivery writes the same value; a clock read that writes nothing, like a latency metric, may use `#[consumer(allow_clock = \"why\")]`");
    probe!(Minter, MinterSpecific, MinterFallback, minter_probe, assert_not_minter, NotAMinter,
        "a handler must not take an id minter or a random source: every delivery would create a new record (rule 3)",
        "this parameter mints ids or randomness",
        "derive the id from the unit instead: its `UnitId`, an id in the payload, or `Uuid::new_v5(namespace, unit_id)`");
    probe!(AckHandle, AckSpecific, AckFallback, ack_probe, assert_not_ack_handle, NotAnAckHandle,
        "a handler must not take an acknowledgement handle: the runtime acknowledges after the effect (rule 1)",
        "this parameter can acknowledge the unit",
        "return `Ok(())` once the effect is committed and the runtime acknowledges; return an error and it returns or dead-letters the unit");
}
