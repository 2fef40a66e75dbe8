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
        "00000000-0000-88b8-b55f-6ce71ba21909",
    ),
    (
        "00000000-0000-0000-0000-000000000000",
        1,
        "00000000-0000-82b0-bf70-d46ad5ad5c42",
    ),
    (
        "0192f3a4-5b6c-7d8e-9f01-23456789abcd",
        0,
        "0192f3a4-5b6c-8989-86d6-599eb9a456d6",
    ),
    (
        "0192f3a4-5b6c-7d8e-9f01-23456789abcd",
        7,
        "0192f3a4-5b6c-8f24-a585-c37ecc2dc8f6",
    ),
    (
        "ffffffff-ffff-ffff-ffff-ffffffffffff",
        4_294_967_295,
        "ffffffff-ffff-83a6-81b9-c0c6224a8213",
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
