-- durably-journal, migration 6: the schema versions of the crates built on the journal.
--
-- Each crate owns its tables and its numbered migrations. The journal counts its own in
-- `PRAGMA user_version`; a crate built on it (the scheduler, owner `scheduler`) applies its
-- migrations through `Journal::migrate_extension`, which keeps the number applied here, one row
-- per owner, and re-reads it under the write lock, so two processes migrating at once apply
-- each migration once.
CREATE TABLE schema_versions (
    owner   TEXT    PRIMARY KEY,
    -- How many of the owner's numbered migrations are applied.
    version INTEGER NOT NULL CHECK (version >= 1)
) STRICT;
