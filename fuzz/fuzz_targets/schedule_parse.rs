//! Fuzz target `schedule_parse`: see `durably_tests::fuzz_targets::schedule_parse` for what it checks.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    durably_tests::fuzz_targets::schedule_parse(data);
});
