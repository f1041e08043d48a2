//! What a run of a consumer did: [`Report`].

/// What a run of a consumer did, counted when it stops.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Report {
    /// Units acknowledged after their effect.
    pub acked: u64,
    /// Units returned for redelivery (failed, panicked, or unfinished at shutdown).
    pub returned: u64,
    /// Units moved to the dead letter.
    pub dead_lettered: u64,
    /// Units whose disposition the transport could not carry out (the broker redelivers them).
    pub settle_failed: u64,
}
