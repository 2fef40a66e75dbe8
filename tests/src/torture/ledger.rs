//! The independent ledger and the acknowledgement logs: append-only text files that the engine
//! never writes.
//!
//! Each record is one line, written with one `write` on a file opened with `O_APPEND`, so
//! records of concurrent processes never interleave inside a line. A process killed inside its
//! `write` can still leave a torn line; every record therefore starts with `@` and ends with a
//! checksum, and a reader keeps only complete records (a torn effect counts as not done, like a
//! request the remote side never received whole).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The ledger of effects, shared by every process of a run.
pub const LEDGER_FILE: &str = "ledger.log";
/// The directory of acknowledgement logs, one file per process.
pub const ACKS_DIR: &str = "acks";

/// An append-only record file.
#[derive(Debug)]
pub struct RecordFile {
    file: File,
    path: PathBuf,
}

impl RecordFile {
    /// Opens (creating) `path` for appending.
    ///
    /// # Errors
    /// The file cannot be opened.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Self {
            file,
            path: path.to_owned(),
        })
    }

    /// The acknowledgement log of this process in `dir`.
    ///
    /// # Errors
    /// The directory or the file cannot be made.
    pub fn own_acks(dir: &Path) -> std::io::Result<Self> {
        let acks = dir.join(ACKS_DIR);
        std::fs::create_dir_all(&acks)?;
        Self::open(&acks.join(format!("{}.log", std::process::id())))
    }

    /// Appends one record of `fields` (which must hold no space, `@`, `#` or newline) with one
    /// `write` system call.
    ///
    /// # Errors
    /// The write failed or was short.
    pub fn append(&self, fields: &[&str]) -> std::io::Result<()> {
        let line = encode(fields);
        let written = (&self.file).write(line.as_bytes())?;
        if written == line.len() {
            Ok(())
        } else {
            Err(std::io::Error::other(format!(
                "short write of {written} of {} bytes to {}",
                line.len(),
                self.path.display()
            )))
        }
    }
}

/// A 64-bit FNV-1a hash: enough to tell a torn record from a whole one.
fn checksum(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn encode(fields: &[&str]) -> String {
    let body = fields.join(" ");
    debug_assert!(
        !body.contains(['@', '#', '\n']),
        "unencodable record {body:?}"
    );
    format!("@{body} #{:016x}\n", checksum(&body))
}

/// The complete records of `text`, in file order. A torn record (a process died inside its
/// write, and the next record was appended right after the torn bytes) is dropped.
pub fn parse(text: &str) -> Vec<Vec<String>> {
    text.split('\n')
        .filter_map(|line| {
            let start = line.rfind('@')?;
            let (body, sum) = line[start + 1..].rsplit_once(" #")?;
            let sum = u64::from_str_radix(sum, 16).ok()?;
            (sum == checksum(body)).then(|| body.split(' ').map(str::to_owned).collect())
        })
        .collect()
}

/// Reads and parses a record file; a missing file has no records.
///
/// # Errors
/// The file exists but cannot be read.
pub fn read(path: &Path) -> std::io::Result<Vec<Vec<String>>> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(parse(&String::from_utf8_lossy(&bytes))),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(error) => Err(error),
    }
}

/// Every record of every acknowledgement log in `dir`.
///
/// # Errors
/// A log cannot be read.
pub fn read_acks(dir: &Path) -> std::io::Result<Vec<Vec<String>>> {
    let mut records = Vec::new();
    let entries = match std::fs::read_dir(dir.join(ACKS_DIR)) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(records),
        Err(error) => return Err(error),
    };
    for entry in entries {
        records.extend(read(&entry?.path())?);
    }
    Ok(records)
}

/// `CLOCK_MONOTONIC` in nanoseconds: one clock for every process of the host, so records of
/// different files can be ordered.
pub fn monotonic_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec and CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut now) };
    (now.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(now.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torn_records_are_dropped_and_whole_ones_kept() {
        let whole = encode(&["E", "a", "1"]);
        let other = encode(&["A", "b", "2"]);
        let torn = &whole[..whole.len() - 5];
        let text = format!("{whole}{torn}{other}{whole}");
        let records = parse(&text);
        assert_eq!(records.len(), 3);
        assert_eq!(records[1], ["A", "b", "2"]);
        assert!(parse(torn).is_empty());
    }
}
