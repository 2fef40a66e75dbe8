//! What these prove: `durably gc` writes its progress line to standard error only when standard
//! error is a terminal, and never mixes it into standard output; when standard error is not a
//! terminal (a pipe, a log file), it writes nothing there at all. Method: a journal built
//! through the library holds enough finalized executions for several deletion batches; the
//! built binary runs once with its output captured through pipes, and once under `script`
//! (util-linux), which gives it a pseudo-terminal, with standard output sent to a file.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{assert_code, durably, open, runtime, stderr, stdout};
use uuid::Uuid;

/// More than two full batches of the CLI's batch size (`GC_BATCH_EXECUTIONS_DEFAULT`, 200),
/// so the sweep reports progress at least three times.
const COMPLETED_EXECUTIONS: usize = 450;

const GC_EVERYTHING: [&str; 5] = [
    "gc",
    "--completed-older-than",
    "0s",
    "--failed-older-than",
    "0s",
];

/// A journal holding [`COMPLETED_EXECUTIONS`] completed executions.
fn journal_with_completed_executions() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    runtime().block_on(async {
        let journal = durably::Journal::builder(&db).open().unwrap();
        for index in 0..COMPLETED_EXECUTIONS {
            let execution = open(&journal, Uuid::new_v4(), &format!("order {index}")).await;
            execution.complete(&"done").await.unwrap();
        }
        journal.write(|_| Ok(())).await.unwrap();
    });
    (dir, db)
}

#[test]
fn no_progress_is_written_when_standard_error_is_not_a_terminal() {
    let (_dir, db) = journal_with_completed_executions();
    let mut args = vec!["--db", db.to_str().unwrap()];
    args.extend_from_slice(&GC_EVERYTHING);
    let output = durably(&args);
    assert_code(&output, 0);
    assert_eq!(stderr(&output), "", "no progress noise on a pipe");
    assert!(
        stdout(&output).starts_with("deleted 450 completed executions"),
        "{}",
        stdout(&output)
    );
    assert!(
        stdout(&output).contains("(3 batches)"),
        "{}",
        stdout(&output)
    );
}

/// Why `script` cannot be used here, or `None` when it can.
fn script_unusable() -> Option<String> {
    let version = Command::new("script").arg("--version").output();
    match version {
        Err(error) => return Some(format!("`script` is not installed ({error})")),
        Ok(version) if !String::from_utf8_lossy(&version.stdout).contains("util-linux") => {
            return Some("`script` is not the util-linux one".to_owned());
        }
        Ok(_) => {}
    }
    let trial = Command::new("script")
        .args(["-qec", "true", "/dev/null"])
        .stdin(Stdio::null())
        .output();
    match trial {
        Ok(trial) if trial.status.success() => None,
        Ok(trial) => Some(format!(
            "`script` cannot open a pseudo-terminal here: {}",
            String::from_utf8_lossy(&trial.stderr).trim()
        )),
        Err(error) => Some(format!("`script` does not run ({error})")),
    }
}

/// `path` quoted for the shell `script` runs the command with.
fn quoted(path: &Path) -> String {
    let text = path.to_str().unwrap();
    assert!(!text.contains('\''), "{text}");
    format!("'{text}'")
}

#[test]
fn progress_is_written_to_standard_error_on_a_terminal() {
    if let Some(reason) = script_unusable() {
        eprintln!("skipping the terminal case of gc progress: {reason}");
        return;
    }
    let (dir, db) = journal_with_completed_executions();
    let stdout_file = dir.path().join("stdout.txt");
    let command = format!(
        "{} --db {} {} >{}",
        quoted(Path::new(env!("CARGO_BIN_EXE_durably"))),
        quoted(&db),
        GC_EVERYTHING.join(" "),
        quoted(&stdout_file)
    );
    // Standard error stays on the pseudo-terminal, so `script` relays it; standard output goes
    // to the file, so what `script` relays came from standard error.
    let output = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env_remove("DURABLY_DB")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_code(&output, 0);
    let terminal = stdout(&output);
    for so_far in [
        "\rdeleting: 200 completed, 0 failed or cancelled, 1 batch",
        "\rdeleting: 400 completed, 0 failed or cancelled, 2 batches",
        "\rdeleting: 450 completed, 0 failed or cancelled, 3 batches",
    ] {
        assert!(terminal.contains(so_far), "{terminal:?}");
    }
    assert!(!terminal.contains("deleted 450"), "{terminal:?}");
    let counts = std::fs::read_to_string(&stdout_file).unwrap();
    assert!(
        counts.starts_with("deleted 450 completed executions"),
        "{counts}"
    );
    assert!(!counts.contains("deleting:"), "{counts}");
}
