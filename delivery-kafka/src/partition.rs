//! Where a unit sits: which of the consumer's two logs, which partition of it, which offset of
//! which assignment.

/// Which of the consumer's two logs a partition belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Log {
    Source,
    Retry,
}

/// A partition of one of the two logs: the watermarks' key.
pub(crate) type Partition = (Log, i32);

/// Where a handle's unit sits in the watermarks.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tracked {
    pub(crate) partition: Partition,
    pub(crate) offset: u64,
    pub(crate) generation: u64,
}
