//! The journal on PostgreSQL: opening (sessions, migrations), the liveness session, the writer's workers and the read
//! pool's sessions. Everything above these files runs the same on both backends, through
//! [`durably_db::Connection`].

pub(crate) mod listen;
pub(crate) mod liveness;
pub(crate) mod migrate;
pub(crate) mod open;
pub(crate) mod readers;
pub(crate) mod workers;
