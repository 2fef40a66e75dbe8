//! Guarantee: the commands docs/testing.md gives are commands that work on this workspace. Every
//! line of its `sh` blocks names a package, test target, binary, feature, fuzz target and
//! corpus that exist, and every `--option` the page gives the torture binary is one that binary
//! accepts, so a reader who copies a command does not meet "no such test" or "unexpected
//! argument". (Blocks that cannot be checked here, such as installing a toolchain, are marked
//! `text`.)
//!
//! Method: read the page's fenced `sh` blocks; each line must be a `cargo test`, a
//! `cargo run ... --bin torture` or a `cargo +nightly fuzz run` command, and each is checked
//! against the workspace's manifests and files. The torture binary's options, in its commands
//! and in the prose of "The torture run", are checked against what the built binary's `--help`
//! lists.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed unwrap is a failed test.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const TORTURE: &str = env!("CARGO_BIN_EXE_torture");

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests package sits in the workspace root")
        .to_path_buf()
}

fn page() -> String {
    fs::read_to_string(root().join("docs/testing.md")).unwrap()
}

/// The lines of every fenced block whose info string is `sh`.
fn sh_lines(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut in_sh = false;
    for line in text.lines() {
        if let Some(info) = line.trim_start().strip_prefix("```") {
            in_sh = !in_sh && info.trim() == "sh";
            continue;
        }
        if in_sh && !line.trim().is_empty() {
            lines.push(line.trim().to_owned());
        }
    }
    lines
}

/// The directory of the workspace package named `name`.
fn package_dir(name: &str) -> Option<PathBuf> {
    let root = root();
    let mut candidates = vec![root.join("tests")];
    for entry in fs::read_dir(root.join("crates")).unwrap() {
        candidates.push(entry.unwrap().path());
    }
    candidates.into_iter().find(|dir| {
        fs::read_to_string(dir.join("Cargo.toml")).is_ok_and(|manifest| {
            manifest
                .lines()
                .any(|line| line.trim() == format!("name = \"{name}\""))
        })
    })
}

/// Whether the package in `dir` declares the feature `feature`.
fn has_feature(dir: &Path, feature: &str) -> bool {
    let manifest = fs::read_to_string(dir.join("Cargo.toml")).unwrap();
    let mut in_features = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_features = line == "[features]";
        } else if in_features && line.split('=').next().map(str::trim) == Some(feature) {
            return true;
        }
    }
    false
}

/// The value after `flag` among `words`.
fn value_of<'a>(words: &[&'a str], flag: &str) -> Option<&'a str> {
    let at = words.iter().position(|word| *word == flag)?;
    words.get(at + 1).copied()
}

/// The `--options` named in `text`, each once.
fn options_in(text: &str) -> BTreeSet<&str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|word| word.starts_with("--") && word.len() > 2)
        .collect()
}

/// What is wrong with one `sh` line, if anything; `torture_options` are the options the
/// torture binary takes.
fn problem(line: &str, torture_options: &BTreeSet<&str>) -> Option<String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        ["cargo", "test", ..] => {
            let package = value_of(&words, "-p")?;
            let Some(dir) = package_dir(package) else {
                return Some(format!("no workspace package {package}"));
            };
            if let Some(feature) = value_of(&words, "--features")
                && !has_feature(&dir, feature)
            {
                return Some(format!("{package} has no feature {feature}"));
            }
            let test = value_of(&words, "--test")?;
            let file = dir.join("tests").join(format!("{test}.rs"));
            (!file.is_file()).then(|| format!("{} does not exist", file.display()))
        }
        ["cargo", "run", ..] => {
            if value_of(&words, "-p") != Some("durably-tests")
                || value_of(&words, "--bin") != Some("torture")
            {
                return Some("only the torture binary's commands are checked".to_owned());
            }
            let separator = words.iter().position(|word| *word == "--")?;
            words[separator + 1..]
                .iter()
                .filter(|word| word.starts_with("--"))
                .find(|option| !torture_options.contains(**option))
                .map(|option| format!("the torture binary does not take {option}"))
        }
        ["cargo", "+nightly", "fuzz", "run", target, corpus, ..] => {
            let fuzz = root().join("fuzz");
            let source = fuzz.join("fuzz_targets").join(format!("{target}.rs"));
            if !source.is_file() {
                return Some(format!("no fuzz target {}", source.display()));
            }
            let corpus = fuzz.join(corpus);
            (!corpus.is_dir()).then(|| format!("no corpus {}", corpus.display()))
        }
        // The developer's server: CI's own script, which `.ci/run` runs on every change.
        ["eval", "\"$(.ci/pg", "start)\""] => None,
        _ => Some("a command this test cannot check: mark its block `text`".to_owned()),
    }
}

fn torture_help() -> String {
    let output = Command::new(TORTURE).arg("--help").output().unwrap();
    assert!(output.status.success(), "torture --help failed: {output:?}");
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn every_command_of_the_page_names_what_exists() {
    let help = torture_help();
    let options = options_in(&help);
    let lines = sh_lines(&page());
    assert!(
        lines.len() >= 4,
        "docs/testing.md lost its commands: {lines:?}"
    );
    let problems: Vec<String> = lines
        .iter()
        .filter_map(|line| problem(line, &options).map(|why| format!("{line}\n  {why}")))
        .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_torture_option_the_page_names_is_one_the_binary_takes() {
    let help = torture_help();
    let taken = options_in(&help);
    let text = page();
    let start = text.find("\n## The torture run").unwrap();
    let end = text[start + 1..]
        .find("\n## ")
        .map_or(text.len(), |end| start + 1 + end);
    // The prose only: the commands of its blocks are checked by the test above.
    let mut fenced = false;
    let prose: String = text[start..end]
        .lines()
        .filter(|line| {
            fenced ^= line.trim_start().starts_with("```");
            !fenced && !line.trim_start().starts_with("```")
        })
        .collect::<Vec<_>>()
        .join("\n");
    let named = options_in(&prose);
    assert!(
        named.contains("--iterations"),
        "the section names no option"
    );
    let unknown: Vec<&&str> = named.difference(&taken).collect();
    assert!(
        unknown.is_empty(),
        "docs/testing.md gives the torture binary options it does not take: {unknown:?}"
    );
}

#[test]
fn a_command_naming_what_does_not_exist_is_caught() {
    let taken = options_in("--iterations --seed");
    for line in [
        "cargo test -p durably-tests --test no_such_test",
        "cargo test -p no-such-package --test model",
        "cargo test -p durably-tests --features no_such_feature --test model",
        "cargo run --release -p durably-tests --bin torture -- --iterations 1 --no-such-option",
        "cargo +nightly fuzz run no_such_target corpus/no_such_target",
        "rustup toolchain install nightly",
    ] {
        assert!(problem(line, &taken).is_some(), "not caught: {line}");
    }
    assert_eq!(
        problem(
            "cargo test -p durably-tests --features failpoints --test failpoint_matrix",
            &taken
        ),
        None
    );
}
