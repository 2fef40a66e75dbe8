//! The recorded steps of an execution, loaded once when it is opened. Replay then happens in
//! memory: a resumed execution never reads the database step by step.

use rusqlite::{Connection, params};

use crate::error::{Error, Result};
use crate::records;
use crate::states::StepState;
use crate::step::Effect;

/// One recorded step, as replay needs it.
#[derive(Debug, Clone)]
pub(crate) struct RecordedStep {
    pub(crate) name: String,
    pub(crate) effect: Effect,
    pub(crate) state: StepState,
    pub(crate) result: Option<String>,
    pub(crate) error: Option<String>,
    pub(crate) attempts: u32,
}

/// The recorded steps of one execution, indexed by seq.
#[derive(Debug, Default)]
pub(crate) struct Replay {
    steps: Vec<Option<RecordedStep>>,
}

impl Replay {
    /// Loads every step of `resource`. Steps are numbered 0, 1, 2, ... without gaps; a gap means
    /// the journal was edited or damaged, and is an error rather than a silent repair.
    pub(crate) fn load(
        conn: &Connection,
        resource: &str,
        payload_bytes_max: usize,
    ) -> Result<Self> {
        let mut statement = conn.prepare_cached(
            "SELECT seq, name, effect, state, result, error, attempts FROM steps
             WHERE execution_id = ?1 ORDER BY seq",
        )?;
        let mut rows = statement.query(params![resource])?;
        let mut steps = Vec::new();
        while let Some(row) = rows.next()? {
            let seq: i64 = row.get(0)?;
            if seq != steps.len() as i64 {
                return Err(Error::Inconsistent(format!(
                    "execution {resource} has step {seq} where step {} was expected",
                    steps.len()
                )));
            }
            let step = RecordedStep {
                name: row.get(1)?,
                effect: records::word(row, 2)?,
                state: records::word(row, 3)?,
                result: row.get(4)?,
                error: row.get(5)?,
                attempts: row.get::<_, i64>(6)?.clamp(0, i64::from(u32::MAX)) as u32,
            };
            for text in [&step.result, &step.error].into_iter().flatten() {
                if text.len() > payload_bytes_max {
                    return Err(Error::PayloadTooLarge {
                        what: format!("the recorded payload of step {seq}"),
                        bytes: text.len(),
                        max: payload_bytes_max,
                    });
                }
            }
            steps.push(Some(step));
        }
        Ok(Self { steps })
    }

    /// Takes the recorded step `seq`, if any. Each step is replayed once, in order, so its
    /// record is moved out rather than copied.
    pub(crate) fn take(&mut self, seq: u32) -> Option<RecordedStep> {
        self.steps.get_mut(seq as usize).and_then(Option::take)
    }

    /// How many steps are recorded.
    pub(crate) fn len(&self) -> usize {
        self.steps.len()
    }
}
