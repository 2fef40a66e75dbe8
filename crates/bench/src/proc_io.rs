//! Bytes this process has written, from `/proc/self/io`.
//!
//! `wchar` counts every byte passed to `write`-family system calls (whether or not it reached
//! the disk yet), across all threads. During a scenario nearly all of them are the journal's WAL
//! frames, so the difference between two readings, per commit, is the pages a commit wrote.

/// The size of one WAL frame: a default 4,096-byte page plus its 24-byte frame header.
pub const WAL_FRAME_BYTES: u64 = 4096 + 24;

/// Bytes written by this process so far; `None` when `/proc` does not say.
pub fn written_bytes() -> Option<u64> {
    let io = std::fs::read_to_string("/proc/self/io").ok()?;
    let line = io.lines().find(|line| line.starts_with("wchar:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
