use std::fmt::Debug;

use chrono::{DateTime, Utc};

/// A source of wall-clock time, injected so tests can freeze and move it.
pub trait Clock: Send + Sync + Debug {
    /// The current time in UTC.
    fn now(&self) -> DateTime<Utc>;
}

/// The system's real-time clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

pub use durably_db::time::{format_timestamp, parse_timestamp};
