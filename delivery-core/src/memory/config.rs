//! A queue's declaration: [`QueueConfig`].

use std::num::NonZeroU32;

/// A queue's declaration: its delivery bound and its dead-letter queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueConfig {
    pub(super) max_deliveries: NonZeroU32,
    pub(super) dead_letter: Option<String>,
}

impl QueueConfig {
    /// Units are delivered at most `n` times (`0` is read as 1); a unit returned after its `n`th
    /// delivery is dead-lettered by the broker.
    pub fn max_deliveries(mut self, n: u32) -> Self {
        self.max_deliveries = NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN);
        self
    }

    /// The dead-letter queue's name. Defaults to `<queue>.dead-letter`.
    pub fn dead_letter(mut self, queue: impl Into<String>) -> Self {
        self.dead_letter = Some(queue.into());
        self
    }

    /// The declared bound.
    pub fn delivery_bound(&self) -> NonZeroU32 {
        self.max_deliveries
    }
}

impl Default for QueueConfig {
    /// Five deliveries, dead letter `<queue>.dead-letter`.
    fn default() -> Self {
        QueueConfig {
            max_deliveries: crate::disposition::RedeliveryPolicy::DEFAULT_MAX_DELIVERIES,
            dead_letter: None,
        }
    }
}
