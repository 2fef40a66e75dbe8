//! Shared helpers of the in-process scheduler tests: a clock the test moves by hand, a journal
//! on a scratch file, and a body that counts its calls per slot.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use durably_journal::Journal;
use durably_lock::Clock;
use durably_scheduler::{FireContext, JobBuilder, Scheduler, Slot, StepError};

/// 2026-01-01T00:00:00.000Z.
pub const T0_MS: i64 = 1_767_225_600_000;
pub const MINUTE_MS: i64 = 60_000;

/// A clock that stands still until the test moves it.
#[derive(Debug)]
pub struct ManualClock(Mutex<DateTime<Utc>>);

impl ManualClock {
    pub fn at_millis(millis: i64) -> Arc<Self> {
        Arc::new(Self(Mutex::new(
            DateTime::from_timestamp_millis(millis).unwrap(),
        )))
    }

    pub fn set_millis(&self, millis: i64) {
        *self.0.lock().unwrap() = DateTime::from_timestamp_millis(millis).unwrap();
    }

    pub fn millis(&self) -> i64 {
        self.0.lock().unwrap().timestamp_millis()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap()
    }
}

/// A scratch directory with one journal file.
pub struct Scratch {
    pub dir: tempfile::TempDir,
}

impl Scratch {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn path(&self) -> std::path::PathBuf {
        self.dir.path().join("journal.db")
    }

    /// A journal (and so a lock instance) of its own on the shared file.
    pub fn journal(&self, clock: &Arc<ManualClock>) -> Journal {
        let clock: Arc<dyn Clock> = clock.clone();
        Journal::builder(self.path()).clock(clock).open().unwrap()
    }

    pub async fn scheduler(&self, clock: &Arc<ManualClock>) -> Scheduler {
        Scheduler::builder(self.journal(clock))
            .tick_max(Duration::from_millis(20))
            .build()
            .await
            .unwrap()
    }

    /// Reads one integer with plain SQL.
    pub fn count(&self, sql: &str) -> i64 {
        let conn = rusqlite::Connection::open(self.path()).unwrap();
        conn.query_row(sql, [], |row| row.get(0)).unwrap()
    }
}

/// Counts body calls per slot (epoch milliseconds) and remembers the keys handed out.
#[derive(Debug, Clone, Default)]
pub struct Calls(Arc<Mutex<BTreeMap<i64, Vec<FireContext>>>>);

impl Calls {
    pub fn record(&self, context: &FireContext) {
        self.0
            .lock()
            .unwrap()
            .entry(context.slot.as_millis())
            .or_default()
            .push(context.clone());
    }

    /// Slots called, each with its number of calls.
    pub fn per_slot(&self) -> BTreeMap<i64, usize> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|(slot, calls)| (*slot, calls.len()))
            .collect()
    }

    pub fn total(&self) -> usize {
        self.0.lock().unwrap().values().map(Vec::len).sum()
    }
}

/// A job on a one-minute grid through T0 whose body records its call and succeeds.
pub fn counting_job(id: &str, calls: &Calls) -> JobBuilder {
    let calls = calls.clone();
    durably_scheduler::Job::builder(id)
        .interval(Duration::from_millis(MINUTE_MS as u64), T0_MS)
        .body(move |context| {
            let calls = calls.clone();
            async move {
                calls.record(&context);
                Ok::<_, StepError>(serde_json::json!({ "slot": context.slot.as_millis() }))
            }
        })
}

pub fn slot(millis: i64) -> Slot {
    Slot::from_millis(millis).unwrap()
}
