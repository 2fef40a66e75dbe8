//! The deterministic id of one fire, a (job, slot) pair, and the fire that carries it.

use uuid::Uuid;

use crate::job_id::JobId;
use crate::slot::Slot;

/// The blake3 `derive_key` context for fire ids. Changing it changes every fire id, which would
/// fire every slot a second time after an upgrade, so it is versioned and frozen.
const FIRE_ID_CONTEXT: &str = "durably scheduler fire v1";

/// The execution id of the fire of `job` at `slot`.
///
/// Every scheduler process that fires the same slot of the same job computes the same id, so
/// the journal's exclusive open of that execution makes the fire happen once, across restarts
/// and across processes.
///
/// # Derivation (frozen: version 1)
///
/// ```text
/// msg = u64_le(len(job_id_utf8)) ‖ job_id_utf8 ‖ i64_le(slot as Unix epoch milliseconds, UTC)
/// key = blake3::derive_key("durably scheduler fire v1", msg)      // 32 bytes
/// b   = key[0..16]
/// b[6] = (b[6] & 0x0f) | 0x80                                     // version 8 (custom)
/// b[8] = (b[8] & 0x3f) | 0x80                                     // RFC 9562 variant
/// id  = b as a UUID, printed lowercase and hyphenated
/// ```
///
/// The length prefix keeps the encoding of the job id self-delimiting, so no two (job, slot)
/// pairs share a message even if the slot encoding ever becomes variable-width. Fixed vectors in
/// the tests below hold the derivation stable across releases; for example `nightly-report` at
/// `2026-01-01T00:00:00.000Z` is `b536f2cf-7f95-8a51-8745-e481d1e20d41`.
pub fn fire_id(job: &JobId, slot: Slot) -> Uuid {
    let job_bytes = job.as_str().as_bytes();
    // A job id is at most 200 bytes, so its length always fits in a u64.
    let job_len = job_bytes.len() as u64;

    let mut message = Vec::with_capacity(8 + job_bytes.len() + 8);
    message.extend_from_slice(&job_len.to_le_bytes());
    message.extend_from_slice(job_bytes);
    message.extend_from_slice(&slot.as_millis().to_le_bytes());

    let key = blake3::derive_key(FIRE_ID_CONTEXT, &message);
    let mut bytes = [0_u8; 16];
    bytes.copy_from_slice(&key[..16]);
    bytes[6] = (bytes[6] & 0x0f) | 0x80;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;

    let id = Uuid::from_bytes(bytes);
    debug_assert_eq!(id.get_version_num(), 8);
    debug_assert_eq!(id.get_variant(), uuid::Variant::RFC4122);
    id
}

/// One fire: a job and a slot. It is also the typed input of every fire's execution: a job's
/// workflow takes a `Fire` and learns which job and which slot it runs for (stored as
/// `{"job": ..., "slot": RFC 3339, "slot_ms": epoch ms}`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fire {
    /// The job.
    pub job: JobId,
    /// The slot fired: a nominal grid time, never the time the fire happened to start.
    pub slot: Slot,
}

impl Fire {
    /// The fire of `job` at `slot`.
    pub fn new(job: &JobId, slot: Slot) -> Self {
        Self {
            job: job.clone(),
            slot,
        }
    }

    /// The fire id: `fire_id(job, slot)`, the id of the execution that runs this fire. The
    /// same in every process and on every resume, so it is the key to hand a remote side that
    /// must see the fire at most once.
    pub fn execution_id(&self) -> Uuid {
        fire_id(&self.job, self.slot)
    }
}

/// The stored shape of a [`Fire`].
#[derive(serde::Serialize, serde::Deserialize)]
struct FireInput {
    job: String,
    slot: String,
    slot_ms: i64,
}

impl serde::Serialize for Fire {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        FireInput {
            job: self.job.to_string(),
            slot: self.slot.to_rfc3339(),
            slot_ms: self.slot.as_millis(),
        }
        .serialize(serializer)
    }
}

impl<'de> serde::Deserialize<'de> for Fire {
    /// Checks the job id and the slot range; `slot_ms` is the slot, `slot` only its text.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let input = FireInput::deserialize(deserializer)?;
        let job = JobId::new(&input.job).map_err(D::Error::custom)?;
        let slot = Slot::from_millis(input.slot_ms).map_err(D::Error::custom)?;
        Ok(Self { job, slot })
    }
}

#[cfg(test)]
mod tests {
    //! Proves that fire ids are stable and collision-resistant by pinning them to fixed
    //! vectors. The vectors were computed outside this crate: the message bytes were built
    //! with Python's `struct.pack`, hashed with the `b3sum --derive-key` command-line tool, and
    //! the version and variant bits were set by hand.

    use super::*;

    fn id(job: &str, millis: i64) -> String {
        fire_id(
            &JobId::new(job).unwrap(),
            Slot::from_millis(millis).unwrap(),
        )
        .to_string()
    }

    #[test]
    fn nightly_report_vector_is_stable() {
        // 2026-01-01T00:00:00Z is 1_767_225_600_000 ms after the epoch.
        let slot = Slot::from_millis(1_767_225_600_000).unwrap();
        assert_eq!(slot.to_rfc3339(), "2026-01-01T00:00:00.000Z");
        assert_eq!(
            id("nightly-report", 1_767_225_600_000),
            "b536f2cf-7f95-8a51-8745-e481d1e20d41"
        );
    }

    #[test]
    fn epoch_vector_is_stable() {
        assert_eq!(id("a", 0), "01d30d37-b842-8f1d-b5b3-f0386268f16b");
    }

    #[test]
    fn pairs_that_collide_under_naive_text_concatenation_get_different_ids() {
        // Gluing the job id to the slot written in decimal gives "job-123" for both pairs. The
        // real derivation length-prefixes the job id and writes the slot as eight fixed bytes,
        // so the messages differ and so do the ids.
        assert_eq!(format!("{}{}", "job-1", 23), format!("{}{}", "job-12", 3));
        let first = id("job-1", 23);
        let second = id("job-12", 3);
        assert_eq!(first, "99603950-8e47-8b7d-93d8-9e396fab5ef3");
        assert_eq!(second, "89571c5f-8681-867f-9500-5769e9855d73");
        assert_ne!(first, second);
    }

    #[test]
    fn shifting_a_byte_from_job_to_slot_changes_the_id() {
        // ("ab", t) against ("a", t') where t' starts with the byte b'b' followed by t's low
        // bytes: without the length prefix the two messages would agree on their first nine
        // bytes. The ids must still differ.
        let t: i64 = 0x0000_0001_0203_0405;
        let t_shifted = (t << 8) | i64::from(b'b');
        assert_eq!(&t_shifted.to_le_bytes()[..1], b"b");
        assert_eq!(t_shifted.to_le_bytes()[1..], t.to_le_bytes()[..7]);
        assert_ne!(id("ab", t), id("a", t_shifted));
    }

    #[test]
    fn version_is_8_and_variant_is_rfc_9562() {
        for (job, millis) in [("nightly-report", 1_767_225_600_000), ("a", 0), ("z", 1)] {
            let id = fire_id(
                &JobId::new(job).unwrap(),
                Slot::from_millis(millis).unwrap(),
            );
            assert_eq!(id.get_version_num(), 8);
            assert_eq!(id.get_variant(), uuid::Variant::RFC4122);
            let text = id.to_string();
            assert_eq!(text.as_bytes()[14], b'8', "{text}");
            assert!(
                matches!(text.as_bytes()[19], b'8' | b'9' | b'a' | b'b'),
                "{text}"
            );
            assert_eq!(text, text.to_lowercase());
        }
    }

    #[test]
    fn every_input_bit_matters() {
        let base = id("nightly-report", 1_767_225_600_000);
        assert_ne!(base, id("nightly-report", 1_767_225_600_001));
        assert_ne!(base, id("nightly-reporT", 1_767_225_600_000));
    }
}
