//! The PostgreSQL side of the journal.

pub(crate) mod liveness;
