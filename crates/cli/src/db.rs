//! Opening the journal a command names, without creating one that does not exist.

use std::path::{Path, PathBuf};

use durably::Journal;

use crate::error::{CliError, Result};

/// The database path of a command that needs one: `--db` or `DURABLY_DB`.
///
/// # Errors
/// A usage error when neither is given.
pub fn required(db: Option<&Path>) -> Result<PathBuf> {
    db.map(Path::to_owned)
        .ok_or_else(|| CliError::usage("no database given: pass --db PATH or set DURABLY_DB=PATH"))
}

/// Opens an existing journal for inspection or an operator action. It never creates a file,
/// never runs the crash-orphan sweep on open (only `durably sweep` does), and never touches a
/// file that is not a durably journal: the journal refuses foreign and garbage files before
/// writing anything. A durably file of an older schema is migrated, as any open would.
///
/// # Errors
/// The file is missing or is a directory, or the journal refused it.
pub fn open_existing(path: &Path) -> Result<Journal> {
    let shown = crate::escape::escape(&path.display().to_string());
    match std::fs::metadata(path) {
        Ok(metadata) if metadata.is_file() => {}
        Ok(_) => {
            return Err(CliError::failure(format!(
                "{shown} is not a file; pass the journal's database file with --db"
            )));
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Err(CliError::failure(format!(
                "no database at {shown}; check --db or DURABLY_DB (this command never creates one; \
                 `durably demo` makes a sample)"
            )));
        }
        Err(error) => {
            return Err(CliError::failure(format!("cannot read {shown}: {error}")));
        }
    }
    Ok(Journal::builder(path).sweep_on_open(false).open()?)
}

/// A tokio runtime for the journal's async calls.
///
/// # Errors
/// When the runtime cannot start (out of threads or memory).
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|error| CliError::failure(format!("cannot start the async runtime: {error}")))
}
