//! What the benchmarks share: a run's rate and CPU time, the median, settings from the
//! environment.
// Each benchmark is its own crate and uses part of this.
#![allow(dead_code)]

use std::future::Future;
use std::time::{Duration, Instant};

/// A run's units per second and the process's CPU time per unit, in microseconds.
#[derive(Clone, Copy, Debug)]
pub struct Run {
    pub rate: f64,
    pub cpu_us: f64,
}

/// The CPU time this process's threads have used so far (the first field of each thread's
/// `/proc/self/task/*/schedstat`, in nanoseconds; the runtime's threads live as long as the
/// bench); `None` where that is not readable.
pub fn cpu_time() -> Option<Duration> {
    let mut total = 0u64;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let stat = std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
        total += stat.split(' ').next()?.parse::<u64>().ok()?;
    }
    Some(Duration::from_nanos(total))
}

/// Measures `consume`, which must consume all `n` units.
pub async fn measure<F: Future<Output = ()>>(n: u64, consume: F) -> Run {
    let (cpu_before, start) = (cpu_time(), Instant::now());
    consume.await;
    let elapsed = start.elapsed();
    let cpu = match (cpu_before, cpu_time()) {
        (Some(before), Some(after)) => (after - before).as_secs_f64(),
        _ => f64::NAN,
    };
    Run {
        rate: n as f64 / elapsed.as_secs_f64(),
        cpu_us: cpu * 1e6 / n as f64,
    }
}

/// The runs' rates, for printing.
fn rates(runs: &[Run]) -> String {
    runs.iter()
        .map(|r| format!("{:.0}", r.rate))
        .collect::<Vec<_>>()
        .join(", ")
}

pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// A setting from the environment, or its default.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Whether the case at `concurrency` runs: all do, unless `BENCH_CONCURRENCY` names one.
pub fn selected(concurrency: usize) -> bool {
    std::env::var("BENCH_CONCURRENCY").map_or(true, |c| c == concurrency.to_string())
}

/// Runs each side `rounds` times, interleaved, the side going first alternating, so that a drift
/// of the machine's load favours neither. `BENCH_ONLY=hand` or `BENCH_ONLY=delivery` runs one
/// side only (for profiling). Returns the hand-written side's runs and ours.
pub async fn interleaved(
    rounds: usize,
    mut hand: impl AsyncFnMut() -> Run,
    mut ours: impl AsyncFnMut() -> Run,
) -> (Vec<Run>, Vec<Run>) {
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    let (mut hand_runs, mut our_runs) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        for side in if round % 2 == 0 { [0, 1] } else { [1, 0] } {
            if side == 0 && only != "delivery" {
                hand_runs.push(hand().await);
            }
            if side == 1 && only != "hand" {
                our_runs.push(ours().await);
            }
        }
    }
    (hand_runs, our_runs)
}

/// Prints every run; then, when both sides ran, the median rates and their ratio, the median of
/// the rounds' ratios (a round's two runs ran back to back, under about the same load), and the
/// median CPU time per unit. `what` describes the work (`20000 units`), `client` the raw client.
pub fn report(label: &str, what: &str, client: &str, hand: &[Run], ours: &[Run]) {
    println!(
        "{label}: runs hand-written [{}], delivery [{}]",
        rates(hand),
        rates(ours)
    );
    if hand.is_empty() || ours.is_empty() {
        return;
    }
    let rate = |runs: &[Run]| median(runs.iter().map(|r| r.rate).collect());
    let cpu = |runs: &[Run]| median(runs.iter().map(|r| r.cpu_us).collect());
    let (hand_rate, ours_rate) = (rate(hand), rate(ours));
    let paired = median(
        hand.iter()
            .zip(ours)
            .map(|(h, o)| o.rate / h.rate)
            .collect(),
    );
    println!(
        "{label}: {what}; hand-written {client} {hand_rate:.0}/s, delivery {ours_rate:.0}/s, ratio {:.3} (median of the rounds' ratios {paired:.3})",
        ours_rate / hand_rate
    );
    println!(
        "{label}: client CPU per unit (median) hand-written {:.1} µs, delivery {:.1} µs",
        cpu(hand),
        cpu(ours)
    );
}

/// Prints the median rate of `batches` against `per_unit`'s, delivery's per-unit handler: the
/// gain of the batch handler.
pub fn batch_against_per_unit(per_unit: &[Run], batches: &[Run]) {
    if per_unit.is_empty() || batches.is_empty() {
        return;
    }
    let rate = |runs: &[Run]| median(runs.iter().map(|r| r.rate).collect());
    println!(
        "batches against delivery's per-unit handler: {:.0}/s against {:.0}/s, {:.2}x",
        rate(batches),
        rate(per_unit),
        rate(batches) / rate(per_unit)
    );
}
