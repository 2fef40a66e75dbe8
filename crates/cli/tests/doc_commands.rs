//! What this proves: the shell blocks of the user docs work as written. README.md's "Look
//! inside" runs after `durably demo` in the same directory (so the demo writes the file it
//! names), and every shell block of docs/operations.md runs in page order on the journal its
//! first block makes, with `DURABLY_DB` set as that block tells the reader to set it, and
//! docs/cli.md's after `durably demo --db app.db`; its example error is the JSON the CLI
//! prints, keys in order. Each
//! exits 0. A block that only builds, installs or starts a server (every command `cargo ...`,
//! `.ci/pg run cargo ...` or `eval "$(.ci/pg start)"`: the quick start, the developer's server)
//! is left to the integrator's quick-start check and CI, and a block that mixes the two is refused,
//! so no `durably` command can hide among them; blocks with placeholders are fenced `text`.
//! Method: extract each ```sh block, run it with `sh -eu` (a failing command fails the block)
//! in a scratch directory, with the built `durably` first on `PATH` as `cargo install` would
//! put it, stdin closed, and a deadline.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod doc_blocks;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const README: &str = include_str!("../../../README.md");
const OPERATIONS: &str = include_str!("../../../docs/operations.md");
const CLI: &str = include_str!("../../../docs/cli.md");

/// How long one block may run: the demo takes seconds, every other command less.
const BLOCK_DEADLINE: Duration = Duration::from_mins(2);

/// Whether `line` builds, installs or starts the developer's PostgreSQL server: a line the
/// quick-start check and CI run, not this test.
fn is_setup(line: &str) -> bool {
    line.starts_with("cargo ")
        || line.starts_with(".ci/pg run cargo ")
        || line == r#"eval "$(.ci/pg start)""#
}

/// The shell blocks of `page` that run `durably` or `sqlite3`, in order; asserts that every
/// other shell block only sets up ([`is_setup`]).
fn command_blocks(page: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    for block in doc_blocks::fenced_blocks(page) {
        if block.language != "sh" {
            continue;
        }
        let commands: Vec<&str> = block
            .text
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty() && !line.starts_with('#'))
            .collect();
        let setup = commands.iter().filter(|line| is_setup(line)).count();
        if setup == commands.len() {
            continue;
        }
        assert_eq!(
            setup, 0,
            "this block mixes set-up commands (cargo, .ci/pg) with others; split it:\n{}",
            block.text
        );
        blocks.push(block.text);
    }
    blocks
}

/// `PATH` with the directory of the built `durably` first.
fn path_with_durably() -> String {
    let binary = PathBuf::from(env!("CARGO_BIN_EXE_durably"));
    let dir = binary.parent().unwrap().display().to_string();
    match std::env::var("PATH") {
        Ok(path) => format!("{dir}:{path}"),
        Err(_) => dir,
    }
}

/// Runs `block` with `sh -eu` in `dir`, failing the test with its output unless it exits 0.
fn run_block(block: &str, dir: &Path, env: &[(&str, &str)]) {
    let mut command = Command::new("sh");
    command
        .args(["-eu", "-c", block])
        .current_dir(dir)
        .env("PATH", path_with_durably())
        .env_remove("DURABLY_DB")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command.spawn().expect("sh runs");
    let deadline = Instant::now() + BLOCK_DEADLINE;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("this block was still running after {BLOCK_DEADLINE:?}:\n{block}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "this block failed ({}):\n{block}\n--- stdout\n{}\n--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The blocks call the sqlite3 shell, as the docs tell readers to.
fn require_sqlite3() {
    let found = Command::new("sqlite3")
        .arg("-version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    assert!(
        found,
        "the user docs' shell blocks use the sqlite3 shell: install it (apt-get install sqlite3)"
    );
}

/// Runs the command blocks of `page` in order in `dir`, after checking that there are at least
/// `blocks_min` of them and that one holds `marker`, so a page cannot pass by losing its blocks.
fn run_page(page: &str, dir: &Path, env: &[(&str, &str)], marker: &str, blocks_min: usize) {
    let blocks = command_blocks(page);
    assert!(
        blocks.len() >= blocks_min && blocks.iter().any(|block| block.contains(marker)),
        "expected at least {blocks_min} shell blocks, one with {marker:?}; found {blocks:#?}"
    );
    for block in &blocks {
        run_block(block, dir, env);
    }
}

#[test]
fn the_readme_look_inside_block_runs_after_the_demo() {
    require_sqlite3();
    let dir = tempfile::tempdir().unwrap();
    run_block("durably demo > demo.out", dir.path(), &[]);
    assert!(
        dir.path().join("durably-demo.db").is_file(),
        "the demo no longer writes durably-demo.db in the current directory, which the README \
         names"
    );
    run_page(README, dir.path(), &[], "durably --db durably-demo.db", 1);
}

#[test]
fn every_shell_block_of_the_operations_page_runs_in_order() {
    require_sqlite3();
    let dir = tempfile::tempdir().unwrap();
    // The page's first block makes the journal and tells the reader to set DURABLY_DB.
    let env = [("DURABLY_DB", "app.db")];
    run_page(OPERATIONS, dir.path(), &env, "durably demo --db app.db", 6);
}

/// Whether `json` names the documented leading keys of an error, in their documented order.
fn keys_in_documented_order(json: &str) -> bool {
    let at: Vec<Option<usize>> = ["\"code\"", "\"message\"", "\"hint\"", "\"exit_code\""]
        .iter()
        .map(|key| json.find(key))
        .collect();
    at.iter().all(Option::is_some) && at.windows(2).all(|pair| pair[0] < pair[1])
}

#[test]
fn the_cli_page_runs_after_the_demo_and_its_error_example_is_the_printed_shape() {
    let dir = tempfile::tempdir().unwrap();
    run_block("durably demo --db app.db > demo.out", dir.path(), &[]);
    run_page(CLI, dir.path(), &[], "durably --db app.db ls", 1);

    let example = doc_blocks::fenced_blocks(CLI)
        .into_iter()
        .find(|block| block.language == "json" && block.text.contains("\"code\""))
        .expect("docs/cli.md shows a JSON error");
    let _: serde_json::Value = serde_json::from_str(example.text.trim()).unwrap();
    assert!(keys_in_documented_order(&example.text), "{}", example.text);
    let printed = Command::new(env!("CARGO_BIN_EXE_durably"))
        .args(["--json", "--db", "missing.db", "ls"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8(printed.stderr).unwrap();
    let _: serde_json::Value = serde_json::from_str(stderr.trim()).unwrap();
    assert!(keys_in_documented_order(&stderr), "{stderr}");
}
