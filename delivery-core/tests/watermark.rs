//! The offset watermark (rule 1): no offset is committed past a unit whose disposition is not
//! final, every unit below the committable offset is final, and the offset never goes back.

use std::collections::BTreeSet;

use delivery_core::offset::{OffsetError, Watermark, Watermarks};
use proptest::prelude::*;

/// What the watermark must say, from the model: one past the last final unit of the contiguous
/// run of final tracked units; `None` when the first tracked unit is not final.
fn expected(tracked: &[u64], finished: &BTreeSet<u64>) -> Option<u64> {
    tracked
        .iter()
        .take_while(|offset| finished.contains(offset))
        .last()
        .map(|last| last + 1)
}

/// Checks every invariant against the model; `previous` is the committable offset before.
fn check(
    watermark: &Watermark,
    tracked: &[u64],
    finished: &BTreeSet<u64>,
    previous: Option<u64>,
) -> Result<(), TestCaseError> {
    let committable = watermark.committable();
    if let Some(next) = committable {
        for offset in tracked.iter().filter(|&&offset| offset < next) {
            prop_assert!(
                finished.contains(offset),
                "committable {next} passes unfinished unit {offset}"
            );
        }
        prop_assert!(
            finished.contains(&(next - 1)),
            "committable {next} is not one past a final unit"
        );
    }
    prop_assert!(
        committable >= previous,
        "went back: {previous:?} -> {committable:?}"
    );
    prop_assert_eq!(committable, expected(tracked, finished));
    prop_assert_eq!(watermark.pending(), tracked.len() - finished.len());
    Ok(())
}

/// Units as (gap before it, failed): offsets increase with gaps of 1..=4.
fn units(most: usize) -> impl Strategy<Value = Vec<(u64, bool)>> {
    prop::collection::vec((1u64..=4, prop::bool::weighted(0.2)), 1..most)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Tracking and finishing interleaved at random; failed units are finished only late (once
    /// every unit is received), the others in a random order.
    #[test]
    fn never_commits_past_a_unit_not_final(
        start in 0u64..1_000,
        units in units(60),
        steps in prop::collection::vec(any::<usize>(), 0..200),
        finish_order in prop::collection::vec(any::<usize>(), 60),
    ) {
        interleaved(start, units, steps, finish_order)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The same with hundreds of units, so that final units pile up behind failed ones and the
    /// watermark collapses them into runs (it does past 64 more than three per unit not final):
    /// the invariants hold across every collapse, and a unit finished twice is still refused.
    #[test]
    fn never_commits_past_a_unit_not_final_when_runs_collapse(
        start in 0u64..1_000,
        units in units(700),
        steps in prop::collection::vec(any::<usize>(), 0..1_500),
        finish_order in prop::collection::vec(any::<usize>(), 700),
    ) {
        interleaved(start, units, steps, finish_order)?;
    }
}

/// One case of the interleaving properties above.
fn interleaved(
    start: u64,
    units: Vec<(u64, bool)>,
    steps: Vec<usize>,
    finish_order: Vec<usize>,
) -> Result<(), TestCaseError> {
    {
        let mut offsets = Vec::with_capacity(units.len());
        let mut offset = start;
        for (gap, _) in &units {
            offsets.push(offset);
            offset += gap;
        }
        let failed: BTreeSet<u64> = offsets
            .iter()
            .zip(&units)
            .filter(|(_, (_, failed))| *failed)
            .map(|(offset, _)| *offset)
            .collect();

        let mut watermark = Watermark::new();
        let mut tracked: Vec<u64> = Vec::new();
        let mut finished = BTreeSet::new();
        let mut previous = None;

        for step in steps {
            let all_tracked = tracked.len() == offsets.len();
            // Failed units are not finishable until every unit is received: they hold the
            // watermark meanwhile, while the units after them finish.
            let finishable: Vec<u64> = tracked
                .iter()
                .copied()
                .filter(|offset| !finished.contains(offset))
                .filter(|offset| all_tracked || !failed.contains(offset))
                .collect();
            if !all_tracked && (step % 3 == 0 || finishable.is_empty()) {
                let offset = offsets[tracked.len()];
                watermark
                    .track(offset)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                tracked.push(offset);
            } else if !finishable.is_empty() {
                let offset = finishable[step % finishable.len()];
                watermark
                    .finish(offset)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                finished.insert(offset);
            }
            check(&watermark, &tracked, &finished, previous)?;
            previous = watermark.committable();

            // Outside input: a gap, a unit finished twice, an offset going back: refused.
            if let Some(&last) = tracked.last() {
                prop_assert!(watermark.finish(last + 1).is_err());
                prop_assert_eq!(
                    watermark.track(last),
                    Err(OffsetError::NotIncreasing { offset: last, last })
                );
            }
            if let Some(&done) = finished.iter().next_back() {
                prop_assert!(watermark.finish(done).is_err());
            }
            check(&watermark, &tracked, &finished, previous)?;
        }

        // Receive the rest, then finish everything left in a random order, failed units last.
        for &offset in &offsets[tracked.len()..] {
            watermark
                .track(offset)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            tracked.push(offset);
            check(&watermark, &tracked, &finished, previous)?;
        }
        let mut rest: Vec<u64> = tracked
            .iter()
            .copied()
            .filter(|offset| !finished.contains(offset))
            .collect();
        rest.sort_by_key(|offset| failed.contains(offset));
        let mut order = finish_order.into_iter();
        while !rest.is_empty() {
            let ok = rest
                .iter()
                .take_while(|offset| !failed.contains(offset))
                .count();
            let pick = order.next().unwrap_or(0) % if ok > 0 { ok } else { rest.len() };
            let offset = rest.remove(pick);
            watermark
                .finish(offset)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            finished.insert(offset);
            check(&watermark, &tracked, &finished, previous)?;
            previous = watermark.committable();
        }

        prop_assert_eq!(watermark.pending(), 0);
        prop_assert_eq!(
            watermark.committable(),
            Some(offsets[offsets.len() - 1] + 1)
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Several partitions at once: each watermark only answers for its own partition; the batch
    /// holds exactly the partitions that advanced since their last confirmed commit; a revoked
    /// partition's units are never committed.
    #[test]
    fn partitions_are_independent(
        ops in prop::collection::vec((0i32..4, 0u8..10, any::<usize>()), 1..300),
    ) {
        let mut watermarks = Watermarks::new();
        let mut next_offset = [0u64; 4];
        let mut in_flight: [Vec<u64>; 4] = Default::default();
        let mut confirmed: [Option<u64>; 4] = [None; 4];
        for (partition, kind, pick) in ops {
            let p = partition as usize;
            match kind {
                0..=3 => {
                    watermarks.track(partition, next_offset[p]).unwrap();
                    in_flight[p].push(next_offset[p]);
                    next_offset[p] += 1 + (pick as u64 % 3);
                }
                4..=6 if !in_flight[p].is_empty() => {
                    let offset = in_flight[p].remove(pick % in_flight[p].len());
                    watermarks.finish(&partition, offset).unwrap();
                }
                7 => {
                    let batch = watermarks.uncommitted();
                    for &(partition, offset) in &batch {
                        let p = partition as usize;
                        // A commit never passes a unit still in flight, and only advances.
                        prop_assert!(in_flight[p].iter().all(|&unit| unit >= offset));
                        prop_assert!(confirmed[p].is_none_or(|done| offset > done));
                        watermarks.committed(&partition, offset);
                        confirmed[p] = Some(offset);
                    }
                    prop_assert!(watermarks.uncommitted().is_empty());
                }
                8 => {
                    let owed = watermarks.revoke(&partition);
                    if let Some(offset) = owed {
                        prop_assert!(in_flight[p].iter().all(|&unit| unit >= offset));
                    }
                    // Its units in flight go to the new owner: finishing one is refused.
                    if let Some(&offset) = in_flight[p].first() {
                        prop_assert_eq!(
                            watermarks.finish(&partition, offset),
                            Err(OffsetError::NotAssigned { offset })
                        );
                    }
                    // Reassigned later, it starts again from the committed offset.
                    in_flight[p].clear();
                    confirmed[p] = None;
                    next_offset[p] = owed.unwrap_or(next_offset[p]);
                }
                _ => {}
            }
            prop_assert_eq!(
                watermarks.pending(),
                in_flight.iter().map(Vec::len).sum::<usize>()
            );
        }
    }
}

/// Issue 7's example: a failed unit at offset k with successes after it. The committable offset
/// stays at k until the unit is dead-lettered (its disposition final), then jumps past the
/// successes.
#[test]
fn failed_unit_holds_the_watermark_until_final() {
    let k = 103;
    let mut watermark = Watermark::new();
    for offset in 100..110 {
        watermark.track(offset).unwrap();
    }
    for offset in (100..110).filter(|&offset| offset != k) {
        watermark.finish(offset).unwrap();
        assert!(watermark.committable() <= Some(k));
    }
    assert_eq!(watermark.committable(), Some(k));
    assert_eq!(watermark.pending(), 1);

    watermark.finish(k).unwrap(); // moved to the dead letter, confirmed
    assert_eq!(watermark.committable(), Some(110));
    assert_eq!(watermark.pending(), 0);
}

/// The same when the failed unit is the first one received: nothing may be committed at all.
#[test]
fn failed_first_unit_holds_everything() {
    let mut watermark = Watermark::new();
    for offset in [0, 2, 5] {
        watermark.track(offset).unwrap();
    }
    watermark.finish(5).unwrap();
    watermark.finish(2).unwrap();
    assert_eq!(watermark.committable(), None);
    watermark.finish(0).unwrap();
    assert_eq!(watermark.committable(), Some(6));
}

/// A gap is not a hole: offsets never tracked (compaction, transaction markers) hold nothing.
#[test]
fn gaps_hold_nothing() {
    let mut watermark = Watermark::new();
    watermark.track(10).unwrap();
    watermark.track(20).unwrap();
    watermark.finish(10).unwrap();
    assert_eq!(watermark.committable(), Some(11));
    assert_eq!(
        watermark.finish(15),
        Err(OffsetError::NotTracked { offset: 15 })
    );
    watermark.finish(20).unwrap();
    assert_eq!(watermark.committable(), Some(21));
}

/// Outside input is refused with an error value, and the watermark is unchanged by it.
#[test]
fn wrong_offsets_are_refused_not_panicked_on() {
    let mut watermark = Watermark::new();
    assert_eq!(
        watermark.finish(0),
        Err(OffsetError::NotTracked { offset: 0 })
    );
    watermark.track(1).unwrap();
    watermark.track(2).unwrap();
    watermark.finish(2).unwrap();
    assert_eq!(
        watermark.finish(2),
        Err(OffsetError::AlreadyFinal { offset: 2 })
    );
    assert_eq!(
        watermark.track(2),
        Err(OffsetError::NotIncreasing { offset: 2, last: 2 })
    );
    assert_eq!(watermark.committable(), None);
    assert_eq!(watermark.pending(), 1);
    watermark.finish(1).unwrap();
    assert_eq!(
        watermark.finish(1),
        Err(OffsetError::NotTracked { offset: 1 })
    );
    assert_eq!(watermark.committable(), Some(3));
}

/// A failed unit holds its own partition only; the other partitions' commits keep flowing, and
/// a failed commit (never confirmed) is carried again by the next batch.
#[test]
fn other_partitions_keep_flowing() {
    let mut watermarks = Watermarks::new();
    watermarks.track(0, 50).unwrap(); // fails
    watermarks.track(0, 51).unwrap();
    watermarks.track(1, 7).unwrap();
    watermarks.finish(&0, 51).unwrap();
    watermarks.finish(&1, 7).unwrap();
    assert_eq!(watermarks.uncommitted(), vec![(1, 8)]);

    // The commit failed: nothing confirmed, the next batch carries it again.
    watermarks.track(1, 8).unwrap();
    watermarks.finish(&1, 8).unwrap();
    assert_eq!(watermarks.uncommitted(), vec![(1, 9)]);
    watermarks.committed(&1, 9);
    assert!(watermarks.uncommitted().is_empty());

    watermarks.finish(&0, 50).unwrap(); // retried out, confirmed
    assert_eq!(watermarks.uncommitted(), vec![(0, 52)]);
}

/// Revocation drops the partition: its units in flight are never committed, and what was final
/// before them is returned to be committed before the partition is given up.
#[test]
fn revoke_owes_only_what_is_final() {
    let mut watermarks: Watermarks<(String, i32)> = Watermarks::new();
    let orders = ("orders".to_owned(), 0);
    watermarks.track(orders.clone(), 0).unwrap();
    watermarks.track(orders.clone(), 1).unwrap();
    watermarks.track(orders.clone(), 2).unwrap();
    watermarks.finish(&orders, 0).unwrap();
    watermarks.finish(&orders, 2).unwrap();
    assert_eq!(watermarks.revoke(&orders), Some(1));
    assert_eq!(watermarks.revoke(&orders), None);
    assert_eq!(
        watermarks.finish(&orders, 1),
        Err(OffsetError::NotAssigned { offset: 1 })
    );
    assert!(watermarks.uncommitted().is_empty());
    assert_eq!(watermarks.pending(), 0);
}

/// Issue 34, item 10: one unit that never finishes (a hung handler) while a million after it
/// finish. The watermark holds at the stuck unit, and its memory stays bounded: it keeps the units
/// not final (and at most one entry per run of final units between them), not every unit that
/// finished behind the stuck one.
#[test]
fn one_stuck_unit_keeps_memory_bounded() {
    let mut watermark = Watermark::new();
    watermark.track(0).unwrap(); // hangs
    let mut most_held = 0;
    // Eight in flight at a time behind it, finished out of order, as a consumer's concurrency does.
    let mut in_flight = std::collections::VecDeque::new();
    for offset in 1..=1_000_000u64 {
        watermark.track(offset).unwrap();
        in_flight.push_back(offset);
        if in_flight.len() == 8 {
            // The newest first, then the oldest: never in offset order.
            let newest = in_flight.pop_back().unwrap();
            watermark.finish(newest).unwrap();
            let oldest = in_flight.pop_front().unwrap();
            watermark.finish(oldest).unwrap();
        }
        most_held = most_held.max(watermark.held());
    }
    assert_eq!(watermark.committable(), None, "the stuck unit holds it");
    assert_eq!(watermark.pending(), 1 + in_flight.len());
    assert!(
        most_held < 1_024,
        "held up to {most_held} entries for {} units not final",
        1 + in_flight.len()
    );
    // Finished twice, behind the stuck unit: still refused as such.
    assert!(!in_flight.contains(&500_000));
    assert_eq!(
        watermark.finish(500_000),
        Err(OffsetError::AlreadyFinal { offset: 500_000 })
    );
    assert!(watermark.finish(17).is_err());
    for offset in in_flight {
        watermark.finish(offset).unwrap();
    }
    assert_eq!(watermark.committable(), None);
    watermark.finish(0).unwrap();
    assert_eq!(watermark.committable(), Some(1_000_001));
    assert_eq!(watermark.pending(), 0);
    assert!(watermark.held() < 1_024);
}
