//! Fuzz target `operations`: see `durably_tests::fuzz_targets::operations` for what it checks.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    durably_tests::fuzz_targets::operations(data);
});
