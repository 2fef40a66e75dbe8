//! The recorded steps of an execution, read a window at a time as replay reaches them. A
//! resumed execution holds one window, however many steps it has recorded: at most
//! [`REPLAY_WINDOW_STEPS_MAX`] steps, whose payloads add up to at most
//! [`REPLAY_WINDOW_BYTES_MAX`] beyond the window's first step. Each window is one range read of
//! the index `steps_by_execution` from the next step to replay, and the first is read
//! when the execution is opened. Once a window has reached the end of the recorded steps, no
//! further read is made: every later step is new.
//!
//! Windows read at different times agree, because the steps of an execution change only under
//! its lock: the handle replaying them holds it, and writes only the steps it has reserved (a
//! result, a skip) and steps with no record.
//!
//! A seq with no row below the highest recorded one (a gap) is a step that had no outcome when
//! the run stopped: steps run in parallel finish in any order, and a later sibling's row (a
//! guarded step's intent, say) may commit before an earlier one's. Replay hands a gap back as
//! not recorded, so the step runs again, as after any crash.

use durably_db::{Connection, params};
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::journal::Journal;
use crate::payload::{Payload, PayloadColumn};
use crate::records;
use crate::states::StepState;
use crate::step::Effect;

/// The most recorded steps one replay window holds.
pub(crate) const REPLAY_WINDOW_STEPS_MAX: u32 = 1024;

/// The most payload bytes one replay window holds beyond its first step: a window ends early
/// at the step that reaches this. A single step may hold up to twice the payload cap (a result
/// or an error, each under the cap), so a window never holds more than this plus that.
pub(crate) const REPLAY_WINDOW_BYTES_MAX: usize = 4 * 1024 * 1024;

/// One recorded step, as replay needs it.
#[derive(Debug, Clone)]
pub(crate) struct RecordedStep {
    pub(crate) name: String,
    pub(crate) effect: Effect,
    pub(crate) state: StepState,
    pub(crate) result: Option<Payload>,
    pub(crate) error: Option<Payload>,
    pub(crate) attempts: u32,
}

/// The recorded steps of one execution, read a window at a time.
#[derive(Debug)]
pub(crate) struct Replay {
    journal: Journal,
    execution_id: Uuid,
    /// How many steps were recorded when the execution was opened: one past the highest seq.
    recorded: u32,
    /// Steps `first_seq`, `first_seq + 1`, ... in order; each is taken once.
    window: Vec<Option<RecordedStep>>,
    first_seq: u32,
    /// The first seq with no recorded step, once a window has reached it.
    end: Option<u32>,
}

impl Replay {
    /// Reads how many steps execution `execution_id` has recorded, and the first window of
    /// them, in one read transaction.
    ///
    /// # Errors
    /// As [`Replay::take`].
    pub(crate) fn open(journal: &Journal, execution_id: Uuid) -> Result<Self> {
        let bytes_max = journal.payload_bytes_max();
        let (recorded, (window, complete)) = journal.read(|conn| {
            let recorded = recorded_steps(conn, execution_id)?;
            Ok((recorded, read_window(conn, execution_id, 0, bytes_max)?))
        })?;
        let mut replay = Self {
            journal: journal.clone(),
            execution_id,
            recorded,
            window: Vec::new(),
            first_seq: 0,
            end: None,
        };
        replay.install(0, window, complete);
        Ok(replay)
    }

    /// The replay of an execution that has no row yet (a deferred open): nothing recorded,
    /// nothing to read.
    pub(crate) fn empty(journal: &Journal, execution_id: Uuid) -> Self {
        Self {
            journal: journal.clone(),
            execution_id,
            recorded: 0,
            window: Vec::new(),
            first_seq: 0,
            end: Some(0),
        }
    }

    /// How many steps were recorded when the execution was opened.
    pub(crate) fn recorded(&self) -> u32 {
        self.recorded
    }

    /// Takes the recorded step `seq`, if any, reading the next window when `seq` is past this
    /// one. Steps are taken in order, each once, so a step's record is moved out rather than
    /// copied, and the window it was in is dropped when the next is read.
    ///
    /// # Errors
    /// [`Error::Inconsistent`] for a damaged row, or a `seq` asked for after replay moved past
    /// it; [`Error::PayloadTooLarge`] for a recorded payload
    /// over the cap, refused before it is read; a storage error.
    pub(crate) fn take(&mut self, seq: u32) -> Result<Option<RecordedStep>> {
        let Some(index) = self.index_of(seq)? else {
            return Ok(None);
        };
        Ok(self.window.get_mut(index).and_then(Option::take))
    }

    /// The name and effect of the recorded step `seq`, if any, leaving it to be taken: reads
    /// the next window when `seq` is past this one, as [`Replay::take`] does.
    ///
    /// # Errors
    /// As [`Replay::take`].
    pub(crate) fn peek(&mut self, seq: u32) -> Result<Option<(&str, Effect)>> {
        let Some(index) = self.index_of(seq)? else {
            return Ok(None);
        };
        Ok(self
            .window
            .get(index)
            .and_then(Option::as_ref)
            .map(|step| (step.name.as_str(), step.effect)))
    }

    /// Where step `seq` is in the window, reading the window it is in when `seq` is past this
    /// one; `None` past the last recorded step.
    fn index_of(&mut self, seq: u32) -> Result<Option<usize>> {
        if self.end.is_some_and(|end| seq >= end) {
            return Ok(None);
        }
        let Some(mut index) = seq.checked_sub(self.first_seq) else {
            return Err(Error::Inconsistent(format!(
                "step {seq} of execution {} was asked for after replay had moved past it",
                self.execution_id
            )));
        };
        if index as usize >= self.window.len() {
            self.read_window(seq)?;
            index = 0;
        }
        Ok(Some(index as usize))
    }

    /// Replaces the window with the recorded steps from `from_seq` on.
    fn read_window(&mut self, from_seq: u32) -> Result<()> {
        let (execution_id, bytes_max) = (self.execution_id, self.journal.payload_bytes_max());
        let (window, complete) = self
            .journal
            .read(|conn| read_window(conn, execution_id, from_seq, bytes_max))?;
        self.install(from_seq, window, complete);
        Ok(())
    }

    /// Makes `window`, read from `from_seq` on, the current window.
    fn install(&mut self, from_seq: u32, window: Vec<Option<RecordedStep>>, complete: bool) {
        debug_assert!(window.len() <= REPLAY_WINDOW_STEPS_MAX as usize);
        let read = u32::try_from(window.len()).unwrap_or(u32::MAX);
        self.end = complete.then(|| from_seq.saturating_add(read));
        self.first_seq = from_seq;
        self.window = window;
    }

    /// How many steps the current window holds.
    #[cfg(test)]
    pub(crate) fn window_len(&self) -> usize {
        self.window.len()
    }
}

/// One past the highest recorded seq of `?1`: one seek at the end of its range of the index.
const RECORDED_STEPS: &str = "SELECT max(seq) + 1 FROM steps WHERE execution_id = ?1";

/// How many steps `execution_id` has recorded: one past its highest seq (a gap below it is a
/// step that had no outcome yet, see the module's documentation).
fn recorded_steps(conn: &Connection, execution_id: Uuid) -> Result<u32> {
    let recorded: Option<i64> = conn
        .prepare_cached(RECORDED_STEPS)?
        .query_row(params![execution_id.to_string()], |row| row.get(0))?;
    u32::try_from(recorded.unwrap_or(0)).map_err(|_| {
        Error::Inconsistent(format!(
            "execution {execution_id} has a step numbered outside 0 to {}",
            u32::MAX - 1
        ))
    })
}

/// The rows of a window: the steps of `?1` from seq `?2` on, at most `?3`. `+?3`, not `?3`:
/// SQLite would recompile the statement at every open to plan with a bare limit's value
/// (`crate::lifecycle`'s claim candidates say more).
const WINDOW_ROWS: &str = "WHERE execution_id = ?1 AND seq >= ?2 ORDER BY seq LIMIT +?3";

/// Reads the recorded steps of `execution_id` from `from_seq` on, up to the window's bounds,
/// with `None` for each seq of a gap (which counts toward the window's step bound). Also says
/// whether it reached the last recorded step.
fn read_window(
    conn: &Connection,
    execution_id: Uuid,
    from_seq: u32,
    bytes_max: usize,
) -> Result<(Vec<Option<RecordedStep>>, bool)> {
    let sql = format!(
        "SELECT seq, name, effect, state, attempts, {}, {} FROM steps {WINDOW_ROWS}",
        Payload::select("result", bytes_max, conn.dialect()),
        Payload::select("error", bytes_max, conn.dialect()),
    );
    let mut statement = conn.prepare_cached(&sql)?;
    let resource = execution_id.to_string();
    let mut rows = statement.query(params![resource, from_seq, REPLAY_WINDOW_STEPS_MAX])?;
    let (mut window, mut payload_bytes) = (Vec::new(), 0_usize);
    while let Some(row) = rows.next()? {
        let row = &row;
        let expected = i64::from(from_seq) + window.len() as i64;
        let seq: i64 = row.get(0)?;
        if seq < expected {
            return Err(Error::Inconsistent(format!(
                "execution {execution_id} has step {seq} where step {expected} was expected"
            )));
        }
        // A gap: the steps in it had no outcome yet. The window ends where its bound does, and
        // the next one is read from there.
        let steps_max = i64::from(REPLAY_WINDOW_STEPS_MAX);
        let gap = seq - expected;
        if window.len() as i64 + gap >= steps_max {
            let filled = usize::try_from(steps_max).unwrap_or(usize::MAX);
            window.resize_with(filled, || None);
            return Ok((window, false));
        }
        window.extend((0..gap).map(|_| None));
        let payload = |index, column: &'static str| {
            Payload::read(row, index, bytes_max, || {
                format!("the stored {column} of step {seq} of execution {execution_id}")
            })
        };
        let step = RecordedStep {
            name: row.get(1)?,
            effect: records::word(row, 2)?,
            state: records::word(row, 3)?,
            attempts: row.get::<_, i64>(4)?.clamp(0, i64::from(u32::MAX)) as u32,
            result: payload(5, "result")?,
            error: payload(7, "error")?,
        };
        payload_bytes += [&step.result, &step.error]
            .into_iter()
            .flatten()
            .map(|payload| payload.as_json().len())
            .sum::<usize>();
        window.push(Some(step));
        if payload_bytes >= REPLAY_WINDOW_BYTES_MAX {
            return Ok((window, false));
        }
    }
    let complete = window.len() < REPLAY_WINDOW_STEPS_MAX as usize;
    Ok((window, complete))
}

#[cfg(test)]
mod tests {
    //! What these prove: replay holds one bounded window of recorded steps however many are
    //! recorded, hands every step back in order across window boundaries, reads nothing once it
    //! has reached the end, and hands a gap back as not recorded. Method: a journal whose steps are written
    //! directly (the rows the step protocol writes), read through `Replay` as a handle reads
    //! them, checking the window's size after every step.
    #![allow(clippy::unwrap_used)]

    use durably_db::{Connection, params};
    use uuid::Uuid;

    use super::{
        RECORDED_STEPS, REPLAY_WINDOW_BYTES_MAX, REPLAY_WINDOW_STEPS_MAX, Replay, WINDOW_ROWS,
    };
    use crate::error::Result;
    use crate::inspect::query_plan;
    use crate::journal::Journal;

    const AT: &str = "2026-01-01T00:00:00.000Z";

    /// Runs `work` in one write transaction of `journal`.
    fn write(journal: &Journal, work: impl FnOnce(&Connection) -> Result<()> + Send + 'static) {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(journal.write(work))
            .unwrap();
    }

    /// Inserts completed step `seq` of `id` named `name`, with `result` as its result.
    fn insert_step(conn: &Connection, id: Uuid, seq: u32, name: &str, result: &str) -> Result<()> {
        conn.prepare_cached(
            "INSERT INTO steps (execution_id, seq, name, effect, state, idempotency_key, result,
                                attempts, result_at)
             VALUES (?1, ?2, ?3, 'pure', 'completed', ?4, ?5, 1, ?6)",
        )?
        .execute(params![
            id.to_string(),
            seq,
            name,
            Uuid::new_v4().to_string(),
            result,
            AT
        ])?;
        Ok(())
    }

    /// A journal holding execution `id` with `steps` completed steps, each with a result of
    /// `result_bytes` bytes of JSON.
    fn journal_with_steps(
        dir: &tempfile::TempDir,
        steps: u32,
        result_bytes: usize,
    ) -> (Journal, Uuid) {
        let journal = Journal::open(dir.path().join("journal.db")).unwrap();
        let id = Uuid::new_v4();
        let result = format!("\"{}\"", "r".repeat(result_bytes - 2));
        write(&journal, move |conn| {
            conn.execute(
                "INSERT INTO executions (execution_id, kind, name, status, input, created_at,
                                         updated_at)
                 VALUES (?1, 'test', 'test', 'running', '0', ?2, ?2)",
                params![id.to_string(), AT],
            )?;
            (0..steps).try_for_each(|seq| insert_step(conn, id, seq, "step", &result))
        });
        (journal, id)
    }

    /// A window is one range read of an index, wherever it starts, and the count of recorded
    /// steps one seek, however many there are.
    #[test]
    fn a_window_is_one_index_range_read_and_the_count_one_seek() {
        let window = format!("SELECT * FROM steps {WINDOW_ROWS}");
        assert_eq!(
            query_plan(&window, params!["an execution", 7, 100]),
            ["SEARCH steps USING INDEX steps_by_execution (execution_id=? AND seq>?)"]
        );
        assert_eq!(
            query_plan(RECORDED_STEPS, params!["an execution"]),
            ["SEARCH steps USING COVERING INDEX steps_by_execution (execution_id=?)"]
        );
    }

    #[test]
    fn a_long_execution_is_replayed_in_order_one_bounded_window_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let steps = 3 * REPLAY_WINDOW_STEPS_MAX + 17;
        let (journal, id) = journal_with_steps(&dir, steps, 3);
        let mut replay = Replay::open(&journal, id).unwrap();
        assert_eq!(replay.recorded(), steps);
        assert_eq!(replay.window_len(), REPLAY_WINDOW_STEPS_MAX as usize);
        for seq in 0..steps {
            let step = replay.take(seq).unwrap();
            assert_eq!(
                step.map(|step| step.name).as_deref(),
                Some("step"),
                "step {seq}"
            );
            assert!(replay.window_len() <= REPLAY_WINDOW_STEPS_MAX as usize);
        }
        assert!(replay.take(steps).unwrap().is_none());
        assert_eq!(
            replay.end,
            Some(steps),
            "the end of the recorded steps was not found"
        );
        // Past the end nothing is read: a step written there now is not seen.
        write(&journal, move |conn| {
            insert_step(conn, id, steps + 1, "late", "1")
        });
        assert!(replay.take(steps + 1).unwrap().is_none());
    }

    #[test]
    fn a_window_of_large_payloads_ends_at_the_byte_bound() {
        let dir = tempfile::tempdir().unwrap();
        let result_bytes = 256 * 1024;
        let (journal, id) = journal_with_steps(&dir, 40, result_bytes);
        let mut replay = Replay::open(&journal, id).unwrap();
        let bound = REPLAY_WINDOW_BYTES_MAX / result_bytes;
        assert_eq!(replay.window_len(), bound);
        for seq in 0..40 {
            assert!(replay.take(seq).unwrap().is_some(), "step {seq} lost");
            assert!(replay.window_len() <= bound);
        }
        assert!(replay.take(40).unwrap().is_none());
    }

    /// A gap (steps run in parallel, the later one's row committed first, then a crash) is a
    /// step with no outcome: replay hands it back as not recorded and goes on past it, also
    /// when it opens a window and when it is wider than a window.
    #[test]
    fn a_gap_replays_as_not_recorded_and_the_steps_after_it_still_replay() {
        let dir = tempfile::tempdir().unwrap();
        let (journal, id) = journal_with_steps(&dir, 3 * REPLAY_WINDOW_STEPS_MAX, 3);
        // The first step of the second window, and all of the third window but its last step.
        let gap = REPLAY_WINDOW_STEPS_MAX;
        let wide = (2 * REPLAY_WINDOW_STEPS_MAX, 3 * REPLAY_WINDOW_STEPS_MAX - 1);
        write(&journal, move |conn| {
            conn.execute(
                "DELETE FROM steps WHERE execution_id = ?1 AND (seq = ?2 OR seq BETWEEN ?3 AND ?4)",
                params![id.to_string(), gap, wide.0, wide.1 - 1],
            )?;
            Ok(())
        });
        let mut replay = Replay::open(&journal, id).unwrap();
        for seq in 0..3 * REPLAY_WINDOW_STEPS_MAX {
            let missing = seq == gap || (wide.0..wide.1).contains(&seq);
            assert_eq!(replay.take(seq).unwrap().is_none(), missing, "step {seq}");
            assert!(replay.window_len() <= REPLAY_WINDOW_STEPS_MAX as usize);
        }
        assert!(replay.take(3 * REPLAY_WINDOW_STEPS_MAX).unwrap().is_none());
    }
}
