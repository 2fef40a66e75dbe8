//! Shared helpers of the CLI tests: running the built binary, and journals built through the
//! library with one execution in each interesting state.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use durably::{Execution, Journal, Opened, Policy, StepError};
use uuid::Uuid;

pub mod example;

/// A name with a terminal escape sequence, to prove the tool escapes stored text.
pub const EVIL_NAME: &str = "evil \u{1b}[31mred\u{1b}[0m name";

/// Runs `durably ARGS` with no `DURABLY_DB` in the environment.
pub fn durably(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_durably"))
        .args(args)
        .env_remove("DURABLY_DB")
        .output()
        .expect("the durably binary runs")
}

/// Runs `durably ARGS` as [`durably`] does, but kills it and fails the test if it has not
/// exited after `max`: for commands that a bug would make run forever.
pub fn durably_within(args: &[&str], max: Duration) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_durably"))
        .args(args)
        .env_remove("DURABLY_DB")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the durably binary runs");
    let deadline = std::time::Instant::now() + max;
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("durably {args:?} was still running after {max:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// The names in `dir`, sorted.
pub fn entries(dir: &Path) -> Vec<String> {
    let names = std::fs::read_dir(dir).unwrap();
    let names = names.map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned());
    let sorted: std::collections::BTreeSet<String> = names.collect();
    sorted.into_iter().collect()
}

/// The commands that only read, each with the arguments it needs on `fixture`.
pub fn reading_commands(fixture: &Fixture) -> Vec<Vec<String>> {
    let ambiguous = fixture.ambiguous.to_string();
    [
        vec!["ls"],
        vec!["show", ambiguous.as_str()],
        vec!["show", ambiguous.as_str(), "--limit", "1", "--after", "0"],
        vec!["show", ambiguous.as_str(), "--events-after", "1"],
        vec!["locks"],
        vec!["fires"],
        vec!["sweep", "--dry-run"],
    ]
    .iter()
    .map(|command| command.iter().map(|word| (*word).to_owned()).collect())
    .collect()
}

/// Runs `durably --db DB COMMAND...` with `extra` arguments in front.
pub fn on(db: &Path, extra: &[&str], command: &[String]) -> Output {
    let mut args: Vec<&str> = extra.to_vec();
    args.extend(["--db", db.to_str().unwrap()]);
    args.extend(command.iter().map(String::as_str));
    durably(&args)
}

/// Standard output as text.
pub fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).expect("stdout is UTF-8")
}

/// Standard error as text.
pub fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).expect("stderr is UTF-8")
}

/// Standard output parsed as JSON.
pub fn json(output: &Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|error| panic!("stdout is not JSON ({error}): {}", stdout(output)))
}

/// Asserts the exit code, showing the output when it differs, and that nothing panicked.
pub fn assert_code(output: &Output, code: i32) {
    assert_eq!(
        output.status.code(),
        Some(code),
        "stdout: {}\nstderr: {}",
        stdout(output),
        stderr(output)
    );
    assert!(!stderr(output).contains("panicked"), "{}", stderr(output));
    assert!(
        !stderr(output).contains("RUST_BACKTRACE"),
        "{}",
        stderr(output)
    );
}

/// Asserts the exit code (as [`assert_code`]) and that standard error contains `needle`.
pub fn assert_stderr_says(output: &Output, code: i32, needle: &str) {
    assert_code(output, code);
    assert!(stderr(output).contains(needle), "{}", stderr(output));
}

/// Asserts that standard error is one error in the documented format: a `durably: error:` line,
/// then at most one `durably: hint:` line.
pub fn assert_one_error(output: &Output) {
    let text = stderr(output);
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        matches!(lines.as_slice(), [error] | [error, _] if error.starts_with("durably: error: ")),
        "{text}"
    );
    if let [_, hint] = lines.as_slice() {
        assert!(hint.starts_with("durably: hint: "), "{text}");
    }
}

/// Asserts exit code 0 (as [`assert_code`]) and that standard output contains `needle`.
pub fn assert_stdout_says(output: &Output, needle: &str) {
    assert_code(output, 0);
    assert!(stdout(output).contains(needle), "{}", stdout(output));
}

/// A runtime for the library's async calls.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

/// A journal with one execution in each state the commands care about.
pub struct Fixture {
    /// Keeps the files alive.
    pub dir: tempfile::TempDir,
    /// The database.
    pub db: PathBuf,
    /// Completed; its name holds an escape sequence.
    pub completed: Uuid,
    /// Failed.
    pub failed: Uuid,
    /// Interrupted with step 1 ("charge", policy Fail) in the ambiguous window; unlocked.
    pub ambiguous: Uuid,
}

impl Fixture {
    /// The database path as a string argument.
    pub fn db_arg(&self) -> &str {
        self.db.to_str().unwrap()
    }
}

/// Builds a [`Fixture`] through the library.
pub fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let runtime = runtime();
    let (completed, failed, ambiguous) = runtime.block_on(async {
        let journal = Journal::builder(&db).open().unwrap();
        let completed = Uuid::new_v4();
        let execution = open(&journal, completed, EVIL_NAME).await;
        let _: u32 = execution.pure("plan", || async { Ok(7) }).await.unwrap();
        // serde_json escapes C0 controls itself, but stores C1 controls and bidi overrides raw.
        execution.complete(&"done \u{9b}2J \u{202e}").await.unwrap();

        let failed = Uuid::new_v4();
        let execution = open(&journal, failed, "failing order").await;
        execution
            .fail(&StepError::fatal("card declined"))
            .await
            .unwrap();

        let ambiguous = Uuid::new_v4();
        let execution = open(&journal, ambiguous, "stuck order").await;
        let _: u32 = execution.pure("plan", || async { Ok(1) }).await.unwrap();
        // Abandon the guarded step inside its closure: the intent is durable, the result never
        // comes, exactly as after a crash.
        let step = execution.guarded("charge", Policy::Fail, |_key| async {
            tokio::time::sleep(Duration::from_hours(1)).await;
            Ok::<u32, StepError>(1)
        });
        assert!(
            tokio::time::timeout(Duration::from_millis(300), step)
                .await
                .is_err()
        );
        drop(execution);
        // The writer applies requests in order: once this no-op commits, the release queued
        // by the drop above has committed too.
        journal.write(|_| Ok(())).await.unwrap();
        (completed, failed, ambiguous)
    });
    Fixture {
        dir,
        db,
        completed,
        failed,
        ambiguous,
    }
}

/// Opens a new execution `id` of kind "order" named `name`.
pub async fn open(journal: &Journal, id: Uuid, name: &str) -> Execution {
    match journal
        .open_execution(id, "order", name, &serde_json::json!({ "order": 1 }))
        .await
        .unwrap()
    {
        Opened::Running(execution) => execution,
        Opened::Finished(_) => panic!("a new execution is not finished"),
    }
}

/// Opens `id` in this process and keeps it held (a live holder) until the handle is dropped.
pub fn hold(runtime: &tokio::runtime::Runtime, db: &Path, id: Uuid) -> (Journal, Execution) {
    runtime.block_on(async {
        let journal = Journal::builder(db).sweep_on_open(false).open().unwrap();
        let execution = open(&journal, id, "ignored on resume").await;
        (journal, execution)
    })
}
