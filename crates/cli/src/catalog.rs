//! Whether the journal's database holds a table or a view, on either backend: the commands
//! that read what a runtime or a scheduler adds to a journal (`show`, `fires`, `schedules`)
//! find nothing, rather than fail, on a journal that never had them.

use durably::db::{Connection, Sql};

/// Whether the journal's database holds table `name`: in the file (SQLite), or in the schema
/// the journal's tables are made in (PostgreSQL's `current_schema()`, not any schema of the
/// search path, where another journal's table of that name could be).
///
/// # Errors
/// A storage error.
pub fn table_present(conn: &Connection, name: &str) -> durably::Result<bool> {
    relation_present(conn, Relation::Table, name)
}

/// Whether the journal's database holds view `name`, where [`table_present`] looks.
///
/// # Errors
/// A storage error.
pub fn view_present(conn: &Connection, name: &str) -> durably::Result<bool> {
    relation_present(conn, Relation::View, name)
}

/// The kinds of relation a command asks for.
#[derive(Debug, Clone, Copy)]
enum Relation {
    Table,
    View,
}

impl Relation {
    /// Its kind as the backend's catalog spells it: `sqlite_schema.type`, or
    /// `pg_class.relkind`.
    fn spelled(self, conn: &Connection) -> &'static str {
        const TABLE: Sql = Sql {
            sqlite: "table",
            postgres: "r",
        };
        const VIEW: Sql = Sql {
            sqlite: "view",
            postgres: "v",
        };
        conn.pick(match self {
            Relation::Table => &TABLE,
            Relation::View => &VIEW,
        })
    }
}

fn relation_present(conn: &Connection, kind: Relation, name: &str) -> durably::Result<bool> {
    const PRESENT: Sql = Sql {
        sqlite: "SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE type = ?2 AND name = ?1)",
        postgres: "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class AS c
                                  JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
                                  WHERE n.nspname = current_schema()
                                    AND c.relname = CAST(?1 AS TEXT)
                                    AND CAST(c.relkind AS TEXT) = CAST(?2 AS TEXT))",
    };
    let kind = kind.spelled(conn);
    Ok(conn.query_row(conn.pick(&PRESENT), [name, kind], |row| row.get(0))?)
}
