//! What a transport provides the consumer runtime: a [`Source`] of units, and for each unit a
//! [`Settle`] handle with the mechanism's primitives (acknowledge, give back, copy to the dead
//! letter).
//!
//! Transports decide nothing: whether a unit is acknowledged, returned or dead-lettered is
//! [`decide`](crate::decide)'s answer, carried out in one place (`consumer::settle`), which alone
//! composes the primitives.
//!
//! This module is the one place a transport author reads: it re-exports what a transport is
//! written with from the files that define it.

pub use crate::source::{KeepAlive, Settle, Source};
pub use crate::transport_error::{
    ClientErrors, TransportError, TransportErrorKind, io_kind, kind_of,
};

// What a transport is written with, beside `Source` and `Settle`: the dead letter's stamp
// (`edit_headers` for an edited redrive), its depth gauge and its list cursors, and the pacing of
// reconnects.
pub use crate::dead_letter::cursor::parse as parse_cursor;
pub use crate::dead_letter::depth::record as record_depth;
pub use crate::dead_letter::edit_headers;
pub use crate::pace::Retry;
