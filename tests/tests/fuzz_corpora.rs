//! Guarantee: every input in the committed fuzz corpora (`fuzz/corpus/<target>/`) passes its
//! fuzz target on stable Rust: arbitrary bytes opened as a journal give a journal or a typed
//! error (never a panic, and a refused file is left as it was); operation sequences with crash
//! points agree with the model; schedule text and numbers parse or give a typed error.
//!
//! Method: each test runs every file of one corpus through the same function the cargo-fuzz
//! target calls (`durably_tests::fuzz_targets`), so a crash input a fuzzer saved, once copied
//! into the corpus, stays a regression test on every `cargo test`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed unwrap is a failed test.

use std::path::PathBuf;

use durably_tests::fuzz_targets;

/// The files of one corpus, sorted, and at least one.
fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|error| panic!("{}: {error}", dir.display()))
        .map(|entry| {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&path).unwrap())
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "the {target} corpus is empty");
    files
}

fn run_corpus(target: &str, body: fn(&[u8])) {
    for (name, data) in corpus(target) {
        let outcome = std::panic::catch_unwind(|| body(&data));
        assert!(outcome.is_ok(), "{target}/{name} failed its fuzz target");
    }
}

#[test]
fn the_open_bytes_corpus_opens_or_is_refused_with_a_typed_error() {
    run_corpus("open_bytes", fuzz_targets::open_bytes);
}

#[test]
fn the_operations_corpus_agrees_with_the_model() {
    run_corpus("operations", fuzz_targets::operations);
}

#[test]
fn the_schedule_parse_corpus_parses_or_is_refused_with_a_typed_error() {
    run_corpus("schedule_parse", fuzz_targets::schedule_parse);
}
