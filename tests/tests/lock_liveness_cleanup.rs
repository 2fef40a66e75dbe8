//! Guarantee: liveness files of dead instances do not pile up, and registering instances
//! concurrently never fails or deletes a live instance's file.
//!
//! Method: `lock_holder` children register (each creates and locks `<instance>.live` beside the
//! database) and are SIGKILLed. The kernel drops their `flock`s but leaves the files. The test
//! then shows that the cleanup the orphan sweep runs (`remove_dead_liveness_files`) removes
//! every free file that no held lock row names, while files of live instances (a child that is
//! still running, and this process's own) stay; and that judging a dead holder leaves its file
//! in place as evidence until its lock is reclaimed, after which the cleanup removes it. A
//! separate test registers and drops instances from many threads at once, each with its own
//! descriptor (a `flock` is per open file, so threads contend exactly like processes), racing
//! with cleanups, and requires every registration to succeed.

mod support;

use std::sync::{Arc, Barrier};

use durably_lock::{DeathReason, Judgement, LivenessDir, Locker, LockerConfig, read};
use support::Scratch;
use support::lock::{immediate, spawn_holder};

#[test]
fn the_cleanup_removes_the_liveness_files_of_killed_instances() {
    let scratch = Scratch::with_lock_tables();
    let children: Vec<_> = (0..5)
        .map(|_| spawn_holder(&scratch.database, "unused", &[]))
        .collect();
    let (survivor, survivor_instance) = spawn_holder(&scratch.database, "unused", &[]);
    let mut killed = Vec::new();
    for (mut child, instance) in children {
        child.kill();
        killed.push(format!("{instance}.live"));
    }
    // A crash between creating and renaming a liveness file leaves a pending file behind.
    std::fs::write(scratch.liveness().path().join("pending-crashed"), b"").unwrap();
    let files = scratch.liveness_files();
    for file in &killed {
        assert!(
            files.contains(file),
            "SIGKILL leaves the file behind: {files:?}"
        );
    }

    let locker = scratch.locker();
    assert_eq!(
        locker.remove_dead_liveness_files(&scratch.conn()).unwrap(),
        6
    );
    let mut expected = vec![
        format!("{survivor_instance}.live"),
        format!("{}.live", locker.instance_id()),
    ];
    expected.sort();
    assert_eq!(
        scratch.liveness_files(),
        expected,
        "only live instances keep files"
    );
    survivor.finish();
    drop(locker);
    assert_eq!(
        scratch.liveness_files(),
        Vec::<String>::new(),
        "a clean exit removes its file"
    );
}

#[test]
fn a_killed_holders_liveness_file_stays_until_its_lock_is_reclaimed() {
    let scratch = Scratch::with_lock_tables();
    let locker = scratch.locker();
    let (mut child, instance) = spawn_holder(&scratch.database, "resource", &[]);
    child.send("acquire");
    assert_eq!(child.expect("acquired")[0], "1");
    child.kill();
    let file = format!("{instance}.live");
    assert!(scratch.liveness_files().contains(&file));

    let row = read(&scratch.conn(), "resource").unwrap().unwrap();
    let holder = row.holder.unwrap();
    assert_eq!(
        locker.judge().judge(&holder),
        Judgement::Dead(DeathReason::LivenessFileUnlocked)
    );
    assert_eq!(
        locker.remove_dead_liveness_files(&scratch.conn()).unwrap(),
        0
    );
    assert!(
        scratch.liveness_files().contains(&file),
        "a free file that a held lock still names is kept as evidence"
    );
    let conn = scratch.conn();
    let acquired = immediate(&conn, |conn| locker.try_acquire(conn, "resource")).unwrap();
    assert!(matches!(
        acquired,
        durably_lock::Acquire::Acquired {
            epoch: 2,
            took_over: Some(_)
        }
    ));
    assert_eq!(
        locker.remove_dead_liveness_files(&scratch.conn()).unwrap(),
        1
    );
    assert!(!scratch.liveness_files().contains(&file));
}

#[test]
fn instances_registering_at_once_all_succeed() {
    const THREADS: usize = 8;
    const ROUNDS: usize = 300;
    let dir = tempfile::tempdir().unwrap();
    let liveness = LivenessDir::at(dir.path().join("live"));
    let start = Arc::new(Barrier::new(THREADS));
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let liveness = liveness.clone();
            let start = Arc::clone(&start);
            std::thread::spawn(move || {
                start.wait();
                for round in 0..ROUNDS {
                    let locker = Locker::new(LockerConfig::new(liveness.clone()))
                        .unwrap_or_else(|error| panic!("round {round}: {error}"));
                    // Every registration races with the other threads' cleanups.
                    liveness
                        .remove_dead(&std::collections::HashSet::new())
                        .unwrap();
                    // A live instance's file must survive every other thread's cleanup.
                    let file = liveness
                        .path()
                        .join(format!("{}.live", locker.instance_id()));
                    assert!(
                        file.exists(),
                        "round {round}: a live instance lost its file"
                    );
                    drop(locker);
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    assert_eq!(std::fs::read_dir(liveness.path()).unwrap().count(), 0);
}
