//! The child id derivation is frozen: [`child_execution_id`] gives the vectors documented in
//! docs/design.md ("Child executions"), which were computed outside this crate (Python's
//! `blake3` package over the documented message bytes), so a change to the derivation, which
//! would start a second child for every parent resumed across an upgrade, fails here.
#![allow(clippy::unwrap_used)]

use durably_runtime::child_execution_id;
use uuid::Uuid;

const VECTORS: [(&str, u32, &str); 5] = [
    (
        "00000000-0000-0000-0000-000000000000",
        0,
        "78b8755f-6ce7-8ba2-9909-c62215544669",
    ),
    (
        "00000000-0000-0000-0000-000000000000",
        1,
        "72b0ff70-d46a-85ad-9c42-a8b4ec16d7a6",
    ),
    (
        "0192f3a4-5b6c-7d8e-9f01-23456789abcd",
        0,
        "398946d6-599e-89a4-96d6-92999b33009e",
    ),
    (
        "0192f3a4-5b6c-7d8e-9f01-23456789abcd",
        7,
        "6f24e585-c37e-8c2d-88f6-de4bba60faec",
    ),
    (
        "ffffffff-ffff-ffff-ffff-ffffffffffff",
        4_294_967_295,
        "63a6c1b9-c0c6-824a-8213-239cd3d78e26",
    ),
];

/// Each documented (parent, seq) gives its documented child id, a version 8 UUID of the RFC
/// variant.
#[test]
fn child_ids_match_the_documented_vectors() {
    for (parent, seq, child) in VECTORS {
        let derived = child_execution_id(Uuid::parse_str(parent).unwrap(), seq);
        assert_eq!(derived.to_string(), child, "parent {parent}, seq {seq}");
        assert_eq!(derived.get_version_num(), 8);
        assert_eq!(derived.get_variant(), uuid::Variant::RFC4122);
    }
}

/// The docs quote the vectors: the table in docs/design.md holds each of them.
#[test]
fn the_design_document_holds_the_vectors() {
    let design =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/design.md"))
            .unwrap();
    for (parent, seq, child) in VECTORS {
        let row = format!("| `{parent}` | {seq} | `{child}` |");
        assert!(design.contains(&row), "docs/design.md lacks {row}");
    }
}
