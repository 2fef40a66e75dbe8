//! Helpers for the `scheduler_*` tests: `scheduler_worker` children and the effect ledger they
//! append to.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use super::{Driven, Scratch, read_lines};

/// One line of the effect ledger: a body call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effect {
    pub slot_ms: i64,
    pub key: String,
    pub pid: u32,
}

impl Scratch {
    /// Starts a worker; closing its stdin ([`Driven::finish`]) asks it to shut down.
    pub fn worker(&self, every_ms: u64, policy: &str, block_first: bool, overlap: &str) -> Driven {
        Driven::start(
            Command::new(env!("CARGO_BIN_EXE_scheduler_worker"))
                .arg(&self.database)
                .arg(&self.ledger)
                .arg(every_ms.to_string())
                .arg(policy)
                .arg(if block_first { "1" } else { "0" })
                .arg(overlap),
        )
    }

    /// Every line of the effect ledger so far.
    pub fn effects(&self) -> Vec<Effect> {
        read_lines(&self.ledger)
            .iter()
            .map(|line| {
                let words: Vec<&str> = line.split(' ').collect();
                assert_eq!(words.len(), 4, "torn ledger line {line:?}");
                Effect {
                    slot_ms: words[1].parse().unwrap(),
                    key: words[2].to_owned(),
                    pid: words[3].parse().unwrap(),
                }
            })
            .collect()
    }

    /// The effects grouped by slot.
    pub fn effects_by_slot(&self) -> BTreeMap<i64, Vec<Effect>> {
        let mut by_slot: BTreeMap<i64, Vec<Effect>> = BTreeMap::new();
        for effect in self.effects() {
            by_slot.entry(effect.slot_ms).or_default().push(effect);
        }
        by_slot
    }

    /// The slots a worker blocked in.
    pub fn blocked(&self) -> Vec<i64> {
        let path = PathBuf::from(format!("{}.blocked", self.ledger.display()));
        read_lines(&path)
            .iter()
            .map(|line| line.parse().unwrap())
            .collect()
    }

    pub fn query<T: rusqlite::types::FromSql>(
        &self,
        sql: &str,
        params: impl rusqlite::Params,
    ) -> T {
        let conn = rusqlite::Connection::open(&self.database).unwrap();
        conn.busy_timeout(Duration::from_secs(10)).unwrap();
        conn.query_row(sql, params, |row| row.get(0)).unwrap()
    }
}
