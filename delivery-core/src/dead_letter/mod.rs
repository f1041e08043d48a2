//! The dead letter as an operator sees it: one API over every transport (rule 2: "a dead letter an
//! operator can read and redrive").
//!
//! Every dead letter — a RabbitMQ dead-letter queue, a Redis dead-letter stream, a JetStream
//! dead-letter stream, a Kafka dead-letter topic, the in-memory broker's, an outbox store's dead
//! records — implements [`DeadLetters`]: count, list a page at a time, peek one unit by id,
//! redrive by id or all, purge by id. Each answers with the same [`DeadLetter`] record and the same
//! [`RedriveReport`], so an operator's tool (`examples/dlq.rs`) is written once.
//!
//! A redrive sends the unit back to where it came from **under its own id**, with its own payload
//! and headers (the `x-dead-letter-*` ones removed), so a handler idempotent by id treats it as the
//! unit it is (rule 3); the mechanism counts its deliveries afresh.
//!
//! An operator who must fix a unit before it can pass redrives it **edited**
//! ([`DeadLetters::redrive_edited`]): the same, with their payload in place of its own, and two
//! headers that keep the edit in the unit's history — [`EDITED`](crate::headers::EDITED) (`true`)
//! and [`ORIGINAL_SHA256`](crate::headers::ORIGINAL_SHA256) (the digest of the payload replaced).
//! A tool that picks its transport at run time holds any dead letter as an [`AnyDeadLetters`].
//!
//! For a transport's author: the consumer records why, from where and on which delivery a unit
//! was dead-lettered as its [`DeadLetterStamp`] headers, read back the same way; the redrive is
//! written once, [`redrive`] and [`redrive_edited`], over the dead letter's [`RedriveLog`] (read
//! a page, send one unit back, remove its copy).
//!
//! ```
//! use delivery::dead_letter::{DeadLetters, Selection};
//! use delivery::memory::{MemoryBroker, QueueConfig};
//! use delivery::{disposition::ReasonKind, Unit, UnitId};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), delivery::transport::TransportError> {
//! let broker = MemoryBroker::new();
//! broker.declare("orders", QueueConfig::default()).unwrap();
//! # #[delivery::consumer]
//! # async fn take(_n: delivery::Json<u32>) -> Result<(), delivery::HandlerError> { Ok(()) }
//! # broker.publish("orders", Unit::new("o-1", "not json"));
//! # delivery::Consumer::new(broker.consume("orders")).shutdown_on(broker.idle("orders")).run(take).await;
//! // ... a consumer dead-lettered `o-1` as malformed ...
//! let dead = broker.dead_letters("orders");
//! assert_eq!(DeadLetters::count(&dead).await?, 1);
//! let page = DeadLetters::list(&dead, 10, None).await?;
//! assert_eq!(page.records[0].reason, Some(ReasonKind::Malformed));
//! let report = DeadLetters::redrive(&dead, Selection::Ids(&[UnitId::new("o-1")])).await?;
//! assert_eq!(report.redriven, [UnitId::new("o-1")]);
//! assert_eq!(broker.depth("orders"), 1);
//! # Ok(()) }
//! ```

mod any;
mod api;
pub(crate) mod cursor;
pub(crate) mod depth;
mod redrive;
mod stamp;

pub use self::any::AnyDeadLetters;
pub(crate) use self::api::edited;
pub use self::api::{
    Cursor, DeadLetter, DeadLetters, Listing, RedriveReport, Selection, edit_headers,
};
pub use self::redrive::{Page, RedriveLog, Republished, redrive, redrive_edited};
pub use self::stamp::DeadLetterStamp;
