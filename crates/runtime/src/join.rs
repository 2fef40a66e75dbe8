//! [`join_all`]: waits for any number of step futures at once, for a fan-out whose width is
//! known only at run time (`tokio::join!` takes a fixed list). Spawning is not needed and not
//! wanted: every future runs in the workflow's own task, so the steps keep the seqs their calls
//! reserved (see the crate's "Parallel steps").

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Polls every future of `futures` in the caller's task until all have finished, and returns
/// their outputs in the order the futures were given (which, for steps, is their call order,
/// not the order they finished in). Nothing is cancelled: a step that fails does not stop its
/// siblings, so every reserved step reaches an outcome.
///
/// The steps' seqs were reserved when their methods were called, before this is: build the
/// futures in a deterministic order (an iterator over the input, say), then join them.
pub async fn join_all<I>(futures: I) -> Vec<<I::Item as Future>::Output>
where
    I: IntoIterator,
    I::Item: Future,
{
    let mut pending: Vec<Pin<Box<I::Item>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<<I::Item as Future>::Output>> =
        pending.iter().map(|_| None).collect();
    std::future::poll_fn(|context: &mut Context<'_>| {
        let mut all_done = true;
        for (future, output) in pending.iter_mut().zip(outputs.iter_mut()) {
            if output.is_some() {
                continue;
            }
            match future.as_mut().poll(context) {
                Poll::Ready(value) => *output = Some(value),
                Poll::Pending => all_done = false,
            }
        }
        if all_done {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}
