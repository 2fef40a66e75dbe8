//! [`Target`]: where a journal lives, a SQLite file or a PostgreSQL database.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::connection::Dialect;

/// Where a journal lives. A string that starts with `postgres://` or `postgresql://` names a
/// PostgreSQL database; anything else is a SQLite file's path.
#[derive(Clone, PartialEq, Eq)]
pub enum Target {
    /// A SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL database.
    Postgres(PgUrl),
}

impl Target {
    /// The SQL dialect of the backend this names.
    pub fn dialect(&self) -> Dialect {
        match self {
            Target::Sqlite(_) => Dialect::Sqlite,
            Target::Postgres(_) => Dialect::Postgres,
        }
    }

    /// The SQLite file's path; `None` for a PostgreSQL database.
    pub fn sqlite_path(&self) -> Option<&Path> {
        match self {
            Target::Sqlite(path) => Some(path),
            Target::Postgres(_) => None,
        }
    }

    fn from_text(text: &str) -> Self {
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            Target::Postgres(PgUrl(text.to_owned()))
        } else {
            Target::Sqlite(PathBuf::from(text))
        }
    }
}

/// Shows the path, or the URL with its password hidden.
impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Sqlite(path) => path.display().fmt(f),
            Target::Postgres(url) => url.fmt(f),
        }
    }
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Sqlite(path) => f.debug_tuple("Sqlite").field(path).finish(),
            Target::Postgres(url) => f.debug_tuple("Postgres").field(url).finish(),
        }
    }
}

impl From<&str> for Target {
    fn from(text: &str) -> Self {
        Target::from_text(text)
    }
}

impl From<String> for Target {
    fn from(text: String) -> Self {
        Target::from_text(&text)
    }
}

impl From<&String> for Target {
    fn from(text: &String) -> Self {
        Target::from_text(text)
    }
}

/// A path is a URL when its text is one, so `--db postgres://…` parsed as a path still works.
impl From<&Path> for Target {
    fn from(path: &Path) -> Self {
        match path.to_str() {
            Some(text) => Target::from_text(text),
            None => Target::Sqlite(path.to_path_buf()),
        }
    }
}

impl From<PathBuf> for Target {
    fn from(path: PathBuf) -> Self {
        Target::from(path.as_path())
    }
}

impl From<&PathBuf> for Target {
    fn from(path: &PathBuf) -> Self {
        Target::from(path.as_path())
    }
}

impl From<&Target> for Target {
    fn from(target: &Target) -> Self {
        target.clone()
    }
}

/// A PostgreSQL connection URL (libpq's form). It prints with its password hidden; only
/// [`PgUrl::expose`] gives the password, to connect with.
#[derive(Clone, PartialEq, Eq)]
pub struct PgUrl(String);

impl PgUrl {
    /// The whole URL, password included: for the driver, never for a message.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// This URL with `search_path` set to `schema` in the startup packet's `options`
    /// (`-csearch_path=<schema>`, percent-encoded, as libpq and tokio-postgres decode URL
    /// parameters), added to any `options` the URL already has: a journal in that schema.
    #[must_use]
    pub fn with_search_path(&self, schema: &str) -> PgUrl {
        let option = format!("-csearch_path%3D{schema}");
        let (base, query) = self.0.split_once('?').unwrap_or((&self.0, ""));
        let mut pairs: Vec<String> = query
            .split('&')
            .filter(|pair| !pair.is_empty())
            .map(str::to_owned)
            .collect();
        match pairs.iter_mut().find(|pair| pair.starts_with("options=")) {
            Some(options) => {
                options.push_str("%20");
                options.push_str(&option);
            }
            None => pairs.push(format!("options={option}")),
        }
        PgUrl(format!("{base}?{}", pairs.join("&")))
    }
}

/// `postgresql://user:***@host/db?password=***`: a password in the user part or in the query is
/// replaced, everything else shown.
impl fmt::Display for PgUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact(&self.0))
    }
}

impl fmt::Debug for PgUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", redact(&self.0))
    }
}

fn redact(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        Some((user_info, host)) => match user_info.split_once(':') {
            Some((user, _password)) => format!("{user}:***@{host}"),
            None => authority.to_owned(),
        },
        None => authority.to_owned(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let query: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((key, _)) if key.eq_ignore_ascii_case("password") => format!("{key}=***"),
                    _ => pair.to_owned(),
                })
                .collect();
            format!("{path}?{}", query.join("&"))
        }
        None => tail.to_owned(),
    };
    format!("{scheme}://{authority}{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_postgres_and_anything_else_a_path() {
        assert_eq!(Target::from("agent.db").dialect(), Dialect::Sqlite);
        assert_eq!(Target::from("postgres://h/db").dialect(), Dialect::Postgres);
        assert_eq!(
            Target::from(Path::new("postgresql://h/db")).dialect(),
            Dialect::Postgres
        );
        assert_eq!(Target::from("./postgres://x").dialect(), Dialect::Sqlite);
    }

    #[test]
    fn a_search_path_joins_the_options_the_url_has() {
        let url = |text: &str| match Target::from(text) {
            Target::Postgres(url) => url,
            Target::Sqlite(_) => unreachable!("{text} is a URL"),
        };
        let schema = |text: &str| url(text).with_search_path("t_1").expose().to_owned();
        assert_eq!(
            schema("postgresql://u@/d?host=/tmp/x"),
            "postgresql://u@/d?host=/tmp/x&options=-csearch_path%3Dt_1"
        );
        assert_eq!(
            schema("postgresql://u@h/d"),
            "postgresql://u@h/d?options=-csearch_path%3Dt_1"
        );
        assert_eq!(
            schema("postgresql://u@h/d?options=-cx%3D1"),
            "postgresql://u@h/d?options=-cx%3D1%20-csearch_path%3Dt_1"
        );
        assert_eq!(
            schema("postgresql://u@h/d?options=-cwork_mem%3D8MB&sslmode=disable"),
            "postgresql://u@h/d?options=-cwork_mem%3D8MB%20-csearch_path%3Dt_1&sslmode=disable"
        );
    }

    #[test]
    fn passwords_never_print() {
        let target = Target::from(
            "postgresql://ann:s3cret@db.example:5432/agents?password=s3cret&sslmode=require",
        );
        let shown = format!("{target} {target:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(
            shown.contains(
                "postgresql://ann:***@db.example:5432/agents?password=***&sslmode=require"
            )
        );
        let plain = Target::from("postgresql://durably@/durably?host=/tmp/x");
        assert_eq!(
            plain.to_string(),
            "postgresql://durably@/durably?host=/tmp/x"
        );
    }
}
