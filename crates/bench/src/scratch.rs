//! [`Scratch`]: where one scenario's journal and baseline live, removed when it drops.

use std::path::Path;

use durably::db::Target;
use tempfile::TempDir;

use crate::error::{BenchError, Result};

/// One scenario's scratch: a directory under `--dir` (its SQLite files, and anything else a
/// scenario puts beside them), and on PostgreSQL a new schema on the server. The schema is
/// dropped, then the directory removed, when this drops; drop the scenario's journals first.
#[derive(Debug)]
pub struct Scratch {
    // Declared first so it drops first: nothing in the directory outlives the schema's use.
    /// Held for its drop, which drops the schema.
    #[cfg(feature = "postgres")]
    _schema: Option<crate::postgres::Schema>,
    /// The schema's target, kept beside it so that the SQLite-only build reads it too.
    schema_target: Option<Target>,
    dir: TempDir,
}

impl Scratch {
    /// A new scratch directory in `root`, and a new schema on `server` when there is one.
    ///
    /// # Errors
    /// The directory cannot be made, or the server cannot be reached or refuses the schema.
    pub fn new(root: &Path, server: Option<&Target>) -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("durably-bench-")
            .tempdir_in(root)
            .map_err(|source| BenchError::io("create a scratch directory in", root, source))?;
        #[cfg(feature = "postgres")]
        let schema = match server {
            Some(Target::Postgres(url)) => Some(crate::postgres::Schema::create(url)?),
            Some(Target::Sqlite(_)) | None => None,
        };
        #[cfg(feature = "postgres")]
        let schema_target = schema.as_ref().map(|schema| schema.target().clone());
        #[cfg(not(feature = "postgres"))]
        let schema_target = match server {
            Some(_) => {
                return Err(BenchError::Setup(
                    crate::context::POSTGRES_NOT_BUILT.to_owned(),
                ));
            }
            None => None,
        };
        Ok(Self {
            #[cfg(feature = "postgres")]
            _schema: schema,
            schema_target,
            dir,
        })
    }

    /// The scratch directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The schema's target, which every journal of the scenario opens; `None` on SQLite, where
    /// each journal is a file the scenario names.
    pub fn schema(&self) -> Option<&Target> {
        self.schema_target.as_ref()
    }

    /// Where the baseline commits: the schema, or a file of its own in the directory.
    pub fn baseline(&self) -> Target {
        self.schema()
            .cloned()
            .unwrap_or_else(|| Target::from(self.dir().join("baseline.db")))
    }
}
