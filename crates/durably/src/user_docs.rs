//! The user's doc set, compiled and run as doctests (`cargo test --doc -p durably`), so that
//! every Rust block a user may copy from them keeps compiling and doing what the page says.

/// README.md.
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

/// docs/guide.md.
#[doc = include_str!("../../../docs/guide.md")]
pub struct GuideDoctests;

/// docs/operations.md.
#[doc = include_str!("../../../docs/operations.md")]
pub struct OperationsDoctests;

/// docs/guarantees.md.
#[doc = include_str!("../../../docs/guarantees.md")]
pub struct GuaranteesDoctests;
