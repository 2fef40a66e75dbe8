//! Guarantee: a holder is judged by who it is, not by its pid alone. A pid that now belongs to
//! another process (different start time) is dead, a holder from another boot of this host is
//! dead, an exited process waiting to be reaped (a zombie) is dead, and a running process with
//! the recorded start time is alive.
//!
//! Method: holder records are crafted for holders whose instance has no liveness file, so only
//! the boot id and `/proc` tests can decide. Against the real `/proc`, this process stands in
//! for a live holder and for a reused pid (its own pid with another start time), and a real
//! zombie is made by spawning a child and not waiting for it until `/proc/<pid>/stat` shows
//! state `Z`. A fake process table then covers the remaining shapes exactly. Crafted rows in
//! the `locks` table show the same judgements drive `try_acquire`.

mod support;

use std::process::{Command, Stdio};
use std::sync::Arc;

use chrono::Utc;
use durably_lock::{
    Acquire, DeathReason, HolderRecord, Judge, Judgement, ProcessIdentity, ProcessStat,
    ProcessTable, SystemClock, TakeOver, format_timestamp,
};
use support::lock::{
    FakeProcesses, FakeStat, immediate, insert_holder, own_identity, process_state,
    reused_pid_holder,
};
use support::{Scratch, wait_until};
use uuid::Uuid;

/// A record for `holder` whose instance has no liveness file anywhere.
fn record(holder: &ProcessIdentity) -> HolderRecord {
    let now = format_timestamp(Utc::now());
    HolderRecord {
        instance_id: Uuid::new_v4().to_string(),
        pid: holder.pid,
        start_time: holder.start_time,
        boot_id: holder.boot_id.clone(),
        pid_ns: holder.pid_ns,
        hostname: holder.hostname.clone(),
        acquired_at: now.clone(),
        heartbeat_at: now,
        lease_ms: None,
    }
}

#[test]
fn real_proc_tells_a_live_holder_from_a_reused_pid_and_another_boot() {
    let scratch = Scratch::with_lock_tables();
    let locker = scratch.locker();
    let judge = locker.judge();
    let me = own_identity();

    let alive = judge.judge(&record(&me));
    assert!(matches!(alive, Judgement::Alive(_)), "{alive}");

    let reused = reused_pid_holder();
    assert_eq!(
        judge.judge(&record(&reused)),
        Judgement::Dead(DeathReason::PidReused {
            pid: me.pid,
            recorded_start: me.start_time + 1,
            current_start: me.start_time,
        })
    );

    let mut other_boot = me.clone();
    other_boot.boot_id = Uuid::new_v4().to_string();
    let verdict = judge.judge(&record(&other_boot));
    assert_eq!(
        verdict,
        Judgement::Dead(DeathReason::BootIdChanged {
            holder: other_boot.boot_id.clone()
        })
    );
    // Another boot id under another host name is another host: never judged, counted alive.
    other_boot.hostname = format!("{}-elsewhere", me.hostname);
    let elsewhere = judge.judge(&record(&other_boot));
    assert!(matches!(elsewhere, Judgement::Unknown(_)), "{elsewhere}");
}

#[test]
fn a_real_zombie_is_dead() {
    let scratch = Scratch::with_lock_tables();
    let locker = scratch.locker();
    // This test binary itself, listing its tests, exits at once; it is not waited for.
    let mut child = Command::new(std::env::current_exe().unwrap())
        .arg("--list")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    wait_until("the unreaped child is a zombie", || {
        process_state(pid) == Some('Z')
    });
    let stat = durably_lock::ProcFs::default()
        .stat(i64::from(pid))
        .unwrap()
        .unwrap();
    let mut zombie = own_identity();
    zombie.pid = i64::from(pid);
    zombie.start_time = stat.start_time;
    let verdict = locker.judge().judge(&record(&zombie));
    child.wait().unwrap();
    assert_eq!(
        verdict,
        Judgement::Dead(DeathReason::Zombie {
            pid: i64::from(pid)
        })
    );
}

#[test]
fn a_fake_process_table_decides_each_shape() {
    let scratch = Scratch::with_lock_tables();
    let own = own_identity();
    let processes = FakeProcesses::new(own.clone());
    let judge = Judge::new(
        own.clone(),
        scratch.liveness(),
        processes.clone(),
        Arc::new(SystemClock),
    );
    let mut holder = own.clone();
    holder.pid = 4242;
    holder.start_time = 100;
    let running = |state| {
        FakeStat::Running(ProcessStat {
            start_time: 100,
            state,
        })
    };

    processes.set(4242, running('S'));
    assert!(matches!(judge.judge(&record(&holder)), Judgement::Alive(_)));
    // A stopped process is alive: stopping is not dying.
    processes.set(4242, running('T'));
    assert!(matches!(judge.judge(&record(&holder)), Judgement::Alive(_)));
    processes.set(4242, running('Z'));
    assert_eq!(
        judge.judge(&record(&holder)),
        Judgement::Dead(DeathReason::Zombie { pid: 4242 })
    );
    processes.set(4242, running('X'));
    assert!(judge.judge(&record(&holder)).is_dead());
    processes.set(
        4242,
        FakeStat::Running(ProcessStat {
            start_time: 555,
            state: 'S',
        }),
    );
    assert_eq!(
        judge.judge(&record(&holder)),
        Judgement::Dead(DeathReason::PidReused {
            pid: 4242,
            recorded_start: 100,
            current_start: 555
        })
    );
    processes.set(4242, FakeStat::Missing);
    assert_eq!(
        judge.judge(&record(&holder)),
        Judgement::Dead(DeathReason::NoSuchProcess { pid: 4242 })
    );
    // A pid in another namespace means nothing here, whatever our /proc says about it.
    holder.pid_ns = own.pid_ns + 1;
    assert!(matches!(
        judge.judge(&record(&holder)),
        Judgement::Unknown(_)
    ));
}

#[test]
fn crafted_rows_drive_acquire_by_the_same_judgements() {
    let scratch = Scratch::with_lock_tables();
    let locker = scratch.locker();
    let conn = scratch.conn();
    let me = own_identity();
    insert_holder(
        &conn,
        "reused",
        5,
        &reused_pid_holder(),
        &Uuid::new_v4().to_string(),
    );
    insert_holder(&conn, "live", 5, &me, &Uuid::new_v4().to_string());
    let mut other_boot = me.clone();
    other_boot.boot_id = Uuid::new_v4().to_string();
    insert_holder(
        &conn,
        "rebooted",
        5,
        &other_boot,
        &Uuid::new_v4().to_string(),
    );

    let reused = immediate(&conn, |conn| locker.try_acquire(conn, "reused")).unwrap();
    let Acquire::Acquired {
        epoch: 6,
        took_over: Some(takeover),
    } = reused
    else {
        panic!("a reused pid's lock was not taken over: {reused:?}");
    };
    assert!(matches!(takeover.reason, DeathReason::PidReused { .. }));
    let rebooted = immediate(&conn, |conn| locker.try_acquire(conn, "rebooted")).unwrap();
    assert!(
        matches!(
            &rebooted,
            Acquire::Acquired {
                epoch: 6,
                took_over: Some(TakeOver {
                    reason: DeathReason::BootIdChanged { .. },
                    ..
                })
            }
        ),
        "{rebooted:?}"
    );
    let live = immediate(&conn, |conn| locker.try_acquire(conn, "live")).unwrap();
    assert!(
        matches!(
            &live,
            Acquire::Held {
                epoch: 5,
                judgement: Judgement::Alive(_),
                ..
            }
        ),
        "{live:?}"
    );
}
