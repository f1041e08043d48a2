//! What the source, its handles, its commit task and its keeper task share.

use std::num::NonZeroU32;
use std::sync::Arc;

use rdkafka::consumer::StreamConsumer;
use rdkafka::producer::FutureProducer;

use crate::book::{Book, Context};
use crate::keeper::Keeper;

/// What the source, its handles and its commit task share.
pub(crate) struct Shared {
    pub(crate) consumer: StreamConsumer<Context>,
    pub(crate) producer: FutureProducer,
    pub(crate) book: Arc<Book>,
    pub(crate) retry_topic: Arc<str>,
    pub(crate) dead_letter_topic: Arc<str>,
    pub(crate) bound: NonZeroU32,
    /// Polls the consumer while the runtime is not asking for units (see [`crate::keeper`]).
    pub(crate) keeper: Keeper,
}
