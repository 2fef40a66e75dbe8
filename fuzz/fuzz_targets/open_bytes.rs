//! Fuzz target `open_bytes`: see `durably_tests::fuzz_targets::open_bytes` for what it checks.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    durably_tests::fuzz_targets::open_bytes(data);
});
