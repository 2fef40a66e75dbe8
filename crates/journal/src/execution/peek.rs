//! [`Execution::recorded_next`]: what the journal recorded at the next step, without taking
//! it, for crates built on the journal that decide by what an execution did before (the
//! runtime's patch markers).

use super::Execution;
use crate::error::Result;
use crate::step::Effect;

impl Execution {
    /// The name and effect of the step recorded at [`Execution::next_seq`], if one is: the
    /// step a call there replays. `None` when the execution has recorded no step there (the
    /// call runs it for the first time; also a gap parallel steps left). Nothing is taken: the next step call still replays
    /// it, or meets it as non-determinism.
    ///
    /// # Errors
    /// As a step's replay: [`crate::Error::Inconsistent`] for a damaged row,
    /// [`crate::Error::PayloadTooLarge`], or a storage error.
    pub fn recorded_next(&self) -> Result<Option<(String, Effect)>> {
        let mut state = self.shared.state();
        let seq = state.next_seq;
        Ok(state
            .replay
            .peek(seq)?
            .map(|(name, effect)| (name.to_owned(), effect)))
    }
}
