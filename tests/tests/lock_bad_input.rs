//! Guarantee: nonsense never panics and never kills a live holder. A lock row full of nonsense,
//! a foreign `locks` table, an unusable liveness directory or a missing or garbled `/proc`
//! each give either a judgement with a reason ("cannot be judged", which counts as alive) or a
//! typed error, and a holder whose liveness file is locked is alive whatever its row says.
//!
//! Method: rows are written directly with SQL. Values the STRICT table accepts (a negative pid,
//! a boot id or instance id that is not a UUID, a garbage heartbeat under a lease) go into the
//! real table; values it refuses (text in a number column, a negative epoch) go into a
//! non-STRICT foreign `locks` table in a scratch database. `/proc` is replaced by
//! `ProcFs::at(dir)` over an empty or hand-made tree, and the liveness directory by a path that
//! cannot be a directory.

// Helpers outside the #[test] functions fail the test by panicking, as the tests do.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use durably_db::Connection;
use durably_lock::{
    Acquire, Error, Judge, Judgement, LivenessDir, Locker, LockerConfig, ProcFs, SystemClock, held,
    read,
};
use support::Scratch;
use support::lock::{FakeProcesses, immediate, insert_holder, own_identity, spawn_holder};
use uuid::Uuid;

/// Crafts a row from this process's identity with `change` applied, and acquires it.
fn acquire_crafted(
    scratch: &Scratch,
    locker: &Locker,
    resource: &str,
    instance_id: &str,
    change: impl FnOnce(&mut durably_lock::ProcessIdentity),
) -> Acquire {
    let conn = scratch.conn();
    let mut holder = own_identity();
    change(&mut holder);
    insert_holder(&conn, resource, 3, &holder, instance_id);
    immediate(&conn, |conn| locker.try_acquire(conn, resource)).unwrap()
}

fn assert_unknown(acquire: &Acquire, reason: &str) {
    let Acquire::Held {
        judgement: Judgement::Unknown(why),
        ..
    } = acquire
    else {
        panic!("expected a holder that cannot be judged ({reason}), got {acquire:?}");
    };
    assert!(why.contains(reason), "{why:?} does not mention {reason:?}");
}

#[test]
fn nonsense_the_strict_table_accepts_is_judged_unknown_and_kept() {
    let scratch = Scratch::with_lock_tables();
    let locker = scratch.locker();
    let instance = || Uuid::new_v4().to_string();
    for (resource, pid) in [("negative", -5), ("zero", 0), ("huge", i64::MAX)] {
        let acquired = acquire_crafted(&scratch, &locker, resource, &instance(), |holder| {
            holder.pid = pid;
        });
        assert_unknown(&acquired, &format!("pid {pid} is not a valid pid"));
    }
    let acquired = acquire_crafted(&scratch, &locker, "boot", &instance(), |holder| {
        holder.boot_id = "not a boot id \u{1b}[2J".to_owned();
    });
    assert_unknown(&acquired, "is not a UUID");
    let acquired = acquire_crafted(&scratch, &locker, "instance", "instance-7", |_| {});
    assert_unknown(&acquired, "instance id \"instance-7\" is not a UUID");
    let acquired = acquire_crafted(&scratch, &locker, "other-host", &instance(), |holder| {
        holder.boot_id = Uuid::new_v4().to_string();
        holder.hostname = "somewhere-else".to_owned();
    });
    assert_unknown(&acquired, "another host");

    let conn = scratch.conn();
    // A lease with an unreadable heartbeat or a nonsense length cannot expire.
    conn.execute(
        "UPDATE locks SET lease_ms = 1, heartbeat_at = 'yesterday' WHERE resource = 'negative'",
        [],
    )
    .unwrap();
    let again = immediate(&scratch.conn(), |conn| locker.try_acquire(conn, "negative")).unwrap();
    assert_unknown(&again, "not a valid pid");
    assert!(locker.dead_holders(&conn).unwrap().is_empty());
    assert_eq!(
        held(&conn).unwrap().len(),
        6,
        "every nonsense row is still held"
    );
}

#[test]
fn a_foreign_locks_table_gives_corrupt_errors() {
    let dir = tempfile::tempdir().unwrap();
    let conn = Connection::from(rusqlite::Connection::open(dir.path().join("foreign.db")).unwrap());
    conn.execute_batch(
        "CREATE TABLE locks (resource TEXT PRIMARY KEY, epoch, instance_id, pid, start_time,
                             boot_id, pid_ns, hostname, acquired_at, heartbeat_at, lease_ms,
                             released_at);
         INSERT INTO locks VALUES ('text-pid', 2, 'x', 'forty-two', 1, 'b', 1, 'h', 'a', 'h', NULL, NULL);
         INSERT INTO locks VALUES ('negative-epoch', -3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
         INSERT INTO locks VALUES ('null-start', 2, 'x', 42, NULL, 'b', 1, 'h', 'a', 'h', NULL, NULL);
         INSERT INTO locks VALUES ('blob-epoch', x'00ff', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);",
    )
    .unwrap();
    let locker = Locker::new(LockerConfig::new(LivenessDir::at(dir.path().join("live")))).unwrap();
    for resource in ["text-pid", "negative-epoch", "null-start", "blob-epoch"] {
        let error = read(&conn, resource).unwrap_err();
        assert!(
            matches!(error, Error::Corrupt { .. }),
            "{resource}: {error}"
        );
        let error = locker.try_acquire(&conn, resource).unwrap_err();
        assert!(
            matches!(error, Error::Corrupt { .. }),
            "{resource}: {error}"
        );
    }
    // Listing held locks strictly reports the damage; the sweep's view skips the damaged rows
    // (never judging them dead), so one bad row cannot block reclaiming every other lock.
    let error = durably_lock::held(&conn).unwrap_err();
    assert!(matches!(error, Error::Corrupt { .. }), "{error}");
    assert_eq!(locker.dead_holders(&conn).unwrap(), Vec::new());

    // No `locks` table at all: a storage error, not a panic.
    let empty = Connection::from(rusqlite::Connection::open_in_memory().unwrap());
    let error = locker.try_acquire(&empty, "anything").unwrap_err();
    assert!(matches!(error, Error::Storage(_)), "{error}");
}

#[test]
fn an_unusable_liveness_directory_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"").unwrap();
    for path in [file.clone(), file.join("below-a-file")] {
        let error = Locker::new(LockerConfig::new(LivenessDir::at(&path))).unwrap_err();
        assert!(matches!(error, Error::LivenessDir { .. }), "{error}");
    }
    let read_only = dir.path().join("read-only");
    std::fs::create_dir(&read_only).unwrap();
    std::fs::set_permissions(&read_only, std::fs::Permissions::from_mode(0o500)).unwrap();
    let result = Locker::new(LockerConfig::new(LivenessDir::at(&read_only)));
    // SAFETY: geteuid has no preconditions. Root ignores directory permissions.
    if unsafe { libc::geteuid() } != 0 {
        let error = result.unwrap_err();
        assert!(matches!(error, Error::LivenessDir { .. }), "{error}");
    }
}

/// A hand-made `/proc` tree with this process's own entries, as `ProcFs::at` reads them.
fn fake_proc(root: &std::path::Path) {
    let copy = |relative: &str| {
        let target = root.join(relative);
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::write(&target, std::fs::read(format!("/proc/{relative}")).unwrap()).unwrap();
    };
    copy("self/stat");
    copy("sys/kernel/random/boot_id");
    copy("sys/kernel/hostname");
    std::fs::create_dir_all(root.join("self/ns")).unwrap();
    std::fs::write(root.join("self/ns/pid"), b"").unwrap();
}

#[test]
fn a_missing_or_garbled_proc_is_a_typed_error_or_unknown() {
    let scratch = Scratch::with_lock_tables();
    let empty = tempfile::tempdir().unwrap();
    let mut config = LockerConfig::new(scratch.liveness());
    config.processes = Arc::new(ProcFs::at(empty.path()));
    let error = Locker::new(config).unwrap_err();
    assert!(matches!(error, Error::Identity { .. }), "{error}");

    let tree = tempfile::tempdir().unwrap();
    fake_proc(tree.path());
    let mut config = LockerConfig::new(scratch.liveness());
    config.processes = Arc::new(ProcFs::at(tree.path()));
    let locker = Locker::new(config).unwrap();
    let me = locker.identity().clone();
    let mut holder = me.clone();
    holder.pid = 777;

    // No /proc/777: the process does not exist, in the namespace this /proc describes.
    let acquired = acquire_crafted(
        &scratch,
        &locker,
        "missing",
        &Uuid::new_v4().to_string(),
        |h| {
            *h = holder.clone();
        },
    );
    assert!(
        matches!(
            acquired,
            Acquire::Acquired {
                took_over: Some(_),
                ..
            }
        ),
        "{acquired:?}"
    );
    // A garbled /proc/777/stat is no evidence of anything.
    std::fs::create_dir_all(tree.path().join("777")).unwrap();
    std::fs::write(tree.path().join("777/stat"), b"777 (x) S 1 2 3").unwrap();
    let acquired = acquire_crafted(
        &scratch,
        &locker,
        "garbled",
        &Uuid::new_v4().to_string(),
        |h| {
            *h = holder.clone();
        },
    );
    assert_unknown(&acquired, "fewer than 22 fields");
    std::fs::write(tree.path().join("self/stat"), b"garbage").unwrap();
    let mut config = LockerConfig::new(scratch.liveness());
    config.processes = Arc::new(ProcFs::at(tree.path()));
    let error = Locker::new(config).unwrap_err();
    assert!(matches!(error, Error::ProcFormat { .. }), "{error}");
}

#[test]
fn a_live_holder_is_alive_whatever_its_row_or_our_proc_says() {
    let scratch = Scratch::with_lock_tables();
    let (mut child, instance) = spawn_holder(&scratch.database, "resource", &[]);
    child.send("acquire");
    assert_eq!(child.expect("acquired"), ["1", "none"]);
    // Damage everything in the row but the instance id.
    scratch
        .conn()
        .execute(
            "UPDATE locks SET pid = -1, start_time = 0, boot_id = 'garbage', pid_ns = 0,
                              hostname = '', heartbeat_at = 'never'",
            [],
        )
        .unwrap();
    // And judge from a /proc in which no process exists.
    let processes = FakeProcesses::new(own_identity());
    let judge = Judge::new(
        own_identity(),
        scratch.liveness(),
        processes,
        Arc::new(SystemClock),
    );
    let row = read(&scratch.conn(), "resource").unwrap().unwrap();
    let holder = row.holder.unwrap();
    assert_eq!(holder.instance_id, instance);
    let verdict = judge.judge(&holder);
    assert!(matches!(verdict, Judgement::Alive(_)), "{verdict}");
    let locker = scratch.locker();
    let refused = immediate(&scratch.conn(), |conn| locker.try_acquire(conn, "resource"));
    assert!(matches!(refused, Ok(Acquire::Held { .. })), "{refused:?}");
    child.finish();
}
