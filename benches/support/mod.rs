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
pub fn rates(runs: &[Run]) -> String {
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
