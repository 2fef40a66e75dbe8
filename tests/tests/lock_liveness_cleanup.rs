//! Guarantee: liveness files of dead instances do not pile up, and registering instances
//! concurrently never fails or deletes a live instance's file.
//!
//! Method: `lock_holder` children register (each creates and locks `<instance>.live` beside the
//! database) and are SIGKILLed. The kernel drops their `flock`s but leaves the files. The test
//! then shows that the next `Locker::new` removes every file whose lock is free, and that
//! judging a dead holder removes its file too, while files of live instances (a child that is
//! still running, and this process's own) stay. A separate test registers and drops instances
//! from many threads at once, each with its own descriptor (a `flock` is per open file, so
//! threads contend exactly like processes), and requires every registration to succeed.

mod lock_support;

use std::sync::{Arc, Barrier};

use durably_lock::{DeathReason, Judgement, LivenessDir, Locker, LockerConfig, read};
use lock_support::{Scratch, immediate, spawn_holder};

#[test]
fn the_next_locker_removes_the_liveness_files_of_killed_instances() {
    let scratch = Scratch::new();
    // All register before any dies: each registration cleans up the files of dead instances.
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
fn judging_a_killed_holder_removes_its_liveness_file() {
    let scratch = Scratch::new();
    // Registered first, so its own cleanup has already run when the child dies.
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
    assert!(
        !scratch.liveness_files().contains(&file),
        "the judge removed the free file"
    );
    // With the file gone the judgement falls back to the pid, which is gone too.
    assert_eq!(
        locker.judge().judge(&holder),
        Judgement::Dead(DeathReason::NoSuchProcess { pid: holder.pid })
    );
    let mut conn = scratch.conn();
    let acquired = immediate(&mut conn, |conn| locker.try_acquire(conn, "resource")).unwrap();
    assert!(matches!(
        acquired,
        durably_lock::Acquire::Acquired {
            epoch: 2,
            took_over: Some(_)
        }
    ));
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
