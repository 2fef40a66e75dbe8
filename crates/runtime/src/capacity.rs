//! [`Capacity`]: this process's limits on the executions it runs at once, and its places in
//! use, per queue.
//!
//! Invariant: an execution running in this process holds exactly one place, counted in its
//! queue, from its claim (or [`crate::Runtime::run`]'s start) until its task ends; a run that
//! hands its place to a successor at its end moves it, never adds one. Places are taken only
//! through [`Places::fits`] and [`Places::take`] under one lock, so no two claims can take
//! the last place together.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

use crate::claims::Place;
use crate::telemetry;

/// A queue as this process sees it; `None` is "no queue".
pub(crate) type QueueKey = Option<String>;

/// This process's limits and what it runs now.
#[derive(Debug)]
pub(crate) struct Capacity {
    /// The most executions this process runs at once, over all queues.
    pub(crate) concurrency_max: u32,
    /// The most executions of each served queue this process runs at once.
    pub(crate) process_concurrency_max: BTreeMap<QueueKey, u32>,
    /// Executions running here, per queue.
    running: Mutex<BTreeMap<QueueKey, u32>>,
    /// Woken each time the last run here gives its place back.
    idle: Notify,
}

/// The places in use, locked: look and take under one lock.
pub(crate) struct Places<'a> {
    capacity: &'a Capacity,
    running: MutexGuard<'a, BTreeMap<QueueKey, u32>>,
}

impl Capacity {
    pub(crate) fn new(
        concurrency_max: u32,
        process_concurrency_max: BTreeMap<QueueKey, u32>,
    ) -> Self {
        Self {
            concurrency_max,
            process_concurrency_max,
            running: Mutex::new(BTreeMap::new()),
            idle: Notify::new(),
        }
    }

    /// Returns once no execution runs in this process. The wake-up is enabled before the
    /// count is read, so a last place given back between the two is not missed.
    pub(crate) async fn idle(&self) {
        loop {
            let mut woken = std::pin::pin!(self.idle.notified());
            woken.as_mut().enable();
            let total: u32 = self
                .running
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .values()
                .sum();
            if total == 0 {
                return;
            }
            woken.await;
        }
    }

    /// The room this process has in each served queue now: a hint for how many to look for;
    /// each claim still checks its place ([`Places::fits`]).
    pub(crate) fn rooms(&self) -> Vec<(QueueKey, u32)> {
        let running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        let total: u32 = running.values().sum();
        let free = self.concurrency_max.saturating_sub(total);
        self.process_concurrency_max
            .iter()
            .map(|(queue, max)| {
                let mine = running.get(queue).copied().unwrap_or(0);
                (queue.clone(), free.min(max.saturating_sub(mine)))
            })
            .filter(|(_, room)| *room > 0)
            .collect()
    }

    /// The places in use, locked until the guard is dropped.
    pub(crate) fn places(&self) -> Places<'_> {
        Places {
            capacity: self,
            running: self.running.lock().unwrap_or_else(PoisonError::into_inner),
        }
    }

    /// Takes one place in `queue` for a run this process starts itself ([`crate::Runtime::run`])
    /// if it has room; give it back with `add(queue, -1)`.
    pub(crate) fn try_take(&self, queue: &QueueKey) -> bool {
        let mut places = self.places();
        let fits = places.fits(queue, Place::Free);
        if fits {
            places.take(queue, Place::Free);
        }
        fits
    }

    pub(crate) fn add(&self, queue: &QueueKey, delta: i64) {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        let count = running.entry(queue.clone()).or_default();
        *count = u32::try_from(i64::from(*count) + delta).unwrap_or(0);
        let total = running.values().sum();
        telemetry::runs_here(total);
        if total == 0 {
            self.idle.notify_waiters();
        }
    }

    /// The queues this process serves, `None` for no queue among them.
    pub(crate) fn queues(&self) -> Vec<QueueKey> {
        self.process_concurrency_max.keys().cloned().collect()
    }

    /// The queues this process serves, starting after `queue` and ending with it: the order in
    /// which a run handing its place on looks for a successor, so that the places of a
    /// process serving several queues turn over between them in turn.
    pub(crate) fn queues_after(&self, queue: &QueueKey) -> Vec<QueueKey> {
        let queues: Vec<&QueueKey> = self.process_concurrency_max.keys().collect();
        let after = queues
            .iter()
            .position(|q| *q == queue)
            .map_or(0, |at| at + 1);
        queues[after..]
            .iter()
            .chain(&queues[..after])
            .map(|q| (*q).clone())
            .collect()
    }
}

impl Places<'_> {
    /// Whether a run of `queue` fits under this process's limits, with its place taken as
    /// `place` says.
    pub(crate) fn fits(&self, queue: &QueueKey, place: Place<'_>) -> bool {
        let max = self
            .capacity
            .process_concurrency_max
            .get(queue)
            .copied()
            .unwrap_or(0);
        let mine = self.running.get(queue).copied().unwrap_or(0);
        match place {
            Place::Free => {
                let total: u32 = self.running.values().sum();
                total < self.capacity.concurrency_max && mine < max
            }
            // The total does not change, nor the queue's count when the place stays in it.
            Place::HandedOver(from) => from == queue || mine < max,
        }
    }

    /// Takes the place [`Places::fits`] found.
    pub(crate) fn take(&mut self, queue: &QueueKey, place: Place<'_>) {
        if let Place::HandedOver(from) = place
            && let Some(count) = self.running.get_mut(from)
        {
            *count = count.saturating_sub(1);
        }
        *self.running.entry(queue.clone()).or_default() += 1;
        telemetry::runs_here(self.running.values().sum());
    }
}
