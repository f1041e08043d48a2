//! The one pacing for everything this crate tries again that is not a unit: a source's reconnect,
//! a receive, a relayer's claim or mark, a republish. Each is a [`Retry`] over the same
//! [`Backoff`] units are returned with (a unit's own wait is [`Backoff::delay`], from its
//! identity, so that [`decide`](crate::decide) stays pure).
//!
//! A `Retry`'s jitter comes from a seed drawn once per `Retry` from the process's random hash
//! keys, never from the clock: replicas that lost the same broker at the same moment reconnect
//! spread out instead of in lock-step, and one `Retry`'s waits are reproducible from its seed.

use std::hash::{BuildHasher, RandomState};
use std::time::Duration;

use crate::disposition::Backoff;

/// The waits between attempts of one repeated operation: growing with the failures in a row,
/// jittered, reset by a success.
#[derive(Clone, Debug)]
pub struct Retry {
    backoff: Backoff,
    failures: u32,
    seed: u64,
}

impl Retry {
    /// Waits from `backoff`, jittered by a seed of this process's own.
    pub fn new(backoff: Backoff) -> Self {
        Retry {
            backoff,
            failures: 0,
            seed: RandomState::new().hash_one(0u8),
        }
    }

    /// Reconnecting to a broker, receiving, claiming: from 100 ms, doubling, to 6.4 s.
    pub fn reconnect() -> Self {
        Retry::new(Backoff::exponential(
            Duration::from_millis(100),
            Duration::from_millis(6400),
        ))
    }

    /// Records a failure and returns the wait before the next attempt.
    pub fn failed(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        self.backoff
            .wait(self.failures, self.seed.rotate_left(self.failures % 64))
    }

    /// Records a success: the next failure waits the shortest again.
    #[inline]
    pub fn succeeded(&mut self) {
        self.failures = 0;
    }

    /// Failures in a row so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_with_failures_within_half_and_all_of_the_exponential_wait() {
        let mut retry = Retry::reconnect();
        for n in 1..=10u32 {
            let wait = retry.failed();
            let full = Duration::from_millis(100 << (n - 1).min(6));
            assert!(
                wait >= full / 2 && wait <= full,
                "failure {n}: {wait:?} vs {full:?}"
            );
        }
        retry.succeeded();
        assert_eq!(retry.failures(), 0);
        assert!(retry.failed() <= Duration::from_millis(100));
    }

    #[test]
    fn two_retries_are_seeded_apart() {
        // Replicas of one process kind draw their own seeds: over a few failures their waits
        // differ somewhere (the chance of 8 equal jitters in a row is negligible).
        let (mut a, mut b) = (Retry::reconnect(), Retry::reconnect());
        let a: Vec<_> = (0..8).map(|_| a.failed()).collect();
        let b: Vec<_> = (0..8).map(|_| b.failed()).collect();
        assert_ne!(a, b);
    }
}
