//! Sinks: where a relay function sends a record, and the only makers of a [`Receipt`](super::Receipt).
//! Each sends under the record's own id and returns a receipt only once the receiver confirmed.

#[cfg(feature = "http")]
mod http;
#[cfg(feature = "kafka")]
mod kafka;
mod memory;
#[cfg(feature = "lapin")]
mod rabbitmq;

#[cfg(feature = "http")]
pub use http::*;
#[cfg(feature = "kafka")]
pub use kafka::*;
pub use memory::*;
#[cfg(feature = "lapin")]
pub use rabbitmq::*;
