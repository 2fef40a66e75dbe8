-- durably-lock: exclusive-open locks as pid-stamped rows.
--
-- One row per lockable resource (the journal uses the execution id). A row is never deleted while
-- its resource exists: release clears the holder columns and keeps `epoch`, so a fencing epoch
-- only ever grows and a holder frozen before a takeover can never match a later epoch.
CREATE TABLE locks (
    resource     TEXT    PRIMARY KEY,
    -- Fencing epoch: bumped by every acquire and every takeover.
    epoch        INTEGER NOT NULL CHECK (epoch >= 1),
    -- The holder; all NULL when the lock is free.
    instance_id  TEXT,
    pid          INTEGER,
    -- Process start time, /proc/<pid>/stat field 22, in clock ticks after boot.
    start_time   INTEGER,
    boot_id      TEXT,
    -- Inode of /proc/<pid>/ns/pid: holders in another pid namespace cannot be judged by pid.
    pid_ns       INTEGER,
    hostname     TEXT,
    acquired_at  TEXT,
    heartbeat_at TEXT,
    -- Opt-in lease: a holder that cannot be judged counts as dead once heartbeat_at + lease_ms
    -- has passed. NULL means no lease: an unjudgeable holder stays alive.
    lease_ms     INTEGER CHECK (lease_ms IS NULL OR lease_ms > 0),
    released_at  TEXT,
    CHECK ((instance_id IS NULL) = (pid IS NULL))
) STRICT;

-- Serves the orphan sweep and `durably locks`: only held rows are ever scanned.
CREATE INDEX locks_held ON locks (instance_id) WHERE instance_id IS NOT NULL;
