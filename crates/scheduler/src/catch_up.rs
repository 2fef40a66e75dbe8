//! Which slots to fire now: catch-up after downtime, and overlap with a running fire.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::schedule::Schedule;
use crate::slot::Slot;

/// How late a slot may be and still fire under [`CatchUp::Skip`], in milliseconds. A slot later
/// than this counts as missed: the scheduler was down, suspended or stalled at its time.
pub const SKIP_LATENESS_MS_MAX: i64 = 60_000;

/// The largest `max` accepted by [`CatchUp::All`]: the most slots one call may return to fire.
pub const CATCH_UP_SLOTS_MAX: usize = 1_000;

/// How many skipped cron slots [`due_slots`] counts one by one before it reports
/// [`SlotCount::AtLeast`]. Interval slots are counted exactly by arithmetic at any number.
pub const SKIPPED_SLOTS_COUNTED_MAX: u64 = 10_000;

/// What to do with slots whose time passed while no scheduler ran them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CatchUp {
    /// Fire no missed slot. After downtime the job waits for its next slot. A slot fires only
    /// if it is the first one after the last handled slot and at most
    /// [`SKIP_LATENESS_MS_MAX`] late.
    Skip,
    /// Fire the latest missed slot once, however late, and skip the older ones.
    Latest,
    /// Fire every missed slot that lies within `window` before now, the most recent `max` of
    /// them, oldest first; skip the rest.
    All {
        /// How far back a missed slot may lie and still fire. Must not be zero.
        window: Duration,
        /// The most slots to fire in one catch-up, from 1 to [`CATCH_UP_SLOTS_MAX`].
        max: usize,
    },
}

/// What to do when a slot comes due while the job's previous fire is still running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Overlap {
    /// Do not start the new fire; record it as skipped.
    Skip,
    /// Start the new fire alongside the running one.
    Allow,
}

impl Overlap {
    /// Whether a due slot may start while `previous_running` says if an earlier fire of the
    /// same job is still running.
    pub fn permits(self, previous_running: bool) -> bool {
        match self {
            Self::Skip => !previous_running,
            Self::Allow => true,
        }
    }
}

/// A number of slots that may have been too many to count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SlotCount {
    /// Exactly this many.
    Exact(u64),
    /// At least this many; counting stopped at [`SKIPPED_SLOTS_COUNTED_MAX`].
    AtLeast(u64),
}

/// A run of consecutive missed slots that will not fire, summarised so that years of downtime
/// take constant memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SkippedSlots {
    /// The earliest skipped slot.
    pub first: Slot,
    /// The latest skipped slot.
    pub last: Slot,
    /// How many slots lie from `first` to `last`, both included.
    pub count: SlotCount,
}

/// The answer of [`due_slots`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DueSlots {
    /// Slots to fire now, ascending, each after the last handled slot and at or before now.
    /// At most [`CATCH_UP_SLOTS_MAX`] long.
    pub fire: Vec<Slot>,
    /// Missed slots that will not fire, all older than every slot in `fire`.
    pub skipped: Option<SkippedSlots>,
    /// The last handled slot to store once `fire` has been fired and `skipped` recorded: the
    /// latest slot at or before now, or the old value if no new slot came due.
    pub handled_through: Option<Slot>,
    /// The first slot after now: when to ask again.
    pub next: Option<Slot>,
}

/// Decides which slots of `schedule` to fire at `now`.
///
/// `last_handled` is the latest slot already fired *or* reported skipped for this job (the
/// previous call's [`DueSlots::handled_through`]), or `None` when the job was just registered.
/// Only slots in `(last_handled, now]` are candidates, so a clock that moves backward never
/// gives a slot at or before `last_handled`.
///
/// - **First registration** (`last_handled` is `None`): slots before registration were never
///   missed, so none is reported skipped. `Skip` fires nothing and waits for the next slot;
///   `Latest` fires the latest slot at or before now; `All` fires that slot too if it lies
///   within `window`.
/// - **Afterwards:** the missed slots are those in `(last_handled, now]`; `policy` picks which
///   to fire, as documented on [`CatchUp`], and the rest are reported in `skipped`.
///
/// Work is bounded: at most `max` backward steps for `All`, and at most
/// [`SKIPPED_SLOTS_COUNTED_MAX`] steps to count skipped cron slots.
///
/// # Errors
///
/// - [`Error::InvalidCatchUp`] if `All` has a zero `window`, or a `max` of 0 or above
///   [`CATCH_UP_SLOTS_MAX`].
/// - [`Error::CronEvaluation`] if the cron engine fails.
pub fn due_slots(
    schedule: &Schedule,
    last_handled: Option<Slot>,
    now: Slot,
    policy: &CatchUp,
) -> Result<DueSlots> {
    check_policy(policy)?;
    let next = schedule.next_after(now)?;
    let latest = match schedule.latest_at_or_before(now)? {
        Some(latest) if last_handled.is_none_or(|handled| latest > handled) => latest,
        // No slot came due since the last handled one, or the clock moved backward.
        _ => {
            return Ok(DueSlots {
                fire: Vec::new(),
                skipped: None,
                handled_through: last_handled,
                next,
            });
        }
    };
    let lateness_ms = i128::from(now.as_millis()) - i128::from(latest.as_millis());
    let (fire, skipped) = match last_handled {
        None => {
            let fire = match policy {
                CatchUp::Skip => Vec::new(),
                CatchUp::Latest => vec![latest],
                CatchUp::All { window, .. } => {
                    if lateness_ms <= window.as_millis() as i128 {
                        vec![latest]
                    } else {
                        Vec::new()
                    }
                }
            };
            (fire, None)
        }
        Some(handled) => {
            let fire = fire_after_downtime(schedule, handled, latest, now, policy)?;
            let skipped = skipped_before(schedule, handled, latest, fire.first().copied())?;
            (fire, skipped)
        }
    };
    debug_assert!(fire.windows(2).all(|pair| pair[0] < pair[1]));
    debug_assert!(
        fire.iter()
            .all(|&slot| slot <= now && last_handled < Some(slot))
    );
    debug_assert!(fire.len() <= CATCH_UP_SLOTS_MAX);
    Ok(DueSlots {
        fire,
        skipped,
        handled_through: Some(latest),
        next,
    })
}

pub(crate) fn check_policy(policy: &CatchUp) -> Result<()> {
    if let CatchUp::All { window, max } = *policy {
        if window.is_zero() {
            return Err(Error::InvalidCatchUp {
                reason: "the `All` window is zero".to_owned(),
            });
        }
        if !(1..=CATCH_UP_SLOTS_MAX).contains(&max) {
            return Err(Error::InvalidCatchUp {
                reason: format!("the `All` max is {max}, outside 1 to {CATCH_UP_SLOTS_MAX}"),
            });
        }
    }
    Ok(())
}

/// The slots in `(handled, latest]` that `policy` fires, ascending. `latest` is the last slot at
/// or before `now`, and lies after `handled`.
fn fire_after_downtime(
    schedule: &Schedule,
    handled: Slot,
    latest: Slot,
    now: Slot,
    policy: &CatchUp,
) -> Result<Vec<Slot>> {
    let lateness_ms = now.as_millis() - latest.as_millis();
    match *policy {
        CatchUp::Skip => {
            let on_time = schedule.next_after(handled)? == Some(latest)
                && lateness_ms <= SKIP_LATENESS_MS_MAX;
            Ok(if on_time { vec![latest] } else { Vec::new() })
        }
        CatchUp::Latest => Ok(vec![latest]),
        CatchUp::All { window, max } => {
            let oldest_allowed_ms = i128::from(now.as_millis()) - window.as_millis() as i128;
            let mut fire = Vec::with_capacity(max);
            let mut cursor = Some(latest);
            // Walk back from the latest slot; `max` bounds the walk.
            while let Some(slot) = cursor {
                if slot <= handled || i128::from(slot.as_millis()) < oldest_allowed_ms {
                    break;
                }
                fire.push(slot);
                if fire.len() == max {
                    break;
                }
                cursor = slot_before(schedule, slot)?;
            }
            fire.reverse();
            Ok(fire)
        }
    }
}

/// The missed slots in `(handled, latest]` that come before `first_fired`, summarised.
fn skipped_before(
    schedule: &Schedule,
    handled: Slot,
    latest: Slot,
    first_fired: Option<Slot>,
) -> Result<Option<SkippedSlots>> {
    let Some(first) = schedule.next_after(handled)? else {
        return Ok(None);
    };
    let last = match first_fired {
        Some(fired) if fired <= first => return Ok(None),
        Some(fired) => match slot_before(schedule, fired)? {
            Some(last) => last,
            None => return Ok(None),
        },
        None => latest,
    };
    debug_assert!(handled < first && first <= last && last <= latest);
    let count = schedule.count_between(handled, last, SKIPPED_SLOTS_COUNTED_MAX)?;
    Ok(Some(SkippedSlots { first, last, count }))
}

/// The slot just before `slot`, if any.
fn slot_before(schedule: &Schedule, slot: Slot) -> Result<Option<Slot>> {
    match Slot::from_millis(slot.as_millis() - 1) {
        Ok(earlier) => schedule.latest_at_or_before(earlier),
        Err(_) => Ok(None),
    }
}

#[cfg(test)]
mod tests;
