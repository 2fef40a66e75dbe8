//! What a scenario measured, and how it is printed: one human table row (plus notes) and
//! exactly one machine-readable `bench ...` line.

use std::time::Duration;

use durably::Durability;

use crate::stats::Samples;

/// What one scenario measured.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Operations completed (steps, unless the scenario says otherwise).
    pub ops: u64,
    /// The time they took.
    pub elapsed: Duration,
    /// One latency per operation.
    pub latencies: Samples,
    /// Extra findings, printed under the row.
    pub notes: Vec<String>,
    /// A peak RSS measured elsewhere (in worker processes), in KiB, when it is larger than
    /// this process's own.
    pub peak_rss_kib_elsewhere: Option<u64>,
}

impl Outcome {
    /// Operations per second.
    pub fn ops_per_s(&self) -> f64 {
        let seconds = self.elapsed.as_secs_f64();
        if seconds > 0.0 {
            self.ops as f64 / seconds
        } else {
            0.0
        }
    }
}

/// A finished scenario, ready to print.
#[derive(Debug)]
pub struct Row<'a> {
    /// The scenario's name, as `--scenario` spells it.
    pub scenario: &'a str,
    /// The baseline's backend, `sqlite` or `postgres`: the `ratio_vs_` key of the line.
    pub baseline_backend: &'a str,
    /// The baseline's commits per second, averaged from before and after the scenario.
    pub baseline_commits_per_s: f64,
    /// The scenario's measurements.
    pub outcome: Outcome,
    /// This process's peak RSS during the scenario, in KiB.
    pub peak_rss_kib: Option<u64>,
    /// The durability the scenario ran with.
    pub durability: Durability,
}

/// Prints the table header.
pub fn print_header() {
    println!("| scenario | ops/s | baseline commits/s | ratio | p50 µs | p99 µs | peak RSS MiB |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
}

impl Row<'_> {
    /// Prints the table row, its notes, and the machine-readable line.
    pub fn print(mut self) {
        let ops_per_s = self.outcome.ops_per_s();
        let ratio = if self.baseline_commits_per_s > 0.0 {
            ops_per_s / self.baseline_commits_per_s
        } else {
            0.0
        };
        let p50 = self.outcome.latencies.quantile_us(0.50);
        let p99 = self.outcome.latencies.quantile_us(0.99);
        let peak = match (self.peak_rss_kib, self.outcome.peak_rss_kib_elsewhere) {
            (Some(own), Some(other)) => Some(own.max(other)),
            (own, other) => own.or(other),
        };
        let peak_text = peak.map_or_else(
            || "n/a".to_owned(),
            |kib| format!("{:.1}", kib as f64 / 1024.0),
        );
        println!(
            "| {} | {ops_per_s:.0} | {:.0} | {ratio:.2} | {p50:.1} | {p99:.1} | {peak_text} |",
            self.scenario, self.baseline_commits_per_s
        );
        for note in &self.outcome.notes {
            println!("  - {note}");
        }
        println!(
            "bench {} ops_per_s={ops_per_s:.1} ratio_vs_{}={ratio:.3} p50_us={p50:.1} \
             p99_us={p99:.1} durability={} peak_rss_mib={peak_text}",
            self.scenario,
            self.baseline_backend,
            self.durability.as_str()
        );
    }
}
