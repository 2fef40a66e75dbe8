//! A scheduled job: its schedule, its policies and its body.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use durably_journal::{IdempotencyKey, Policy, RetryPolicy, StepError};
use uuid::Uuid;

use crate::catch_up::{CatchUp, Overlap};
use crate::error::{Error, Result};
use crate::job_id::JobId;
use crate::schedule::Schedule;
use crate::slot::Slot;

/// The most attempts one fire may make: a bound on [`RetryPolicy::attempts_max`] in
/// [`JobBuilder::retry`].
pub const FIRE_ATTEMPTS_MAX: u32 = 100;

/// The longest backoff between two attempts of a fire: a bound on
/// [`RetryPolicy::backoff_max`] in [`JobBuilder::retry`].
pub const FIRE_BACKOFF_MAX: Duration = Duration::from_hours(1);

/// A job's retries unless [`JobBuilder::retry`] sets others: 3 attempts, waiting 0.5 s before
/// the second and doubling up to 30 s.
pub const FIRE_RETRY_DEFAULT: RetryPolicy = RetryPolicy {
    attempts_max: 3,
    backoff_initial: Duration::from_millis(500),
    backoff_max: Duration::from_secs(30),
};

/// What a fire body is handed: which fire this is and the keys to deduplicate its effect with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FireContext {
    /// The job.
    pub job: JobId,
    /// The slot being fired (a nominal grid time, never "now").
    pub slot: Slot,
    /// The fire id: the execution id of this fire. The same on every attempt, every restart
    /// and every scheduler process, so it is the key to hand a remote side that must see the
    /// fire at most once.
    pub execution_id: Uuid,
    /// The idempotency key of this attempt's guarded step: the same when the attempt is re-run
    /// after a crash under [`Policy::Retry`]; a new attempt after a recorded failure gets a
    /// new key.
    pub idempotency_key: IdempotencyKey,
    /// The attempt, from 1.
    pub attempt: u32,
    /// Whether the scheduler running this fire has been asked to shut down.
    pub(crate) shutdown: ShutdownSignal,
}

impl FireContext {
    /// Whether the scheduler running this fire has been asked to shut down. A long body may
    /// check it and stop early by returning an error (a recorded failed attempt) or, better,
    /// by finishing its current unit of work; the scheduler starts no further attempt or fire
    /// once it is set.
    pub fn shutting_down(&self) -> bool {
        self.shutdown.is_set()
    }

    /// Completes once the scheduler has been asked to shut down (at once if it already was),
    /// for a body that waits on something and wants to stop cooperatively.
    pub async fn shutdown_requested(&self) {
        self.shutdown.wait().await;
    }
}

/// A shared flag set when [`Scheduler::run`](crate::Scheduler::run) is asked to shut down, with
/// a way to wait for it. Clones share the flag; two signals are equal when they are the same.
#[derive(Debug, Clone, Default)]
pub(crate) struct ShutdownSignal(Arc<ShutdownState>);

#[derive(Debug, Default)]
struct ShutdownState {
    set: std::sync::atomic::AtomicBool,
    notify: tokio::sync::Notify,
}

impl ShutdownSignal {
    pub(crate) fn is_set(&self) -> bool {
        self.0.set.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub(crate) fn set(&self) {
        self.0.set.store(true, std::sync::atomic::Ordering::SeqCst);
        self.0.notify.notify_waiters();
    }

    pub(crate) fn clear(&self) {
        self.0.set.store(false, std::sync::atomic::Ordering::SeqCst);
    }

    /// Completes once the flag is set.
    pub(crate) async fn wait(&self) {
        loop {
            let notified = self.0.notify.notified();
            tokio::pin!(notified);
            // Register before checking, so a `set` between the check and the await is seen.
            notified.as_mut().enable();
            if self.is_set() {
                return;
            }
            notified.await;
        }
    }
}

impl PartialEq for ShutdownSignal {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for ShutdownSignal {}

/// The future a fire body returns.
pub type FireFuture = Pin<Box<dyn Future<Output = Result<serde_json::Value, StepError>> + Send>>;

/// A fire body: called once per attempt of a fire.
pub type FireBody = Arc<dyn Fn(FireContext) -> FireFuture + Send + Sync>;

/// A validated job, ready for [`Scheduler::register`](crate::Scheduler::register). Build one
/// with [`Job::builder`]. Cheap to clone.
#[derive(Clone)]
pub struct Job {
    pub(crate) id: JobId,
    pub(crate) schedule: Schedule,
    pub(crate) catch_up: CatchUp,
    pub(crate) overlap: Overlap,
    pub(crate) policy: Policy,
    pub(crate) retry: RetryPolicy,
    pub(crate) body: FireBody,
}

impl fmt::Debug for Job {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Job")
            .field("id", &self.id)
            .field("schedule", &self.schedule.definition())
            .field("catch_up", &self.catch_up)
            .field("overlap", &self.overlap)
            .field("policy", &self.policy)
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

impl Job {
    /// Starts a job named `job_id`. Nothing is checked until [`JobBuilder::build`].
    pub fn builder(job_id: &str) -> JobBuilder {
        JobBuilder {
            id: job_id.to_owned(),
            schedule: None,
            catch_up: CatchUp::Skip,
            overlap: Overlap::Skip,
            policy: Policy::Skip,
            retry: FIRE_RETRY_DEFAULT,
            body: None,
        }
    }

    /// The job id.
    pub fn id(&self) -> &JobId {
        &self.id
    }

    /// The schedule.
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// The catch-up policy.
    pub fn catch_up(&self) -> CatchUp {
        self.catch_up
    }

    /// The overlap policy.
    pub fn overlap(&self) -> Overlap {
        self.overlap
    }

    /// How a failing fire is retried: its attempts and the backoff between them.
    pub fn retry(&self) -> RetryPolicy {
        self.retry
    }

    /// The canonical JSON definition stored in `jobs.definition`: everything but the body.
    /// Two jobs with the same definition fire the same slots the same way.
    pub fn definition(&self) -> String {
        let catch_up = match self.catch_up {
            CatchUp::Skip => r#"{"kind":"skip"}"#.to_owned(),
            CatchUp::Latest => r#"{"kind":"latest"}"#.to_owned(),
            CatchUp::All { window, max } => format!(
                r#"{{"kind":"all","window_ms":{},"max":{max}}}"#,
                window.as_millis()
            ),
        };
        let overlap = match self.overlap {
            Overlap::Skip => "skip",
            Overlap::Allow => "allow",
        };
        format!(
            r#"{{"version":1,"schedule":{},"catch_up":{catch_up},"overlap":"{overlap}","policy":"{}","attempts_max":{},"backoff_initial_ms":{},"backoff_max_ms":{}}}"#,
            self.schedule.definition(),
            self.policy.kind().as_str(),
            self.retry.attempts_max,
            self.retry.backoff_initial.as_millis(),
            self.retry.backoff_max.as_millis(),
        )
    }

    /// The blake3 hash of [`Job::definition`], 64 lowercase hex digits.
    pub fn definition_hash(&self) -> String {
        blake3::hash(self.definition().as_bytes())
            .to_hex()
            .to_string()
    }
}

/// The schedule a builder was given, checked in [`JobBuilder::build`].
enum ScheduleInput {
    Ready(Schedule),
    Interval { every: Duration, anchor_ms: i64 },
    Cron { expr: String, tz: String },
}

/// Configures a [`Job`]. Defaults: catch-up [`CatchUp::Skip`], overlap [`Overlap::Skip`],
/// ambiguity policy [`Policy::Skip`], retries [`FIRE_RETRY_DEFAULT`].
pub struct JobBuilder {
    id: String,
    schedule: Option<ScheduleInput>,
    catch_up: CatchUp,
    overlap: Overlap,
    policy: Policy,
    retry: RetryPolicy,
    body: Option<FireBody>,
}

impl fmt::Debug for JobBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobBuilder")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl JobBuilder {
    /// Fires on an already built schedule.
    #[must_use]
    pub fn schedule(mut self, schedule: Schedule) -> Self {
        self.schedule = Some(ScheduleInput::Ready(schedule));
        self
    }

    /// Fires every `every`, on the grid through `anchor_ms` (Unix epoch milliseconds, UTC).
    /// See [`Schedule::interval`].
    #[must_use]
    pub fn interval(mut self, every: Duration, anchor_ms: i64) -> Self {
        self.schedule = Some(ScheduleInput::Interval { every, anchor_ms });
        self
    }

    /// Fires where the 5-field cron `expr` matches the wall clock of the IANA zone `tz`. See
    /// [`Schedule::cron`].
    #[must_use]
    pub fn cron(mut self, expr: &str, tz: &str) -> Self {
        self.schedule = Some(ScheduleInput::Cron {
            expr: expr.to_owned(),
            tz: tz.to_owned(),
        });
        self
    }

    /// What to do with slots missed while no scheduler ran.
    #[must_use]
    pub fn catch_up(mut self, catch_up: CatchUp) -> Self {
        self.catch_up = catch_up;
        self
    }

    /// What to do when a slot comes due while the previous fire still runs.
    #[must_use]
    pub fn overlap(mut self, overlap: Overlap) -> Self {
        self.overlap = overlap;
        self
    }

    /// What to do when a crash left the fire body in the ambiguous window (see [`Policy`]).
    #[must_use]
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// How a fire whose body returns an error is retried, with the type steps use: attempts in
    /// all, the first included, from 1 to [`FIRE_ATTEMPTS_MAX`], and the backoff between them,
    /// `backoff_initial <= backoff_max <=` [`FIRE_BACKOFF_MAX`]. Every body error is retried
    /// this way, whether or not the error is marked retryable.
    #[must_use]
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// The body each fire runs, as one guarded step per attempt.
    #[must_use]
    pub fn body<F, Fut>(mut self, body: F) -> Self
    where
        F: Fn(FireContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<serde_json::Value, StepError>> + Send + 'static,
    {
        self.body = Some(Arc::new(move |context| Box::pin(body(context))));
        self
    }

    /// Checks everything and builds the job.
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidJobId`] for an empty, over-long or control-character id.
    /// - [`Error::InvalidCron`], [`Error::UnknownTimeZone`], [`Error::InvalidInterval`] or
    ///   [`Error::SlotOutOfRange`] (an interval anchor outside years 1970 to 9999) for the
    ///   schedule.
    /// - [`Error::InvalidCatchUp`] for a catch-up window of zero or a cap out of range.
    /// - [`Error::InvalidJob`] when the schedule or the body is missing, or the attempts or
    ///   backoff are out of bounds.
    pub fn build(self) -> Result<Job> {
        let id = JobId::new(&self.id)?;
        let invalid = |reason: String| Error::InvalidJob {
            job: id.to_string(),
            reason,
        };
        let schedule = match self.schedule {
            None => {
                return Err(invalid("it has no schedule".into()));
            }
            Some(ScheduleInput::Ready(schedule)) => schedule,
            Some(ScheduleInput::Interval { every, anchor_ms }) => {
                Schedule::interval(every, Slot::from_millis(anchor_ms)?)?
            }
            Some(ScheduleInput::Cron { expr, tz }) => Schedule::cron(&expr, &tz)?,
        };
        // The same check `due_slots` makes, made once here so a bad policy fails at
        // registration rather than in the loop.
        crate::catch_up::check_policy(&self.catch_up)?;
        let retry = self.retry;
        if !(1..=FIRE_ATTEMPTS_MAX).contains(&retry.attempts_max) {
            return Err(invalid(format!(
                "retry.attempts_max is {}, outside 1 to {FIRE_ATTEMPTS_MAX}",
                retry.attempts_max
            )));
        }
        if retry.backoff_max > FIRE_BACKOFF_MAX || retry.backoff_initial > retry.backoff_max {
            return Err(invalid(format!(
                "backoff {:?} up to {:?} is not within initial <= max <= {FIRE_BACKOFF_MAX:?}",
                retry.backoff_initial, retry.backoff_max
            )));
        }
        let Some(body) = self.body else {
            return Err(invalid("it has no body".into()));
        };
        Ok(Job {
            id,
            schedule,
            catch_up: self.catch_up,
            overlap: self.overlap,
            policy: self.policy,
            retry,
            body,
        })
    }
}
