//! The family part of `durably show`: the execution's parent (the step that started it), and
//! its children as a tree, nested to a bounded depth, each with its kind and status now
//! (bounds in [`crate::children_rows`]). Names are escaped like the rest of `show`.

use std::fmt::Write as _;

use serde::Serialize;

use crate::children_rows::{ChildNode, Family};
use crate::escape::escape;

/// The family fields of `show --json`, flattened into it. Stable fields.
#[derive(Debug, Serialize)]
pub(super) struct FamilyShown {
    /// `null` for an execution that is nobody's child.
    parent: Option<Parent>,
    /// Its children, in start order, each with its own (bounded) children.
    children: Vec<Child>,
    /// All of its children, listed or not.
    children_count: i64,
}

#[derive(Debug, Serialize)]
struct Parent {
    execution_id: String,
    /// The parent's step that started this execution.
    seq: i64,
}

#[derive(Debug, Serialize)]
struct Child {
    seq: i64,
    execution_id: String,
    kind: String,
    status: String,
    children: Vec<Child>,
    children_count: i64,
}

impl FamilyShown {
    /// What was read, escaped.
    pub(super) fn new(family: Family) -> Self {
        Self {
            parent: family.parent.map(|(execution_id, seq)| Parent {
                execution_id: escape(&execution_id),
                seq,
            }),
            children: family.children.into_iter().map(Child::from_node).collect(),
            children_count: family.children_count,
        }
    }
}

impl Child {
    fn from_node(node: ChildNode) -> Self {
        Self {
            seq: node.row.seq,
            execution_id: escape(&node.row.execution_id),
            kind: escape(&node.row.kind),
            status: escape(&node.row.status),
            children: node.children.into_iter().map(Self::from_node).collect(),
            children_count: node.children_count,
        }
    }
}

/// The `parent` line and the `children` section of `show`'s text for execution `id`; empty
/// for an execution with neither.
pub(super) fn render(shown: &FamilyShown, id: &str) -> String {
    let mut text = String::new();
    if let Some(parent) = &shown.parent {
        let _ = writeln!(
            text,
            "\nparent     {} (step {})",
            parent.execution_id, parent.seq
        );
    }
    if shown.children_count == 0 {
        return text;
    }
    let _ = writeln!(
        text,
        "\nchildren ({} of {})",
        shown.children.len(),
        shown.children_count
    );
    let mut cut = false;
    render_level(&mut text, &shown.children, 1, &mut cut);
    if cut || shown.children.len() as i64 != shown.children_count {
        let _ = writeln!(
            text,
            "more children: `durably ls --parent ID` lists the children of one execution \
             (here `durably ls --parent {id}`)"
        );
    }
    text
}

/// Appends `children`, indented by `depth`, and theirs below each; sets `cut` when some
/// execution has more children than are listed.
fn render_level(text: &mut String, children: &[Child], depth: usize, cut: &mut bool) {
    for child in children {
        let _ = writeln!(
            text,
            "{:indent$}step {}  {}  {}  {}",
            "",
            child.seq,
            child.execution_id,
            child.kind,
            child.status,
            indent = depth * 2
        );
        if child.children.len() as i64 != child.children_count {
            *cut = true;
            let _ = writeln!(
                text,
                "{:indent$}({} of {} children listed)",
                "",
                child.children.len(),
                child.children_count,
                indent = (depth + 1) * 2
            );
        }
        render_level(text, &child.children, depth + 1, cut);
    }
}
