//! The bounded torture runs CI makes (`tests/tests/torture_bounded.rs` on SQLite,
//! `torture_pg_bounded.rs` on PostgreSQL): run the `torture` binary and hold its summary line
//! to every invariant the checker counts.

use std::process::Command;

/// The summary line's violation figures ([`super::checker::Report::passed`]): each must be 0.
pub const VIOLATIONS: &[&str] = &[
    "duplicated",
    "lost",
    "unexpected",
    "stuck",
    "reopened",
    "leaked_locks",
    "over_limit",
    "wrong_end",
    "bad_messages",
    "after_cancel",
    "early_wakes",
    "child_dups",
    "patch_flips",
    "fork_reruns",
];

/// The figure `name=` of the summary line `line`; panics, failing the test, when it has none.
pub fn field(line: &str, name: &str) -> u64 {
    line.split(' ')
        .find_map(|field| field.strip_prefix(name)?.strip_prefix('='))
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no {name}= in {line}"))
}

/// Runs the torture binary `binary` with `args` (its `--iterations` being `iterations`) and
/// returns its summary line, after asserting that it exited 0, that the line is the summary of
/// that many iterations, that every violation figure is 0 and that its integrity is
/// `integrity` (`ok` on SQLite, `n/a` on PostgreSQL).
pub fn run_clean(binary: &str, args: &[String], iterations: u64, integrity: &str) -> String {
    let output = Command::new(binary)
        .args(args)
        .env_remove("FAILPOINTS")
        .output()
        .unwrap_or_else(|error| panic!("cannot run {binary}: {error}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last = stdout.lines().last().unwrap_or_default().to_owned();
    eprintln!("{last}");
    assert!(
        output.status.success(),
        "torture failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        last.starts_with(&format!("torture: iterations={iterations} ")),
        "{last}"
    );
    for violation in VIOLATIONS {
        assert_eq!(field(&last, violation), 0, "{violation} in {last}");
    }
    assert!(
        last.contains(&format!(" integrity={integrity} ")),
        "integrity={integrity} in {last}"
    );
    last
}
