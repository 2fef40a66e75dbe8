//! Reads of the parent link of child executions (`runtime_executions.parent_execution_id`,
//! runtime migration 2) for `show` and `ls --parent`, on an [`Inspector`]'s read-only
//! connection. A journal whose runtime has no parent link yet (no runtime tables, or a runtime
//! older than child executions) has no children, and every read finds none.

use durably::Inspector;
use durably::db::{Connection, params};
use uuid::Uuid;

use crate::error::Result;

/// How deep `show` prints the tree of children below the execution.
pub const TREE_DEPTH_MAX: u32 = 3;
/// The most children `show` prints under one execution.
pub const CHILDREN_PER_PARENT_MAX: u32 = 20;
/// The most children `show` prints in the whole tree.
pub const TREE_NODES_MAX: usize = 100;

/// One child: the parent's step that started it, and what it is now.
#[derive(Debug)]
pub struct ChildRow {
    /// The parent's step that started it.
    pub seq: i64,
    /// Its id.
    pub execution_id: String,
    /// Its kind.
    pub kind: String,
    /// Its status.
    pub status: String,
}

/// A child and, to a bounded depth, its own children.
#[derive(Debug)]
pub struct ChildNode {
    /// The child.
    pub row: ChildRow,
    /// Its children read, in start order.
    pub children: Vec<ChildNode>,
    /// All of its children.
    pub children_count: i64,
}

/// The family of one execution: its parent, and its children as a bounded tree.
#[derive(Debug, Default)]
pub struct Family {
    /// Its parent and the parent's step that started it; `None` for an execution that is
    /// nobody's child.
    pub parent: Option<(String, i64)>,
    /// Its children read, in start order.
    pub children: Vec<ChildNode>,
    /// All of its children.
    pub children_count: i64,
}

/// Whether the runtime's tables hold the parent link.
fn linked(conn: &Connection) -> durably::Result<bool> {
    crate::runtime_rows::runtime_column_present(conn, "parent_execution_id")
}

/// The family of execution `id`: its parent, and its children to [`TREE_DEPTH_MAX`] levels,
/// at most [`CHILDREN_PER_PARENT_MAX`] under one execution and [`TREE_NODES_MAX`] in all.
///
/// # Errors
/// A storage error, or a read over the read timeout.
pub fn family(inspector: &Inspector, id: Uuid) -> Result<Family> {
    Ok(inspector.read(|conn| {
        if !linked(conn)? {
            return Ok(Family::default());
        }
        let parent = conn
            .prepare_cached(
                "SELECT parent_execution_id, parent_seq FROM runtime_executions
                 WHERE execution_id = ?1 AND parent_execution_id IS NOT NULL",
            )?
            .query_map(params![id.to_string()], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })?
            .next()
            .transpose()?;
        let mut budget = TREE_NODES_MAX;
        let (children, children_count) = tree(conn, &id.to_string(), TREE_DEPTH_MAX, &mut budget)?;
        Ok(Family {
            parent,
            children,
            children_count,
        })
    })?)
}

/// The children of `parent` to `depth` levels, taking at most `budget` nodes; with the count
/// of all its children.
fn tree(
    conn: &Connection,
    parent: &str,
    depth: u32,
    budget: &mut usize,
) -> durably::Result<(Vec<ChildNode>, i64)> {
    let count = children_count(conn, parent)?;
    if depth == 0 || *budget == 0 || count == 0 {
        return Ok((Vec::new(), count));
    }
    let take = (*budget).min(CHILDREN_PER_PARENT_MAX as usize);
    let rows = children_page(conn, parent, take as u32)?;
    *budget -= rows.len();
    let mut nodes = Vec::with_capacity(rows.len());
    for row in rows {
        let (children, children_count) = tree(conn, &row.execution_id, depth - 1, budget)?;
        nodes.push(ChildNode {
            row,
            children,
            children_count,
        });
    }
    Ok((nodes, count))
}

fn children_count(conn: &Connection, parent: &str) -> durably::Result<i64> {
    Ok(conn
        .prepare_cached("SELECT count(*) FROM runtime_executions WHERE parent_execution_id = ?1")?
        .query_row(params![parent], |row| row.get(0))?)
}

/// The first `limit` children of `parent`, in start order.
fn children_page(conn: &Connection, parent: &str, limit: u32) -> durably::Result<Vec<ChildRow>> {
    let mut statement = conn.prepare_cached(
        "SELECT r.parent_seq, r.execution_id, e.kind, e.status
         FROM runtime_executions AS r JOIN executions AS e ON e.execution_id = r.execution_id
         WHERE r.parent_execution_id = ?1 ORDER BY r.parent_seq LIMIT ?2",
    )?;
    let rows = statement.query_map(params![parent, limit], |row| {
        Ok(ChildRow {
            seq: row.get(0)?,
            execution_id: row.get(1)?,
            kind: row.get(2)?,
            status: row.get(3)?,
        })
    })?;
    Ok(rows.collect::<durably::db::Result<_>>()?)
}

/// The ids of the first `limit` children of `parent`, in start order, for `ls --parent`.
///
/// # Errors
/// A storage error, or a read over the read timeout.
pub fn children_ids(inspector: &Inspector, parent: Uuid, limit: u32) -> Result<Vec<Uuid>> {
    let ids: Vec<String> = inspector.read(|conn| {
        if !linked(conn)? {
            return Ok(Vec::new());
        }
        Ok(children_page(conn, &parent.to_string(), limit)?
            .into_iter()
            .map(|row| row.execution_id)
            .collect())
    })?;
    // Ids the runtime wrote; one that does not parse is not listed.
    Ok(ids
        .iter()
        .filter_map(|id| Uuid::parse_str(id).ok())
        .collect())
}
