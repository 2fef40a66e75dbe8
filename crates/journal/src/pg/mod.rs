//! The PostgreSQL backend of the journal.

pub(crate) mod listen;
