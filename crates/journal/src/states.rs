//! The closed vocabularies stored in the journal's TEXT columns: execution status, step state
//! and ambiguity policy. Each is parsed once, where a row is read, and matched exhaustively
//! after that. The schema's CHECK lists hold the same words; a test keeps the two in step.

/// A word read from a column that its vocabulary does not know: the row was written by
/// something else, or the file is damaged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{word:?} is not a known {vocabulary}")]
pub struct UnknownWord {
    /// Which vocabulary (`execution status`, `step state`, ...).
    pub vocabulary: &'static str,
    /// The word found.
    pub word: String,
}

/// Declares a fieldless enum stored as a lowercase word, with `as_str`, `ALL`, `FromStr`,
/// `Display` and `Serialize` all generated from one list so they cannot disagree.
macro_rules! stored_words {
    (
        $(#[$meta:meta])*
        $name:ident, $vocabulary:literal {
            $( $(#[$variant_meta:meta])* $variant:ident => $word:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, ::serde::Serialize)]
        #[serde(rename_all = "snake_case")]
        pub enum $name {
            $( $(#[$variant_meta])* $variant, )+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [Self] = &[ $( Self::$variant, )+ ];

            /// The word stored in the database.
            pub fn as_str(self) -> &'static str {
                match self {
                    $( Self::$variant => $word, )+
                }
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::states::UnknownWord;

            fn from_str(word: &str) -> ::std::result::Result<Self, $crate::states::UnknownWord> {
                match word {
                    $( $word => Ok(Self::$variant), )+
                    _ => Err($crate::states::UnknownWord { vocabulary: $vocabulary, word: word.to_owned() }),
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}
pub(crate) use stored_words;

stored_words! {
    /// The status of an execution (`executions.status`).
    Status, "execution status" {
        /// Waiting for a runtime to claim it: never opened, woken, requeued or resumed.
        /// Parked: no lock is held, and an open is refused ([`crate::Error::NotRunnable`]).
        Queued => "queued",
        /// Being driven, or abandoned by a process that has not been judged dead yet.
        Running => "running",
        /// Parked until a time or a message (its `due_at` and `wait_topic`). No lock is held,
        /// and an open is refused ([`crate::Error::NotRunnable`]).
        Waiting => "waiting",
        /// Finished with an output.
        Completed => "completed",
        /// Finished with an error.
        Failed => "failed",
        /// Cancelled; never reopens.
        Cancelled => "cancelled",
        /// Its process died; found by the crash-orphan sweep. Resumable.
        Interrupted => "interrupted",
        /// Parked after failing to resume too many times in a row; only an operator's resume
        /// moves it on. An open is refused ([`crate::Error::NotRunnable`]).
        Stuck => "stuck",
        /// Parked with a guarded step in the ambiguous window that its policy leaves to an
        /// operator. No process reopens it ([`crate::Error::AwaitingOperator`]) until the step
        /// is resolved.
        AwaitingOperator => "awaiting_operator",
    }
}

impl Status {
    /// Whether the execution has ended for good.
    pub fn is_final(self) -> bool {
        match self {
            Self::Completed | Self::Failed | Self::Cancelled => true,
            Self::Queued
            | Self::Running
            | Self::Waiting
            | Self::Interrupted
            | Self::Stuck
            | Self::AwaitingOperator => false,
        }
    }

    /// Whether the execution is parked: a row that holds no lock and that no open resumes
    /// (`queued`, `waiting`, `stuck`, `awaiting_operator`).
    pub fn is_parked(self) -> bool {
        match self {
            Self::Queued | Self::Waiting | Self::Stuck | Self::AwaitingOperator => true,
            Self::Running
            | Self::Interrupted
            | Self::Completed
            | Self::Failed
            | Self::Cancelled => false,
        }
    }
}

stored_words! {
    /// Where a step is in its protocol (`steps.state`).
    StepState, "step state" {
        /// A guarded step's intent is recorded and its result is not: the ambiguous window.
        Intent => "intent",
        /// The step ran and its result is recorded.
        Completed => "completed",
        /// The step ran and its error is recorded.
        Failed => "failed",
        /// A guarded step found ambiguous was skipped under the Skip policy.
        Skipped => "skipped",
    }
}

stored_words! {
    /// Which ambiguity policy a guarded step was recorded with (`steps.policy`). The policy
    /// itself, with its probe, is [`crate::Policy`].
    PolicyKind, "ambiguity policy" {
        /// [`crate::Policy::Skip`].
        Skip => "skip",
        /// [`crate::Policy::Retry`].
        Retry => "retry",
        /// [`crate::Policy::Fail`].
        Fail => "fail",
        /// [`crate::Policy::Reconcile`].
        Reconcile => "reconcile",
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// Every stored word parses back to its value, and a word of another vocabulary does not.
    #[test]
    fn words_round_trip_and_strangers_are_refused() {
        for status in Status::ALL {
            assert_eq!(status.as_str().parse::<Status>().unwrap(), *status);
        }
        for state in StepState::ALL {
            assert_eq!(state.as_str().parse::<StepState>().unwrap(), *state);
        }
        for policy in PolicyKind::ALL {
            assert_eq!(policy.as_str().parse::<PolicyKind>().unwrap(), *policy);
        }
        let error = "intent".parse::<Status>().unwrap_err();
        assert_eq!(
            error.to_string(),
            "\"intent\" is not a known execution status"
        );
    }
}
