//! Running the examples of crate `durably` as their users do, and reading what they leave
//! behind: the journal, with portable SQL on a read-only [`durably::Inspector`] as an operator
//! would, and the fake providers' ledgers (one `KEY<TAB>ANSWER` line per request served; see
//! `crates/durably/examples/support/fake_provider.rs`).
//!
//! Each test runs its example on a [`Site`]: a scratch journal on the backend
//! `DURABLY_TEST_BACKEND` names (durably-testkit: a SQLite file, or a PostgreSQL schema whose
//! URL is the example's db argument), and a directory the example runs in. The ledgers of a
//! SQLite journal sit beside its file (`DB.NAME.ledger`); those of a PostgreSQL journal, whose
//! URL names no directory, in the directory it runs in (`NAME.ledger`).
//!
//! The example binaries are built by `cargo test --workspace` (examples are built with the
//! tests); a test run alone needs `cargo build -p durably --examples` first, with `--features
//! durably/postgres` for a PostgreSQL run. Every wait here is bounded by [`STAGE_MAX`], so a
//! broken example fails its test instead of hanging it.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use durably::db::FromSql;
use durably_testkit::{Backend, TestDb};
use tempfile::TempDir;

/// How long any one stage (a line to come, an exit, a status to be reached) may take before
/// the test fails instead of hanging.
pub const STAGE_MAX: Duration = Duration::from_mins(1);

/// The binary of example `name`, beside this test's directory in the target tree. On
/// PostgreSQL it is built here first, with the library's `postgres` feature (a no-op when it is
/// fresh): the examples `cargo test` builds have only the features of the crates it tests, and
/// an example without PostgreSQL refuses a URL.
pub fn binary(name: &str) -> PathBuf {
    if Backend::from_env() == Backend::Postgres {
        build_with_postgres(name);
    }
    let test = std::env::current_exe().unwrap();
    let profile_dir = test.parent().and_then(Path::parent).unwrap();
    let binary = profile_dir.join("examples").join(name);
    assert!(
        binary.exists(),
        "{} is missing: build it with `cargo build -p durably --example {name}`",
        binary.display()
    );
    binary
}

/// Builds example `name` with `cargo build -p durably --example NAME --features postgres`.
fn build_with_postgres(name: &str) {
    let built = Command::new(env!("CARGO"))
        .args(["build", "-p", "durably", "--example", name])
        .args(["--features", "postgres"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "cannot build example {name} with PostgreSQL: {}",
        String::from_utf8_lossy(&built.stderr)
    );
}

/// Where a test runs an example: its journal and the directory it runs in.
pub struct Site {
    db: TestDb,
    dir: TempDir,
}

impl Site {
    /// A new journal on the backend `DURABLY_TEST_BACKEND` names, and a new directory.
    pub fn new() -> Self {
        Self {
            db: TestDb::new(),
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// The journal as the example and `durably --db` take it: a path or a URL.
    pub fn target(&self) -> String {
        self.db.target()
    }

    /// Starts example `name` with `before` and then the journal as its arguments.
    pub fn start(&self, name: &str, before: &[&str]) -> Example {
        let mut args: Vec<String> = before.iter().map(|&arg| arg.to_owned()).collect();
        args.push(self.target());
        Example::start_in(name, &args, self.dir.path())
    }

    /// Runs example `name` as [`Site::start`] does, to its end; asserts that it succeeded, and
    /// returns what it printed.
    pub fn run(&self, name: &str, before: &[&str]) -> Vec<String> {
        self.start(name, before).finish()
    }

    /// Runs `durably --db JOURNAL ARGS`.
    pub fn durably(&self, args: &[&str]) -> Output {
        let target = self.target();
        let mut all = vec!["--db", target.as_str()];
        all.extend(args);
        super::durably(&all)
    }

    /// The ledger file of fake provider `name`.
    pub fn ledger_file(&self, name: &str) -> PathBuf {
        match self.db.dir() {
            Some(_) => PathBuf::from(format!("{}.{name}.ledger", self.target())),
            None => self.dir.path().join(format!("{name}.ledger")),
        }
    }

    /// What `work` reads from the journal, on a read-only inspector of its own.
    pub fn read<T>(&self, work: impl Fn(&durably::db::Connection) -> durably::db::Result<T>) -> T {
        let inspector = durably::Journal::inspect(self.target()).unwrap();
        inspector.read(|conn| Ok(work(conn)?)).unwrap()
    }
}

/// A running example, and the lines it prints, read on a thread so that every wait for one
/// is bounded. Dropped while it runs, it is killed.
pub struct Example {
    child: Child,
    lines: Receiver<String>,
}

impl Example {
    /// Starts example `name` with `args` in directory `dir`; its standard error goes to the
    /// test's.
    pub fn start_in<S: AsRef<OsStr>>(name: &str, args: &[S], dir: &Path) -> Self {
        let mut child = Command::new(binary(name))
            .args(args)
            .current_dir(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (sender, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if sender.send(line).is_err() {
                    return;
                }
            }
        });
        Self { child, lines }
    }

    /// Reads lines until one contains `needle`, and returns it.
    pub fn line_containing(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + STAGE_MAX;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return line,
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => {
                    panic!("no line containing {needle:?} within {STAGE_MAX:?}")
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("the example ended without printing a line containing {needle:?}")
                }
            }
        }
    }

    /// Kills it with SIGKILL and reaps it.
    pub fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Waits for it to exit, asserts that it succeeded, and returns the lines it printed that
    /// were not read yet.
    pub fn finish(mut self) -> Vec<String> {
        let deadline = Instant::now() + STAGE_MAX;
        let mut rest = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => rest.push(line),
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => {
                    panic!("the example did not end within {STAGE_MAX:?}; it printed {rest:?}")
                }
            }
        }
        // Its output has closed: it has exited, or is about to.
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "the example did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
        let status = self.child.wait().unwrap();
        assert!(
            status.success(),
            "the example exited with {status}; it printed {rest:?}"
        );
        rest
    }
}

impl Drop for Example {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Starts example `name` on `site`, reads its line containing `parked` (which names the
/// execution) and its `durably --db` hint, waits until the execution is `waiting`, kills the
/// example with SIGKILL, and checks that the execution is still `waiting`: parked, the process
/// held nothing the journal depends on. Returns the execution id.
pub fn kill_while_parked(site: &Site, name: &str, parked: &str) -> String {
    let mut example = site.start(name, &[]);
    let id = execution_id(&example.line_containing(parked));
    example.line_containing("durably --db");
    wait_for_status(site, &id, "waiting");
    example.kill();
    assert_eq!(status(site, &id), "waiting");
    id
}

/// The first printed line that contains `needle`.
pub fn line_with<'a>(printed: &'a [String], needle: &str) -> &'a str {
    printed
        .iter()
        .find(|line| line.contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle:?} in {printed:#?}"))
}

/// The execution id that follows `execution ` in `line`.
pub fn execution_id(line: &str) -> String {
    let (_, rest) = line
        .split_once("execution ")
        .unwrap_or_else(|| panic!("{line:?} names no execution"));
    let id: String = rest
        .chars()
        .take_while(|c| c.is_ascii_hexdigit() || *c == '-')
        .collect();
    assert_eq!(id.len(), 36, "{line:?} names no execution id");
    id
}

/// The one value `sql` reads from the journal, `?1` bound to `param` (an execution id, say).
pub fn value<T: FromSql>(site: &Site, sql: &str, param: &str) -> T {
    site.read(|conn| conn.query_row(sql, [param], |row| row.get(0)))
}

/// The rows of two columns `sql` reads from the journal, `?1` bound to `param`.
pub fn pairs<A: FromSql, B: FromSql>(site: &Site, sql: &str, param: &str) -> Vec<(A, B)> {
    site.read(|conn| {
        let mut statement = conn.prepare(sql)?;
        let rows = statement.query_map([param], |row| Ok((row.get(0)?, row.get(1)?)))?;
        rows.collect()
    })
}

/// The execution's status.
pub fn status(site: &Site, id: &str) -> String {
    value(
        site,
        "SELECT status FROM executions WHERE execution_id = ?1",
        id,
    )
}

/// How many messages sent to the execution a receive has consumed.
pub fn consumed_messages(site: &Site, id: &str) -> u32 {
    value(
        site,
        "SELECT count(*) FROM messages WHERE execution_id = ?1 AND consumed_seq IS NOT NULL",
        id,
    )
}

/// Waits until the execution reads `wanted`, failing the test after [`STAGE_MAX`].
pub fn wait_for_status(site: &Site, id: &str, wanted: &str) {
    let deadline = Instant::now() + STAGE_MAX;
    loop {
        let now = status(site, id);
        if now == wanted {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "status stayed {now}, never {wanted}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A guarded step as the journal records it.
#[derive(Debug)]
pub struct GuardedStep {
    /// Its name.
    pub name: String,
    /// Its state.
    pub state: String,
    /// Its idempotency key, which the fake providers record.
    pub key: String,
    /// How many times its closure was started.
    pub attempts: u32,
}

/// The guarded steps of execution `id`, in order.
pub fn guarded_steps(site: &Site, id: &str) -> Vec<GuardedStep> {
    site.read(|conn| {
        let mut statement = conn.prepare(
            "SELECT name, state, idempotency_key, attempts FROM steps
             WHERE execution_id = ?1 AND effect = 'guarded' ORDER BY seq",
        )?;
        let rows = statement.query_map([id], |row| {
            Ok(GuardedStep {
                name: row.get(0)?,
                state: row.get(1)?,
                key: row.get(2)?,
                attempts: row.get(3)?,
            })
        })?;
        rows.collect()
    })
}

/// How many requests the fake provider `name` of the journal of `site` served, by key; empty
/// when it served none.
pub fn ledger(site: &Site, name: &str) -> BTreeMap<String, usize> {
    let path = site.ledger_file(name);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(error) => panic!("{}: {error}", path.display()),
    };
    let mut served = BTreeMap::new();
    for line in text.lines() {
        let (key, _) = line.split_once('\t').unwrap();
        *served.entry(key.to_owned()).or_default() += 1;
    }
    served
}

/// Asserts that each guarded step of execution `id` completed, and that the provider
/// `provider_of(step name)` served its key once: the effect happened once, however many times
/// a crash made its closure start.
pub fn assert_each_effect_once(site: &Site, id: &str, provider_of: impl Fn(&str) -> &'static str) {
    let steps = guarded_steps(site, id);
    assert!(!steps.is_empty(), "execution {id} has no guarded step");
    for step in steps {
        assert_eq!(step.state, "completed", "{step:?}");
        let provider = provider_of(&step.name);
        let served = ledger(site, provider).get(&step.key).copied();
        assert_eq!(served, Some(1), "{provider} for {step:?}");
    }
}
