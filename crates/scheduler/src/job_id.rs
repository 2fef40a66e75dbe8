//! The name of a scheduled job.

use std::fmt;

use crate::error::{Error, Result};

/// The longest job id accepted, in UTF-8 bytes.
pub const JOB_ID_BYTES_MAX: usize = 200;

/// How many characters of a rejected id an error message repeats.
const JOB_ID_DISPLAY_CHARS_MAX: usize = 64;

/// The stable name of a scheduled job, for example `nightly-report`.
///
/// A fire id is derived from the job id's bytes, so renaming a job gives all its slots new fire
/// ids.
///
/// Invariant: 1 to [`JOB_ID_BYTES_MAX`] bytes of UTF-8 with no control characters, checked in
/// [`JobId::new`], the only constructor. Control characters are refused because job ids are
/// printed by the CLI and read at the `sqlite3` prompt.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct JobId(String);

impl JobId {
    /// Validates `job_id` and wraps it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidJobId`] if `job_id` is empty, longer than [`JOB_ID_BYTES_MAX`] bytes, or
    /// holds a control character (such as a newline or an escape).
    pub fn new(job_id: &str) -> Result<Self> {
        let reason = if job_id.is_empty() {
            Some("it is empty")
        } else if job_id.len() > JOB_ID_BYTES_MAX {
            Some("it is longer than 200 bytes")
        } else if job_id.chars().any(char::is_control) {
            Some("it contains a control character")
        } else {
            None
        };
        match reason {
            None => Ok(Self(job_id.to_owned())),
            Some(reason) => Err(Error::InvalidJobId {
                job_id: job_id.chars().take(JOB_ID_DISPLAY_CHARS_MAX).collect(),
                reason,
            }),
        }
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for JobId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for JobId {
    type Err = Error;

    fn from_str(job_id: &str) -> Result<Self> {
        Self::new(job_id)
    }
}

impl<'de> serde::Deserialize<'de> for JobId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::new(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    //! Proves that every rule of the job id invariant is enforced at the boundary, by feeding
    //! ids just inside and just outside each rule.

    use super::*;

    #[test]
    fn accepts_printable_ids_up_to_the_byte_limit() {
        assert_eq!(
            JobId::new("nightly-report").unwrap().as_str(),
            "nightly-report"
        );
        assert!(JobId::new(&"x".repeat(JOB_ID_BYTES_MAX)).is_ok());
        // Multi-byte characters count by bytes: 100 two-byte characters is exactly the limit.
        assert!(JobId::new(&"é".repeat(100)).is_ok());
        assert!(JobId::new("rapport quotidien ✓").is_ok());
    }

    #[test]
    fn rejects_empty_long_and_control_ids() {
        for bad in [
            String::new(),
            "x".repeat(JOB_ID_BYTES_MAX + 1),
            "é".repeat(101),
            "a\nb".to_owned(),
            "\u{1b}[31mred".to_owned(),
            "tab\there".to_owned(),
        ] {
            let error = JobId::new(&bad).unwrap_err();
            assert!(
                matches!(error, Error::InvalidJobId { .. }),
                "{bad:?} gave {error:?}"
            );
        }
    }

    #[test]
    fn error_message_is_bounded_and_escaped() {
        let message = JobId::new(&format!("{}\n", "y".repeat(500)))
            .unwrap_err()
            .to_string();
        assert!(message.len() < 300, "{message}");
        assert!(!message.contains('\n'));
    }
}
