//! A scheduled job: its schedule, its policies, and the registered workflow each fire starts.

use std::time::Duration;

use serde_json::Value;

use crate::catch_up::{CatchUp, Overlap};
use crate::error::{Error, Result};
use crate::job_id::JobId;
use crate::schedule::Schedule;
use crate::slot::Slot;

/// The version of [`Job::definition`]'s JSON. Version 1 described a job whose body was a
/// closure run by the scheduler; such a job cannot be fired any more (see
/// [`Error::JobNeedsWorkflow`]).
const JOB_DEFINITION_VERSION: u64 = 2;

/// A validated job, ready for [`Scheduler::register`](crate::Scheduler::register). Build one
/// with [`Job::builder`]. Cheap to clone.
///
/// A job holds no code: each fire starts an execution of the registered workflow kind
/// [`Job::workflow`], with a [`Fire`](crate::Fire) as its input, in whatever runtime process
/// serves that kind. So a job is pure data, stored whole in the ledger
/// ([`Job::definition`]), and a process that does not run the job's code (the `durably` CLI)
/// can still trigger and backfill it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    pub(crate) id: JobId,
    pub(crate) schedule: Schedule,
    pub(crate) catch_up: CatchUp,
    pub(crate) overlap: Overlap,
    pub(crate) workflow: String,
    pub(crate) queue: Option<String>,
}

impl Job {
    /// Starts a job named `job_id`. Nothing is checked until [`JobBuilder::build`].
    pub fn builder(job_id: &str) -> JobBuilder {
        JobBuilder {
            id: job_id.to_owned(),
            schedule: None,
            catch_up: CatchUp::Skip,
            overlap: Overlap::Skip,
            workflow: None,
            queue: None,
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

    /// The registered workflow kind each fire starts.
    pub fn workflow(&self) -> &str {
        &self.workflow
    }

    /// The runtime queue fires start in, if not the default one.
    pub fn queue(&self) -> Option<&str> {
        self.queue.as_deref()
    }

    /// The canonical JSON definition stored in `jobs.definition`: the whole job. Two jobs
    /// with the same definition fire the same slots the same way.
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
        // Kind and queue names are free text: serde_json quotes and escapes them.
        let text = |value: &str| Value::String(value.to_owned()).to_string();
        format!(
            r#"{{"version":{JOB_DEFINITION_VERSION},"schedule":{},"catch_up":{catch_up},"overlap":"{overlap}","workflow":{},"queue":{}}}"#,
            self.schedule.definition(),
            text(&self.workflow),
            self.queue
                .as_deref()
                .map_or_else(|| "null".to_owned(), text),
        )
    }

    /// The blake3 hash of [`Job::definition`], 64 lowercase hex digits.
    pub fn definition_hash(&self) -> String {
        blake3::hash(self.definition().as_bytes())
            .to_hex()
            .to_string()
    }

    /// The job a stored [`Job::definition`] describes, for a process that manages jobs
    /// without their code (see [`Scheduler::job_from_ledger`](crate::Scheduler)).
    ///
    /// # Errors
    /// [`Error::JobNeedsWorkflow`] for a definition written by a scheduler whose job bodies
    /// were closures (version 1); [`Error::Ledger`] for a definition that does not parse; the
    /// schedule's own errors.
    pub fn from_definition(id: &JobId, definition: &str) -> Result<Self> {
        let unreadable = |what: &str| {
            Error::Ledger(format!(
                "the stored definition of job {:?} has {what}",
                id.as_str()
            ))
        };
        let value: Value =
            serde_json::from_str(definition).map_err(|_| unreadable("invalid JSON"))?;
        let version = value["version"].as_u64();
        if version == Some(1) {
            return Err(Error::JobNeedsWorkflow {
                job: id.to_string(),
            });
        }
        if version != Some(JOB_DEFINITION_VERSION) {
            return Err(unreadable("an unknown version"));
        }
        let schedule =
            schedule_from(&value["schedule"]).ok_or_else(|| unreadable("no schedule"))??;
        let catch_up =
            catch_up_from(&value["catch_up"]).ok_or_else(|| unreadable("no catch-up"))?;
        let overlap = match value["overlap"].as_str() {
            Some("skip") => Overlap::Skip,
            Some("allow") => Overlap::Allow,
            _ => return Err(unreadable("no overlap policy")),
        };
        let workflow = value["workflow"]
            .as_str()
            .ok_or_else(|| unreadable("no workflow"))?
            .to_owned();
        let queue = value["queue"].as_str().map(str::to_owned);
        Ok(Self {
            id: id.clone(),
            schedule,
            catch_up,
            overlap,
            workflow,
            queue,
        })
    }
}

/// The schedule of a stored definition; `None` when a field is missing.
pub(crate) fn schedule_from(value: &Value) -> Option<Result<Schedule>> {
    Some(match value["kind"].as_str()? {
        "interval" => {
            let every = Duration::from_millis(value["every_ms"].as_u64()?);
            let anchor = chrono::DateTime::parse_from_rfc3339(value["anchor"].as_str()?).ok()?;
            Slot::from_datetime(anchor.to_utc())
                .and_then(|anchor| Schedule::interval(every, anchor))
        }
        "cron" => Schedule::cron(value["expr"].as_str()?, value["tz"].as_str()?),
        _ => return None,
    })
}

fn catch_up_from(value: &Value) -> Option<CatchUp> {
    Some(match value["kind"].as_str()? {
        "skip" => CatchUp::Skip,
        "latest" => CatchUp::Latest,
        "all" => CatchUp::All {
            window: Duration::from_millis(value["window_ms"].as_u64()?),
            max: usize::try_from(value["max"].as_u64()?).ok()?,
        },
        _ => return None,
    })
}

/// The schedule a builder was given, checked in [`JobBuilder::build`].
#[derive(Debug)]
enum ScheduleInput {
    Ready(Schedule),
    Interval { every: Duration, anchor_ms: i64 },
    Cron { expr: String, tz: String },
}

/// Configures a [`Job`]. Defaults: catch-up [`CatchUp::Skip`], overlap [`Overlap::Skip`], the
/// runtime's default queue.
#[derive(Debug)]
pub struct JobBuilder {
    id: String,
    schedule: Option<ScheduleInput>,
    catch_up: CatchUp,
    overlap: Overlap,
    workflow: Option<String>,
    queue: Option<String>,
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

    /// What to do with slots missed while no scheduler ran, or while the job was paused.
    #[must_use]
    pub fn catch_up(mut self, catch_up: CatchUp) -> Self {
        self.catch_up = catch_up;
        self
    }

    /// What to do when a slot comes due while the previous fire's execution has not ended.
    #[must_use]
    pub fn overlap(mut self, overlap: Overlap) -> Self {
        self.overlap = overlap;
        self
    }

    /// The registered workflow kind each fire starts (its input is a
    /// [`Fire`](crate::Fire)). The execution runs in whatever runtime process serves the
    /// kind, at the version the runtime's start records.
    #[must_use]
    pub fn workflow(mut self, kind: &str) -> Self {
        self.workflow = Some(kind.to_owned());
        self
    }

    /// Starts fires in the runtime queue `queue` (configured by a runtime on the journal),
    /// under its limits.
    #[must_use]
    pub fn queue(mut self, queue: &str) -> Self {
        self.queue = Some(queue.to_owned());
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
    /// - [`Error::InvalidJob`] when the schedule or the workflow is missing, or the workflow
    ///   kind or queue name is empty, too long, or holds a control character.
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
        let Some(workflow) = self.workflow else {
            return Err(invalid("it has no workflow".into()));
        };
        check_name("workflow kind", &workflow).map_err(&invalid)?;
        if let Some(queue) = &self.queue {
            check_name("queue", queue).map_err(&invalid)?;
        }
        Ok(Job {
            id,
            schedule,
            catch_up: self.catch_up,
            overlap: self.overlap,
            workflow,
            queue: self.queue,
        })
    }
}

/// The runtime's rule for kind and queue names, checked at build so a bad name fails before
/// anything is stored (the runtime checks it again at every start).
fn check_name(what: &str, name: &str) -> std::result::Result<(), String> {
    let max = durably_runtime::KIND_BYTES_MAX;
    if name.is_empty() || name.len() > max || name.chars().any(char::is_control) {
        return Err(format!(
            "its {what} {name:?} is not 1 to {max} bytes of UTF-8 without control characters"
        ));
    }
    Ok(())
}
