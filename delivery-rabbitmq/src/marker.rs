//! lapin's acknowledgement handles (`Acker`, `Delivery`) refused as handler parameters (rule 1):
//! the runtime acknowledges after the effect. delivery-core cannot mark a client's types, so this
//! crate marks them and `#[consumer]` probes them through the `delivery` facade (feature `lapin`).

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::{Arc, Mutex, RwLock};

use delivery_core::extract::State;
use delivery_core::marker::probe::{AckHandleParameter, Allowed, Probe};

/// One of lapin's handles that can acknowledge or return a delivery.
pub trait LapinAckHandle {}

impl LapinAckHandle for lapin::Acker {}
impl LapinAckHandle for lapin::message::Delivery {}

// Behind a reference, a smart pointer, `State`, `Option` or a lock it is still one.
impl<T: LapinAckHandle + ?Sized> LapinAckHandle for &T {}
impl<T: LapinAckHandle + ?Sized> LapinAckHandle for &mut T {}
impl<T: LapinAckHandle + ?Sized> LapinAckHandle for Box<T> {}
impl<T: LapinAckHandle + ?Sized> LapinAckHandle for Arc<T> {}
impl<T: LapinAckHandle + ?Sized> LapinAckHandle for Rc<T> {}
impl<T: LapinAckHandle> LapinAckHandle for State<T> {}
impl<T: LapinAckHandle> LapinAckHandle for Option<T> {}
impl<T: LapinAckHandle + ?Sized> LapinAckHandle for Mutex<T> {}
impl<T: LapinAckHandle + ?Sized> LapinAckHandle for RwLock<T> {}
impl<T: LapinAckHandle + ?Sized> LapinAckHandle for RefCell<T> {}
impl<T: LapinAckHandle> LapinAckHandle for Cell<T> {}
impl<T: LapinAckHandle + ?Sized> LapinAckHandle for tokio::sync::Mutex<T> {}
impl<T: LapinAckHandle + ?Sized> LapinAckHandle for tokio::sync::RwLock<T> {}

/// `#[consumer]`'s probe (autoref specialization, as delivery-core's `marker::probe`): a lapin
/// handle yields an `AckHandleParameter`, which the check refuses with rule 1's message.
pub trait TransportAckSpecific<T: ?Sized> {
    /// The probed parameter is one of lapin's handles.
    fn transport_ack_probe(&self) -> AckHandleParameter<T> {
        AckHandleParameter::NEW
    }
}
impl<T: LapinAckHandle + ?Sized> TransportAckSpecific<T> for Probe<T> {}

/// The probe's fallback: anything else is allowed (as far as lapin is concerned).
pub trait TransportAckFallback {
    /// The probed parameter is not one of lapin's handles.
    fn transport_ack_probe(&self) -> Allowed {
        Allowed
    }
}
impl<T: ?Sized> TransportAckFallback for &Probe<T> {}
