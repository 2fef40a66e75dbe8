//! The liveness session of a journal on PostgreSQL: opened before anything is written, it holds
//! the instance's advisory key for the journal's whole life (see `durably_lock`'s `session`
//! module for what the key proves, and why a lost session poisons the instance for good).

use std::path::Path;
use std::time::Duration;

use durably_db::{Connection, PgConnection, PgUrl};
use durably_lock::SessionLiveness;
use uuid::Uuid;

use crate::error::{Error, Result};

/// How often the session is pinged: a lost session is noticed within this, and from then on
/// every request of the journal fails before it begins.
pub(crate) const PING_INTERVAL: Duration = Duration::from_secs(1);

/// TCP keepalives of the liveness session, so that the server frees the key of an instance
/// whose host died or whose network split within idle + interval × count (11 s), not the
/// kernel's default two hours. The client side uses the same settings, so a client cut off
/// from the server notices too (the ping then fails). Unix sockets ignore them.
const KEEPALIVES: [(&str, &str); 4] = [
    ("keepalives", "1"),
    ("keepalives_idle", "5"),
    ("keepalives_interval", "2"),
    ("keepalives_retries", "3"),
];

/// Opens the liveness session of a new instance on the server `url` names, takes its key, and
/// starts pinging it every [`PING_INTERVAL`]. The session is named `durably:<instance8>:liveness`
/// after the first id drawn (a collision, which draws another, leaves that name).
///
/// # Errors
/// [`Error::CannotOpen`] when the server cannot be reached, [`Error::Lock`] when every instance
/// id tried collided, [`Error::Io`] when the ping thread cannot start.
pub(crate) fn start(url: &PgUrl, path: &Path) -> Result<SessionLiveness> {
    let first = Uuid::new_v4();
    let conn = connect(url, path, &format!("{}:liveness", short(first)))?;
    let mut drawn = Some(first);
    let session = SessionLiveness::hold_with(conn, || drawn.take().unwrap_or_else(Uuid::new_v4))?;
    session
        .keep_pinging(PING_INTERVAL)
        .map_err(|source| Error::Io {
            action: "start the liveness ping thread of",
            path: path.to_owned(),
            source,
        })?;
    Ok(session)
}

/// A session that holds no key, for a program that only judges holders (an inspector).
///
/// # Errors
/// [`Error::CannotOpen`] when the server cannot be reached.
pub(crate) fn observe(url: &PgUrl, path: &Path) -> Result<SessionLiveness> {
    Ok(SessionLiveness::observe(connect(
        url,
        path,
        "inspect:liveness",
    )?))
}

fn connect(url: &PgUrl, path: &Path, role: &str) -> Result<Connection> {
    let conn = PgConnection::connect(&with_keepalives(url.expose()), role)
        .map_err(|error| super::open::cannot_open(path, &error.into()))?;
    Ok(Connection::from(conn))
}

/// The first 8 hex digits of `instance`, as every session of the instance is named.
fn short(instance: Uuid) -> String {
    let simple = instance.simple().to_string();
    simple.get(..8).unwrap_or(&simple).to_owned()
}

/// `url` with [`KEEPALIVES`] added, as a URL's query parameters or as key-value pairs. They come
/// last, so they override the URL's own: the liveness session's timing is part of the ownership
/// guarantees, not a tuning knob.
fn with_keepalives(url: &str) -> String {
    let is_url = url.contains("://");
    let mut joined = url.to_owned();
    for (key, value) in KEEPALIVES {
        let separator = match (is_url, joined.contains('?')) {
            (true, true) => "&",
            (true, false) => "?",
            (false, _) => " ",
        };
        joined.extend([separator, key, "=", value]);
    }
    joined
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keepalives_join_a_url_or_key_value_pairs() {
        assert_eq!(
            with_keepalives("postgresql://u@h/d"),
            "postgresql://u@h/d?keepalives=1&keepalives_idle=5&keepalives_interval=2\
             &keepalives_retries=3"
        );
        assert_eq!(
            with_keepalives("postgresql://u@/d?host=/tmp/s"),
            "postgresql://u@/d?host=/tmp/s&keepalives=1&keepalives_idle=5\
             &keepalives_interval=2&keepalives_retries=3"
        );
        assert_eq!(
            with_keepalives("host=h dbname=d"),
            "host=h dbname=d keepalives=1 keepalives_idle=5 keepalives_interval=2 \
             keepalives_retries=3"
        );
    }
}
