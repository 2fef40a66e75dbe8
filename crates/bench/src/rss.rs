//! Peak resident memory of this process, from `/proc/self/status`.
//!
//! `VmHWM` is process-wide: it covers every thread, including the journal's writer and the
//! tokio workers. Writing 5 to `/proc/self/clear_refs` resets it, so each scenario reports its
//! own peak.

/// Resets the peak-RSS high-water mark; best effort (some kernels refuse it).
pub fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// The peak RSS since the last reset, in KiB; `None` when `/proc` does not say.
pub fn peak_kib() -> Option<u64> {
    status_field("VmHWM:")
}

/// The current RSS in KiB.
pub fn current_kib() -> Option<u64> {
    status_field("VmRSS:")
}

fn status_field(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
