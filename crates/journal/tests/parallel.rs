//! Guarantee: steps of one handle run at the same time and stay deterministic. A step's seq is
//! its call order, reserved when it is called, whatever order the steps are polled in or
//! finish in; the journal (read with SQL) holds them under those seqs; a resumed handle
//! replays them in call order with the same results, and a recorded step replays while a
//! sibling is still running. A step future dropped before it finished halts the handle, and
//! its siblings' recorded results stay. A hook that declines while a later step is already
//! called halts the handle with a typed error.
//!
//! Method: in-process handles on a scratch journal. Steps are ordered by `tokio::sync`
//! channels their closures wait on (never by sleeps), `tokio::join!` drives them, and the
//! `steps` table is read back with SQL.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use durably_journal::{Effect, Error, Journal, Policy, StepError, Timing};
use support::{Scratch, start};
use tokio::sync::{Notify, oneshot};
use uuid::Uuid;

/// The `(seq, name, state)` rows of `id`, in seq order.
fn rows(journal: &Journal, id: Uuid) -> Vec<(u32, String, String)> {
    journal
        .read(|conn| {
            let mut statement = conn.prepare(
                "SELECT seq, name, state FROM steps WHERE execution_id = ?1 ORDER BY seq",
            )?;
            let rows = statement
                .query_map([id.to_string()], |row| {
                    Ok((row.get(0)?, row.get(1)?, row.get(2)?))
                })?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .unwrap()
}

/// A closure that must not run: the step is recorded and replays.
fn never<T>() -> std::future::Ready<Result<T, StepError>> {
    panic!("a recorded step ran its closure")
}

#[tokio::test]
async fn steps_finishing_in_reverse_call_order_get_call_order_seqs_and_replay_so() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let id = Uuid::new_v4();
    let execution = start(&journal, id).await;

    // c finishes first, then b, then a: each closure waits for its successor's signal.
    let (a_go, a_wait) = oneshot::channel::<()>();
    let (b_go, b_wait) = oneshot::channel::<()>();
    let mut a_wait = Some(a_wait);
    let a = execution.pure("a", move || {
        let wait = a_wait.take().unwrap();
        async move {
            wait.await.unwrap();
            Ok("from a".to_owned())
        }
    });
    let mut b_wait = Some(b_wait);
    let b = execution.idempotent("b", move |_| {
        let wait = b_wait.take().unwrap();
        async move {
            wait.await.unwrap();
            Ok("from b".to_owned())
        }
    });
    let c = execution.guarded("c", Policy::Fail, |_| async { Ok("from c".to_owned()) });
    // Polled in reverse order too.
    let (c, b, a) = tokio::join!(
        async {
            let c = c.await;
            b_go.send(()).unwrap();
            c
        },
        async {
            let b = b.await;
            a_go.send(()).unwrap();
            b
        },
        a
    );
    assert_eq!(a.unwrap(), "from a");
    assert_eq!(b.unwrap(), "from b");
    assert_eq!(c.unwrap().into_result().ok(), Some("from c".to_owned()));
    assert_eq!(execution.next_seq(), 3);
    assert_eq!(
        rows(&journal, id),
        [
            (0, "a".to_owned(), "completed".to_owned()),
            (1, "b".to_owned(), "completed".to_owned()),
            (2, "c".to_owned(), "completed".to_owned()),
        ]
    );
    drop(execution);

    // Resumed: the same calls replay, in call order, with the same results.
    let execution = start(&journal, id).await;
    let (c, a, b) = {
        let a = execution.pure("a", never::<String>);
        let b = execution.idempotent("b", |_| never::<String>());
        let c = execution.guarded("c", Policy::Fail, |_| never::<String>());
        tokio::join!(c, a, b)
    };
    assert_eq!(a.unwrap(), "from a");
    assert_eq!(b.unwrap(), "from b");
    assert_eq!(c.unwrap().into_result().ok(), Some("from c".to_owned()));
    execution.complete(&"done").await.unwrap();
}

#[tokio::test]
async fn a_recorded_step_replays_while_its_sibling_is_still_running() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let id = Uuid::new_v4();
    let execution = start(&journal, id).await;
    let first: u32 = execution.pure("first", || async { Ok(7) }).await.unwrap();
    assert_eq!(first, 7);
    drop(execution);

    let execution = start(&journal, id).await;
    let sibling_started = Arc::new(Notify::new());
    let release = Arc::new(Notify::new());
    let recorded = execution.pure("first", never::<u32>);
    let (started, go) = (Arc::clone(&sibling_started), Arc::clone(&release));
    let sibling = execution.pure("second", move || {
        let (started, go) = (Arc::clone(&started), Arc::clone(&go));
        async move {
            started.notify_one();
            go.notified().await;
            Ok(8_u32)
        }
    });
    // The recorded step must answer while the sibling's closure is parked on `release`: only
    // its answer releases the sibling, so a replay that waited for it would never finish.
    let (replayed, second) = tokio::join!(
        async {
            sibling_started.notified().await;
            let replayed = recorded.await;
            release.notify_one();
            replayed
        },
        sibling
    );
    assert_eq!(replayed.unwrap(), 7);
    assert_eq!(second.unwrap(), 8);
    execution.complete(&"done").await.unwrap();
    assert_eq!(rows(&journal, id).len(), 2);
}

#[tokio::test]
async fn a_dropped_step_halts_the_handle_and_its_siblings_results_stay() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let id = Uuid::new_v4();
    let execution = start(&journal, id).await;

    let started = Arc::new(Notify::new());
    let done = execution.pure("done", || async { Ok(1_u32) });
    let signal = Arc::clone(&started);
    let hanging = execution.pure("hanging", move || {
        let signal = Arc::clone(&signal);
        async move {
            signal.notify_one();
            std::future::pending::<Result<u32, StepError>>().await
        }
    });
    let (done, ()) = tokio::join!(done, async {
        tokio::select! {
            _ = hanging => unreachable!("the hanging step finished"),
            () = started.notified() => {}
        }
    });
    assert_eq!(done.unwrap(), 1);

    let after = execution.pure("after", || async { Ok(2_u32) }).await;
    assert!(
        matches!(after, Err(Error::Halted { seq: 1, .. })),
        "{after:?}"
    );
    let completed = execution.complete(&"done").await;
    assert!(
        matches!(completed, Err(Error::Halted { seq: 1, .. })),
        "{completed:?}"
    );
    assert_eq!(
        rows(&journal, id),
        [(0, "done".to_owned(), "completed".to_owned())]
    );

    // The next run replays the sibling and runs the dropped step again.
    let execution = start(&journal, id).await;
    let done: u32 = execution.pure("done", never::<u32>).await.unwrap();
    let again: u32 = execution
        .pure("hanging", || async { Ok(3_u32) })
        .await
        .unwrap();
    assert_eq!((done, again), (1, 3));
    execution.complete(&"done").await.unwrap();
}

/// A gap (a later sibling recorded, an earlier one not) is a step with no outcome: the resumed
/// run runs it, and replays the later one.
#[tokio::test]
async fn a_step_left_without_an_outcome_below_a_recorded_sibling_runs_again() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let id = Uuid::new_v4();
    let execution = start(&journal, id).await;
    let first = execution.pure("first", std::future::pending::<Result<u32, StepError>>);
    let second = execution.guarded("second", Policy::Fail, |_| async { Ok(2_u32) });
    let second_done = Notify::new();
    // The first step is dropped, unfinished, once the second has its outcome.
    let ((), second) = tokio::join!(
        async {
            tokio::select! {
                _ = first => unreachable!("the first step finished"),
                () = second_done.notified() => {}
            }
        },
        async {
            let second = second.await;
            second_done.notify_one();
            second
        }
    );
    assert_eq!(second.unwrap().into_result().ok(), Some(2));
    drop(execution);
    assert_eq!(
        rows(&journal, id),
        [(1, "second".to_owned(), "completed".to_owned())]
    );

    let execution = start(&journal, id).await;
    let first = execution.pure("first", || async { Ok(1_u32) });
    let second = execution.guarded("second", Policy::Fail, |_| never::<u32>());
    let (first, second) = tokio::join!(first, second);
    assert_eq!(first.unwrap(), 1);
    assert_eq!(second.unwrap().into_result().ok(), Some(2));
    execution.complete(&"done").await.unwrap();
}

/// A declining hook gives its seq back only while it is the last one reserved; with a later
/// step already called, the handle halts at it with `AbortedBehindLaterSteps`, and nothing of
/// the declined step is written, not even by its sibling's write.
#[tokio::test]
async fn a_declining_hook_behind_a_later_step_halts_the_handle() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let id = Uuid::new_v4();
    let execution = start(&journal, id).await;
    let decline = |_: &durably_journal::durably_db::Connection, _| {
        Err(Error::Aborted("declined by the test"))
    };

    // Alone: the seq is given back and the same step runs again at it.
    let alone = execution
        .step_with(
            "hooked",
            Effect::Pure,
            Timing::Now,
            |_| async { Ok(1_u32) },
            decline,
        )
        .await;
    assert!(matches!(alone, Err(Error::Aborted(_))), "{alone:?}");
    assert_eq!(execution.next_seq(), 0);

    // Behind a later step: halted at it. The hooked step's closure waits until the later
    // step's closure runs, so the later step has started when the handle halts.
    let later_started = Arc::new(Notify::new());
    let wait = Arc::clone(&later_started);
    let hooked = execution.step_with(
        "hooked",
        Effect::Pure,
        Timing::Now,
        move |_| {
            let wait = Arc::clone(&wait);
            async move {
                wait.notified().await;
                Ok(1_u32)
            }
        },
        decline,
    );
    let later = execution.pure("later", move || {
        let started = Arc::clone(&later_started);
        async move {
            started.notify_one();
            Ok(2_u32)
        }
    });
    let (hooked, later) = tokio::join!(hooked, later);
    assert!(
        matches!(hooked, Err(Error::AbortedBehindLaterSteps { seq: 0, .. })),
        "{hooked:?}"
    );
    assert_eq!(later.unwrap(), 2);
    // The declined step's row never rode on its sibling's write without its hook.
    assert_eq!(
        rows(&journal, id),
        [(1, "later".to_owned(), "completed".to_owned())]
    );
    let next = execution.pure("next", || async { Ok(3_u32) }).await;
    assert!(
        matches!(next, Err(Error::Halted { seq: 0, .. })),
        "{next:?}"
    );
}

/// W1 with steps in flight, on a write-behind handle: every outcome the caller had when it
/// called an effect step is durable before that effect runs, even when a sibling's write took
/// it along. Each effect closure reads the journal itself and finds the earlier steps there.
/// (Without the lookup of rows a sibling's write took, this fails within a few rounds: the
/// second effect's flush finds nothing pending and its closure runs while the first effect's
/// write, carrying the earlier rows, has not committed.)
#[tokio::test]
async fn effects_called_in_parallel_see_every_earlier_outcome_durable() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let id = Uuid::new_v4();
    let mut execution = start(&journal, id).await;
    execution.defer_results();
    for round in 0..100_u32 {
        let base = round * 5;
        let first = execution.pure(&format!("pure {base}"), || async { Ok(()) });
        let second = execution.pure(&format!("pure {}", base + 1), || async { Ok(()) });
        let (first, second) = tokio::join!(first, second);
        first.unwrap();
        second.unwrap();
        // The outcomes the caller had when it called the three effects: steps below `base + 2`
        // (a sibling called in the same join is not one of them).
        let durable_below = |seq: u32| {
            let journal = journal.clone();
            move || {
                let recorded = rows(&journal, id);
                let missing: Vec<u32> = (0..base + 2)
                    .filter(|earlier| !recorded.iter().any(|row| row.0 == *earlier))
                    .collect();
                assert!(
                    missing.is_empty(),
                    "the effect at step {seq} ran before steps {missing:?} were durable"
                );
            }
        };
        let checks = [base + 2, base + 3, base + 4].map(durable_below);
        let [one, two, three] = checks;
        let (a, b, c) = tokio::join!(
            execution.idempotent(&format!("effect {}", base + 2), move |_| {
                one();
                async { Ok(()) }
            }),
            execution.guarded(&format!("effect {}", base + 3), Policy::Fail, move |_| {
                two();
                async { Ok(()) }
            }),
            execution.idempotent(&format!("effect {}", base + 4), move |_| {
                three();
                async { Ok(()) }
            }),
        );
        a.unwrap();
        b.unwrap().into_result().unwrap();
        c.unwrap();
    }
    execution.complete(&"done").await.unwrap();
}
