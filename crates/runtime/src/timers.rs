//! Durable timers (plan §5.1): [`WorkflowContext::sleep`] and
//! [`WorkflowContext::sleep_until`].
//!
//! A timer is the pure step `durably:sleep/<name>` whose result is its wake time,
//! `{"wake_at": T}`, computed on the run that first reaches it. A later run replays `T`, so an
//! execution resumed after a crash or a park waits only what is left of it. Before the wait
//! the step is durable: a wait in memory writes it at once, a park carries it. The wait ends
//! only when the runtime's clock reads `T` or later, re-read after every wake-up, so every
//! step after a timer is stamped at or after its wake time.

use std::convert::Infallible;
use std::time::Duration;

use chrono::{DateTime, Utc};
use durably_journal::{Effect, Reservation, StepError, Timing};
use durably_lock::{format_timestamp, parse_timestamp};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::context::{Lease, WorkflowContext};
use crate::error::{Error, Result};
use crate::names::{self, NameKind};
use crate::parking::{self, Wait};
use crate::waiting;

/// The recorded result of a timer's step.
#[derive(Debug, Serialize, Deserialize)]
struct Timer {
    /// The wake time, as the journal stamps instants.
    wake_at: String,
}

impl WorkflowContext {
    /// Waits `duration` from the first time this step runs, durably: a resumed execution waits
    /// only what is left. A wait longer than the runtime's `park_after` parks the execution
    /// (no lock, no task, no memory) until any runtime serving its kind wakes it.
    ///
    /// `name` names the timer in the journal (`durably:sleep/<name>`) and must be the same on
    /// every run, like any step's name.
    ///
    /// # Errors
    /// Nothing is written on the first two: [`Error::InvalidName`] for an empty, overlong or
    /// control-character `name`; [`Error::InvalidOption`] for a duration whose end cannot be
    /// stored (past the year 9999). Then the journal's step errors, as [`Error::Journal`].
    pub fn sleep<'a>(
        &'a self,
        name: &'a str,
        duration: Duration,
    ) -> impl Future<Output = Result<()>> + use<'a> {
        let started = names::check(NameKind::TimerName, name).and_then(|()| {
            let now = durably_lock::Clock::now(self.waits.clock.as_ref());
            let wake_at = waiting::instant_after(now, duration, "a sleep")?;
            self.begin_timer(name, wake_at)
        });
        self.sleep_to(name, started)
    }

    /// Waits until `at` on the runtime's clock, durably; see [`WorkflowContext::sleep`]. An
    /// instant already past returns at once (and is recorded).
    ///
    /// # Errors
    /// As [`WorkflowContext::sleep`].
    pub fn sleep_until<'a>(
        &'a self,
        name: &'a str,
        at: DateTime<Utc>,
    ) -> impl Future<Output = Result<()>> + use<'a> {
        let started = names::check(NameKind::TimerName, name)
            .and_then(|()| waiting::storable(at, "a sleep"))
            .and_then(|_| self.begin_timer(name, at));
        self.sleep_to(name, started)
    }

    /// Reserves the timer's step now.
    fn begin_timer(
        &self,
        name: &str,
        wake_at: DateTime<Utc>,
    ) -> Result<(Lease, Reservation, DateTime<Utc>)> {
        let (lease, reserved) = self.begin_step_unchecked(&format!("durably:sleep/{name}"))?;
        Ok((lease, reserved, wake_at))
    }

    /// Records the timer (or replays its wake time) and waits for it.
    async fn sleep_to(
        &self,
        name: &str,
        started: Result<(Lease, Reservation, DateTime<Utc>)>,
    ) -> Result<()> {
        let (lease, reserved, wake_at) = started?;
        let step = format!("durably:sleep/{name}");
        let now = durably_lock::Clock::now(self.waits.clock.as_ref());
        // A wait in memory records the timer first, so a crash during it loses no time; a park
        // carries the step, and a timer already due needs it durable no sooner than the next
        // write. A replayed step writes nothing either way.
        let timing = if wake_at > now && !self.waits.parks(wake_at - now) {
            Timing::Now
        } else {
            Timing::Deferred
        };
        let recorded = Timer {
            wake_at: format_timestamp(wake_at),
        };
        let outcome = reserved
            .step_with(
                Effect::Pure,
                timing,
                move |_| {
                    let timer = Timer {
                        wake_at: recorded.wake_at.clone(),
                    };
                    async move { Ok::<_, StepError>(timer) }
                },
                |_, _| Ok(()),
            )
            .await;
        let timer: Timer = self.slot.remember(outcome)?;
        let wake_at = parse_timestamp(&timer.wake_at).ok_or_else(|| {
            Error::Journal(durably_journal::Error::Inconsistent(format!(
                "step {step:?} of execution {} records wake_at {:?}, not a timestamp",
                self.id, timer.wake_at
            )))
        })?;
        let wait = Wait {
            execution_id: self.id,
            until: wake_at,
            topic: None,
            detail: json!({ "timer": name, "wake_at": timer.wake_at }),
            own_steps: 0,
        };
        parking::wait_or_park(
            (&self.slot, &lease),
            &self.waits,
            &self.parked,
            wait,
            || Ok(None::<Infallible>),
        )
        .await?;
        Ok(())
    }
}
