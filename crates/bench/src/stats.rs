//! Latency samples and their percentiles, kept as a plain sorted `Vec` of nanoseconds.

use std::time::Duration;

/// Latency samples of one kind of operation.
#[derive(Debug, Default, Clone)]
pub struct Samples {
    nanos: Vec<u64>,
    sorted: bool,
}

impl Samples {
    /// An empty set with room for `capacity` samples.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            nanos: Vec::with_capacity(capacity),
            sorted: true,
        }
    }

    /// Records one latency.
    pub fn record(&mut self, latency: Duration) {
        self.nanos
            .push(u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX));
        self.sorted = false;
    }

    /// Adds every sample of `other`.
    pub fn merge(&mut self, other: &Self) {
        self.nanos.extend_from_slice(&other.nanos);
        self.sorted = false;
    }

    /// How many samples there are.
    pub fn len(&self) -> usize {
        self.nanos.len()
    }

    /// The `quantile` (0.0 to 1.0) in microseconds; 0 when there are no samples.
    pub fn quantile_us(&mut self, quantile: f64) -> f64 {
        if self.nanos.is_empty() {
            return 0.0;
        }
        if !self.sorted {
            self.nanos.sort_unstable();
            self.sorted = true;
        }
        let last = self.nanos.len() - 1;
        let index = ((quantile * self.nanos.len() as f64) as usize).min(last);
        self.nanos[index] as f64 / 1_000.0
    }

    /// The largest sample in microseconds; 0 when there are none.
    pub fn max_us(&self) -> f64 {
        self.nanos.iter().copied().max().unwrap_or(0) as f64 / 1_000.0
    }

    /// How many samples are longer than `limit`.
    pub fn count_over(&self, limit: Duration) -> usize {
        let limit = u64::try_from(limit.as_nanos()).unwrap_or(u64::MAX);
        self.nanos.iter().filter(|&&nanos| nanos > limit).count()
    }

    /// The samples in nanoseconds, for a worker to print to its parent. Nanoseconds, because a
    /// replayed step takes well under a microsecond.
    pub fn to_nanos_line(&self) -> String {
        let mut line = String::with_capacity(self.nanos.len() * 8);
        for nanos in &self.nanos {
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(&nanos.to_string());
        }
        line
    }

    /// Parses a line written by [`Samples::to_nanos_line`].
    pub fn from_nanos_line(line: &str) -> Option<Self> {
        let mut samples = Self::default();
        for word in line.split_whitespace() {
            let nanos: u64 = word.parse().ok()?;
            samples.record(Duration::from_nanos(nanos));
        }
        Some(samples)
    }
}
