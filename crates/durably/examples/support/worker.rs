//! Crashing a workflow for real, for the examples: the example runs its workflow in a worker
//! process (the same program, started again as `PROGRAM worker DATABASE ID`), reads the
//! worker's output until the workflow has reached the point to crash at, and kills it with
//! SIGKILL there. The workflow announces that point itself ([`Env::crash_point`]: a line on
//! its standard output, then a wait that never ends), so the kill lands exactly there, without
//! failpoints and without guessing with sleeps. The example then resumes the execution in its
//! own process, where the same crash points return at once.

use std::error::Error;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use durably::runtime::{Runtime, StartOptions};
use serde::Serialize;
use serde::de::DeserializeOwned;
use uuid::Uuid;

/// The first argument that makes the example a worker.
const WORKER_ARG: &str = "worker";

/// The error type of the examples' functions.
pub type BoxError = Box<dyn Error>;

/// Where an example's workflows run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// In the worker, which is killed at the crash points.
    Worker,
    /// In the example's own process, after the kill.
    Resume,
}

/// What an example's workflows need besides their input.
#[derive(Debug, Clone)]
pub struct Env {
    /// Where they run.
    pub mode: Mode,
    /// The journal; the fake providers' ledgers sit next to it.
    pub db: PathBuf,
}

impl Env {
    /// A crash point: in the worker, prints `line` for the example and never returns (the
    /// worker is killed while it waits here); after the kill, returns at once.
    pub async fn crash_point(&self, line: &str) {
        if self.mode == Mode::Worker {
            println!("{line}");
            std::future::pending::<()>().await;
        }
    }
}

/// Where an example crashes its worker.
pub struct Crash {
    /// The journal when the command line names none.
    pub default_db: &'static str,
    /// What the crash points' lines contain.
    pub needle: &'static str,
    /// How many crash points must be reached before the kill.
    pub count: usize,
}

/// The whole program of an example that crashes its workflow: `PROGRAM [DATABASE]` makes a
/// new execution id, runs `work` in a worker process until `crash.count` of its lines have
/// contained `crash.needle`, kills the worker with SIGKILL, then runs `resume` in this
/// process. `PROGRAM worker DATABASE ID` is the worker, which runs `work`.
///
/// # Errors
/// Bad arguments, a worker that cannot start or ends before its crash points, and whatever
/// `work` or `resume` returns.
pub fn main<W, R>(
    crash: &Crash,
    work: impl FnOnce(Env, Uuid) -> W,
    resume: impl FnOnce(Env, Uuid) -> R,
) -> Result<(), BoxError>
where
    W: Future<Output = Result<(), BoxError>>,
    R: Future<Output = Result<(), BoxError>>,
{
    let args: Vec<String> = std::env::args().skip(1).collect();
    let tokio = tokio::runtime::Runtime::new()?;
    let env = |mode, db: &str| Env {
        mode,
        db: db.into(),
    };
    if let [first, db, id] = args.as_slice()
        && first == WORKER_ARG
    {
        return tokio.block_on(work(env(Mode::Worker, db), id.parse()?));
    }
    let db = match args.as_slice() {
        [] => crash.default_db,
        [db] => db.as_str(),
        _ => return Err("usage: EXAMPLE [DATABASE]".into()),
    };
    // A new execution on every run, so the example can run again on the same file.
    let id = durably::new_execution_id();
    kill_at(Path::new(db), id, crash)?;
    tokio.block_on(resume(env(Mode::Resume, db), id))
}

/// Runs the worker for execution `id` on `db`, echoing its lines as `worker: LINE`, and kills
/// it with SIGKILL (what `Child::kill` sends on Unix) once it has reached its crash points:
/// no destructor runs, nothing is flushed, no lock is released, as in a real crash.
fn kill_at(db: &Path, id: Uuid, crash: &Crash) -> Result<(), BoxError> {
    let mut child = Command::new(std::env::current_exe()?)
        .arg(WORKER_ARG)
        .arg(db)
        .arg(id.to_string())
        .stdout(Stdio::piped())
        .spawn()?;
    let pid = child.id();
    println!("execution {id}: started in worker process {pid}");
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| io::Error::other("the worker's standard output is not piped"))?;
    let mut lines = BufReader::new(stdout).lines();
    let mut reached = 0;
    while reached < crash.count {
        let Some(line) = lines.next() else {
            child.wait()?;
            return Err(format!(
                "the worker ended after {reached} of its {} crash points",
                crash.count
            )
            .into());
        };
        let line = line?;
        println!("worker: {line}");
        if line.contains(crash.needle) {
            reached += 1;
        }
    }
    child.kill()?;
    child.wait()?;
    println!("killed worker process {pid} with SIGKILL at its crash points");
    Ok(())
}

/// The worker's job: starts execution `id` of `kind` with `input` and waits for its end,
/// which never comes: the workflow hangs at its crash points until the worker is killed.
///
/// # Errors
/// A refused start, or a workflow that ended, which means it never reached a crash point.
pub async fn start_and_wait<I, O>(
    runtime: &Runtime,
    kind: &str,
    id: Uuid,
    input: &I,
) -> Result<(), BoxError>
where
    I: Serialize + 'static,
    O: DeserializeOwned + 'static,
{
    let handle = runtime
        .start::<_, O>(kind, id, input, StartOptions::default())
        .await?;
    handle.result().await?;
    Err(format!("execution {id} ended in the worker without reaching its crash points").into())
}
