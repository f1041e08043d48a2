//! A log's declaration ([`LogConfig`]) and a unit's place in it ([`LogPosition`]).

use std::fmt;
use std::num::NonZeroU32;

use crate::memory::config::QueueConfig;

/// A log's declaration: its partitions, its delivery bound and its dead letter.
///
/// ```
/// use delivery::memory::LogConfig;
///
/// let config = LogConfig::default().partitions(6).max_deliveries(3).dead_letter("orders.dlq");
/// assert_eq!(config.partition_count().get(), 6);
/// assert_eq!(config.delivery_bound().get(), 3);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogConfig {
    pub(in crate::memory) partitions: NonZeroU32,
    pub(in crate::memory) max_deliveries: NonZeroU32,
    pub(in crate::memory) dead_letter: Option<String>,
}

impl LogConfig {
    /// The number of partitions (`0` is read as 1). The retry log has as many, and a returned
    /// unit stays on its partition's number.
    ///
    /// ```
    /// use delivery::memory::LogConfig;
    ///
    /// assert_eq!(LogConfig::default().partitions(0).partition_count().get(), 1);
    /// ```
    pub fn partitions(mut self, n: u32) -> Self {
        self.partitions = NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN);
        self
    }

    /// Units are delivered at most `n` times (`0` is read as 1), counting the count the unit
    /// carries; a unit that fails on its `n`th delivery is dead-lettered.
    ///
    /// ```
    /// use delivery::memory::LogConfig;
    ///
    /// assert_eq!(LogConfig::default().max_deliveries(2).delivery_bound().get(), 2);
    /// ```
    pub fn max_deliveries(mut self, n: u32) -> Self {
        self.max_deliveries = NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN);
        self
    }

    /// The dead letter's name. Defaults to `<topic>.dead-letter`.
    ///
    /// ```
    /// use delivery::memory::{LogConfig, MemoryBroker};
    ///
    /// let broker = MemoryBroker::new();
    /// broker.declare_log("orders", LogConfig::default().dead_letter("orders.dlq")).unwrap();
    /// assert_eq!(broker.dead_letters("orders").name(), "orders.dlq");
    /// ```
    pub fn dead_letter(mut self, name: impl Into<String>) -> Self {
        self.dead_letter = Some(name.into());
        self
    }

    /// The declared number of partitions.
    ///
    /// ```
    /// use delivery::memory::LogConfig;
    ///
    /// assert_eq!(LogConfig::default().partition_count().get(), 1);
    /// ```
    pub fn partition_count(&self) -> NonZeroU32 {
        self.partitions
    }

    /// The declared bound.
    ///
    /// ```
    /// use delivery::memory::LogConfig;
    /// use delivery::disposition::RedeliveryPolicy;
    ///
    /// assert_eq!(LogConfig::default().delivery_bound(), RedeliveryPolicy::DEFAULT_MAX_DELIVERIES);
    /// ```
    pub fn delivery_bound(&self) -> NonZeroU32 {
        self.max_deliveries
    }

    /// The queue under the log's name: where the dead-letter view finds the dead letter's name.
    pub(in crate::memory) fn queue(&self) -> QueueConfig {
        QueueConfig {
            max_deliveries: self.max_deliveries,
            dead_letter: self.dead_letter.clone(),
        }
    }
}

impl Default for LogConfig {
    /// One partition (the order of appends is the order of delivery), five deliveries, dead
    /// letter `<topic>.dead-letter`.
    fn default() -> Self {
        LogConfig {
            partitions: NonZeroU32::MIN,
            max_deliveries: crate::disposition::RedeliveryPolicy::DEFAULT_MAX_DELIVERIES,
            dead_letter: None,
        }
    }
}

/// Where an appended unit landed: its partition and its offset there.
///
/// ```
/// use delivery::memory::{LogPosition, MemoryBroker};
/// use delivery::Unit;
///
/// let broker = MemoryBroker::new();
/// assert_eq!(broker.append("orders", Unit::new("o-1", "{}")), LogPosition { partition: 0, offset: 0 });
/// assert_eq!(broker.append("orders", Unit::new("o-2", "{}")).offset, 1);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LogPosition {
    /// The partition, from 0.
    pub partition: u32,
    /// The offset within the partition, from 0.
    pub offset: u64,
}

impl fmt::Display for LogPosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.partition, self.offset)
    }
}
