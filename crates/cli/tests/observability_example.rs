//! The `observability` example, as a user runs it: it finishes by itself, its stdout holds
//! durably's spans (fire > execution > step, and the writer's batches, with their fields) and
//! every metric a run of a scheduled workflow records, and it never holds a payload: the
//! address the workflow looks up is journaled, not traced or counted.
//!
//! The example binary is built by `cargo test --workspace` (examples are built with the tests);
//! run alone, build it first with `cargo build -p durably --example observability`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;

use common::example;

/// A value the example's workflow returns from a step: a payload.
const PAYLOAD: &str = "12 Payload Lane";

#[test]
fn the_example_prints_spans_and_metrics_and_no_payload() {
    let output = Command::new(example::binary("observability"))
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8(output.stdout).unwrap();

    // The spans nest: a step's line names its execution and the fire that started it.
    let step_line = stdout
        .lines()
        .find(|line| line.contains("durably.step{") && line.contains("\"send invoice\""))
        .unwrap_or_else(|| panic!("no span of the guarded step:\n{stdout}"));
    let fire = step_line.find("durably.fire{").expect(step_line);
    let execution = step_line.find("durably.execution{").expect(step_line);
    let step = step_line.find("durably.step{").expect(step_line);
    assert!(fire < execution && execution < step, "{step_line}");
    for field in [
        "fire_id=",
        "schedule=\"nightly\"",
        "kind=\"nightly-invoice\"",
        "seq=2",
        "effect=\"guarded\"",
        "policy=\"retry\"",
        "attempt=1",
        "outcome=\"done\"",
    ] {
        assert!(step_line.contains(field), "{field} missing in {step_line}");
    }
    assert!(stdout.contains("durably.writer.batch{size="), "{stdout}");

    for metric in [
        "durably_steps_total{",
        "durably_step_duration_seconds",
        "durably_runs_started_total{",
        "durably_runs_ended_total{",
        "durably_writer_commits_total{",
        "durably_writer_batch_requests",
        "durably_writer_commit_duration_seconds",
        "durably_writer_fsync_duration_seconds",
        "durably_writer_queue_depth",
        "durably_runtime_runs",
        "durably_executions{",
        "durably_queue_depth{",
        "durably_scheduler_fires_total{outcome=\"started\"} 1",
    ] {
        assert!(stdout.contains(metric), "{metric} missing:\n{stdout}");
    }
    assert!(
        !stdout.contains(PAYLOAD),
        "a payload was printed:\n{stdout}"
    );
    assert!(!String::from_utf8_lossy(&output.stderr).contains(PAYLOAD));
}
