//! `.ci/conformance.txt`, the list of test files CI runs on PostgreSQL too, cannot rot: every
//! listed file exists and is portable (it reaches its database only through the testkit and
//! the journal), and every test file that opens its database through the testkit is listed.
//!
//! Method: read the list and the workspace's integration test files as text, and look for the
//! marks of a file that reaches SQLite behind the journal's back, and of one written for the
//! testkit. It reads the files of this checkout, so it fails on the commit that breaks the rule.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The list, relative to the workspace root.
const LIST: &str = ".ci/conformance.txt";

/// Text a listed file must not contain, each with the reason: every one reaches SQLite, or a
/// file of its own, behind the journal's back.
const NOT_PORTABLE: &[(&str, &str)] = &[
    (
        "scratch.path",
        "the SQLite file's path: open with scratch.builder()/open()",
    ),
    (
        "rusqlite",
        "a SQLite connection of its own: read with journal.read(|conn| …)",
    ),
    (
        "tempfile",
        "a directory of its own: the testkit's TestDb is the scratch database",
    ),
    (
        "tempdir",
        "a directory of its own: the testkit's TestDb is the scratch database",
    ),
    (
        "journal.db",
        "a journal file of its own: the testkit's TestDb is the scratch database",
    ),
    (
        "json_extract",
        "SQLite's JSON function: use `->>`, which both backends read",
    ),
    (
        "sqlite_schema",
        "SQLite's catalog: pick per dialect (durably_db::Sql)",
    ),
    (
        "sqlite_master",
        "SQLite's catalog: pick per dialect (durably_db::Sql)",
    ),
    (
        "PRAGMA",
        "a SQLite pragma: run SQLite-only checks through TestDb::sqlite_only",
    ),
];

/// Text that marks a file written for the testkit, which must then be listed.
const USES_TESTKIT: &[&str] = &["durably_testkit", "TestDb", "scratch.builder()"];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Each workspace package with integration tests: its name, and its `tests/` directory.
fn test_dirs(root: &Path) -> BTreeMap<String, PathBuf> {
    let mut manifests: Vec<PathBuf> = fs::read_dir(root.join("crates"))
        .unwrap()
        .map(|entry| entry.unwrap().path().join("Cargo.toml"))
        .collect();
    manifests.push(root.join("tests/Cargo.toml"));
    manifests
        .into_iter()
        .filter(|manifest| manifest.is_file())
        .filter_map(|manifest| {
            let text = fs::read_to_string(&manifest).unwrap();
            let name = text
                .lines()
                .find_map(|line| line.strip_prefix("name = "))?
                .trim_matches('"')
                .to_owned();
            let dir = manifest.parent().unwrap().join("tests");
            dir.is_dir().then_some((name, dir))
        })
        .collect()
}

/// The `(package, file)` entries of the list, in order, duplicates included.
fn listed(root: &Path) -> Vec<(String, String)> {
    let text = fs::read_to_string(root.join(LIST)).unwrap();
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            assert!(
                words.len() == 2 || (words.len() == 3 && words[2] == "pending"),
                "{LIST}: `{line}` is not `PACKAGE TEST-FILE [pending]`"
            );
            (words[0].to_owned(), words[1].to_owned())
        })
        .collect()
}

#[test]
fn every_listed_file_exists_once_and_is_portable() {
    let root = workspace_root();
    let dirs = test_dirs(&root);
    let mut seen = BTreeSet::new();
    let mut problems = Vec::new();
    for (package, file) in listed(&root) {
        if !seen.insert((package.clone(), file.clone())) {
            problems.push(format!("{package} {file}: listed twice"));
            continue;
        }
        let Some(dir) = dirs.get(&package) else {
            problems.push(format!(
                "{package} {file}: no workspace package {package} has tests"
            ));
            continue;
        };
        let path = dir.join(format!("{file}.rs"));
        let Ok(text) = fs::read_to_string(&path) else {
            problems.push(format!("{package} {file}: {} is missing", path.display()));
            continue;
        };
        for (mark, reason) in NOT_PORTABLE {
            if text.contains(mark) {
                problems.push(format!("{package} {file}: uses `{mark}`, {reason}"));
            }
        }
    }
    assert!(problems.is_empty(), "{LIST}:\n{}", problems.join("\n"));
}

/// The attributes of a test file built only with the `postgres` feature (alone, or with
/// others such as `failpoints`).
const POSTGRES_ONLY: &[&str] = &[
    "#![cfg(feature = \"postgres\")]",
    "#![cfg(all(feature = \"postgres\",",
];

/// A scratch database pinned to PostgreSQL, whatever `DURABLY_TEST_BACKEND` says: a file whose
/// every scratch database is pinned (PostgreSQL tests inside a SQLite file, such as a copy's
/// destination) runs on PostgreSQL in the README's test command already.
const PINNED_TO_POSTGRES: &str = "TestDb::on(Backend::Postgres)";

/// Marks of a scratch database on the backend the environment picks.
const ON_CHOSEN_BACKEND: &[&str] = &["TestDb::new(", "TestDb::default(", "scratch.builder()"];

#[test]
fn every_test_file_on_the_testkit_is_listed() {
    let root = workspace_root();
    let listed: BTreeSet<(String, String)> = listed(&root).into_iter().collect();
    let mut unlisted = Vec::new();
    for (package, dir) in test_dirs(&root) {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|extension| extension != "rs") {
                continue;
            }
            let file = path.file_stem().unwrap().to_string_lossy().into_owned();
            // This file names the marks it looks for.
            if root.join(file!()) == path {
                continue;
            }
            let text = fs::read_to_string(&path).unwrap();
            // A PostgreSQL-only file runs on PostgreSQL in the README's test command already.
            if POSTGRES_ONLY.iter().any(|mark| text.contains(mark)) {
                continue;
            }
            if text.contains(PINNED_TO_POSTGRES)
                && !ON_CHOSEN_BACKEND.iter().any(|mark| text.contains(mark))
            {
                continue;
            }
            let on_testkit = USES_TESTKIT.iter().any(|mark| text.contains(mark));
            if on_testkit && !listed.contains(&(package.clone(), file.clone())) {
                unlisted.push(format!("{package} {file}"));
            }
        }
    }
    assert!(
        unlisted.is_empty(),
        "these test files open their database through the testkit but are not in {LIST}: add \
         them, so that CI runs them on PostgreSQL too:\n{}",
        unlisted.join("\n")
    );
}
