//! Fixtures shared by the runtime's integration tests.
#![allow(clippy::unwrap_used, dead_code)]

use durably_journal::{Execution, Journal, Opened};
use uuid::Uuid;

/// A running execution with the `runtime_executions` row that starting it through the runtime
/// writes, inserted with SQL: a stand-in for a started execution that needs no dispatcher.
pub async fn runtime_execution(journal: &Journal) -> (Uuid, Execution) {
    let id = durably_journal::new_execution_id();
    let Opened::Running(execution) = journal
        .open_execution(id, "approval", "", &())
        .await
        .unwrap()
    else {
        unreachable!("a new execution is never finished");
    };
    journal
        .write(move |conn| {
            conn.execute(
                "INSERT INTO runtime_executions (execution_id, version) VALUES (?1, 1)",
                [id.to_string()],
            )?;
            Ok(())
        })
        .await
        .unwrap();
    (id, execution)
}
