//! The sending side (rule 6): an effect and the message announcing it are written in one
//! transaction to an outbox; a relay then hands each record, under its own id, to a relay function
//! that sends it through a sink, and marks it delivered only once the sink's [`Receipt`] proves
//! the receiver confirmed.

mod record;

pub use record::{
    Attempt, FromRecord, IntoAttempt, OutboxRecord, Receipt, Record, RecordId, Relay,
};

pub mod sink;
