//! What a session's transaction is, followed from the control statements the connection runs.
//!
//! PostgreSQL aborts a whole transaction at its first error, and a later `COMMIT` then rolls it
//! back while reporting success (its command tag says `ROLLBACK`, which the driver does not
//! show). SQLite keeps the transaction and commits the statements that worked. So that a caller
//! that went on after an error learns that nothing committed, the connection follows the state
//! and turns such a `COMMIT` into an error.

use super::translate::{Control, Translated};

/// The session's transaction, as far as the statements run on it tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum TransactionState {
    /// No transaction block is open.
    #[default]
    Idle,
    /// A transaction block is open and usable.
    Open,
    /// A transaction block is open and an error aborted it: every statement but `ROLLBACK`
    /// fails, and `COMMIT` rolls it back.
    Aborted,
}

/// The state after SQL text ran, and whether a `COMMIT` in it found the transaction aborted (so
/// rolled it back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct AfterSuccess {
    pub(super) state: TransactionState,
    pub(super) commit_rolled_back: bool,
}

impl TransactionState {
    /// After `translated` ran without error.
    pub(super) fn after_success(self, translated: &Translated) -> AfterSuccess {
        let mut state = self;
        let mut commit_rolled_back = false;
        for control in &translated.controls {
            state = match control {
                Control::Begin => Self::Open,
                Control::Commit => {
                    commit_rolled_back |= state == Self::Aborted;
                    Self::Idle
                }
                Control::Rollback => Self::Idle,
                Control::RollbackToSavepoint if state == Self::Aborted => Self::Open,
                Control::RollbackToSavepoint => state,
            };
        }
        AfterSuccess {
            state,
            commit_rolled_back,
        }
    }

    /// After the server refused `translated` (the connection still up).
    ///
    /// A failed lone `COMMIT` or `ROLLBACK` ends the transaction; any other error inside a
    /// transaction block, including one the text itself began, aborts it. Outside a block the
    /// text ran as its own implicit transaction, which the error ended.
    pub(super) fn after_error(self, translated: &Translated) -> Self {
        let ends = translated.statements == 1
            && matches!(
                translated.controls[..],
                [Control::Commit | Control::Rollback]
            );
        if ends {
            Self::Idle
        } else if self != Self::Idle || translated.controls.contains(&Control::Begin) {
            Self::Aborted
        } else {
            Self::Idle
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::translate::translate;
    use super::TransactionState::{Aborted, Idle, Open};
    use super::*;

    fn success(state: TransactionState, sql: &str) -> (TransactionState, bool) {
        let after = state.after_success(&translate(sql));
        (after.state, after.commit_rolled_back)
    }

    #[test]
    fn control_statements_move_the_state() {
        assert_eq!(success(Idle, "BEGIN"), (Open, false));
        assert_eq!(success(Open, "INSERT INTO t VALUES (1)"), (Open, false));
        assert_eq!(success(Open, "COMMIT"), (Idle, false));
        assert_eq!(success(Open, "ROLLBACK"), (Idle, false));
        assert_eq!(success(Idle, "BEGIN; SELECT 1 FOR UPDATE"), (Open, false));
        assert_eq!(
            success(Idle, "BEGIN; INSERT INTO t VALUES (1); COMMIT"),
            (Idle, false)
        );
    }

    #[test]
    fn a_commit_after_an_error_is_known_to_have_rolled_back() {
        assert_eq!(
            Open.after_error(&translate("INSERT INTO t VALUES (1)")),
            Aborted
        );
        assert_eq!(success(Aborted, "COMMIT"), (Idle, true));
        assert_eq!(success(Aborted, "ROLLBACK"), (Idle, false));
        assert_eq!(success(Aborted, "ROLLBACK TO SAVEPOINT s"), (Open, false));
        assert_eq!(success(Open, "ROLLBACK TO SAVEPOINT s"), (Open, false));
    }

    #[test]
    fn errors_abort_only_open_transactions() {
        assert_eq!(
            Idle.after_error(&translate("INSERT INTO t VALUES (1)")),
            Idle
        );
        assert_eq!(
            Idle.after_error(&translate("BEGIN; INSERT INTO t VALUES (1)")),
            Aborted
        );
        assert_eq!(Open.after_error(&translate("COMMIT")), Idle);
        assert_eq!(Aborted.after_error(&translate("SELECT 1")), Aborted);
        assert_eq!(
            Open.after_error(&translate("INSERT INTO t VALUES (1); COMMIT")),
            Aborted
        );
    }
}
