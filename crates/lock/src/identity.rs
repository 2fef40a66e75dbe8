use std::fmt::Debug;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Who a process is, in a form that survives pid reuse and reboots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessIdentity {
    /// The process id, as seen from its own pid namespace.
    pub pid: i64,
    /// Start time in clock ticks after boot (`/proc/<pid>/stat` field 22). A reused pid has a
    /// different start time.
    pub start_time: i64,
    /// `/proc/sys/kernel/random/boot_id`: differs after every reboot.
    pub boot_id: String,
    /// Inode of `/proc/<pid>/ns/pid`: pids are only comparable inside one namespace.
    pub pid_ns: i64,
    /// The host name, for people and for telling another host from a reboot.
    pub hostname: String,
}

/// What `/proc/<pid>/stat` says about a process that exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessStat {
    /// Field 22, start time in clock ticks after boot.
    pub start_time: i64,
    /// Field 3, the one-letter state (`R`, `S`, `T`, `Z`, ...).
    pub state: char,
}

impl ProcessStat {
    /// A zombie (`Z`) or dead (`X`) process has exited; only its parent has not reaped it.
    pub fn has_exited(&self) -> bool {
        matches!(self.state, 'Z' | 'X')
    }
}

/// Reads process facts. Injected so tests can fake another boot, pid or namespace.
pub trait ProcessTable: Send + Sync + Debug {
    /// This process's own identity.
    ///
    /// # Errors
    /// [`Error::Identity`] or [`Error::ProcFormat`] when `/proc` cannot be read.
    fn own_identity(&self) -> Result<ProcessIdentity>;

    /// The stat of `pid` in this process's pid namespace; `Ok(None)` when no such process exists.
    ///
    /// # Errors
    /// An error when the process exists but cannot be read or parsed.
    fn stat(&self, pid: i64) -> Result<Option<ProcessStat>>;
}

/// The real `/proc` of a Linux host.
#[derive(Debug, Clone)]
pub struct ProcFs {
    root: PathBuf,
    // Whether `root` is this host's real /proc, whose pids `kill(pid, 0)` can confirm.
    real: bool,
}

impl Default for ProcFs {
    fn default() -> Self {
        Self {
            root: PathBuf::from("/proc"),
            real: true,
        }
    }
}

impl ProcFs {
    /// A `/proc` mounted somewhere else (tests point this at a fake tree).
    pub fn at(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            real: false,
        }
    }

    fn read(&self, relative: &str) -> Result<String> {
        let path = self.root.join(relative);
        std::fs::read_to_string(&path).map_err(|source| Error::Identity { path, source })
    }
}

impl ProcessTable for ProcFs {
    fn own_identity(&self) -> Result<ProcessIdentity> {
        let pid = i64::from(std::process::id());
        let stat_path = self.root.join("self/stat");
        let stat = parse_stat(&stat_path, &self.read("self/stat")?)?;
        let ns_path = self.root.join("self/ns/pid");
        let pid_ns = std::fs::metadata(&ns_path)
            .map_err(|source| Error::Identity {
                path: ns_path,
                source,
            })?
            .ino() as i64;
        Ok(ProcessIdentity {
            pid,
            start_time: stat.start_time,
            boot_id: self.read("sys/kernel/random/boot_id")?.trim().to_owned(),
            pid_ns,
            hostname: self.read("sys/kernel/hostname")?.trim().to_owned(),
        })
    }

    fn stat(&self, pid: i64) -> Result<Option<ProcessStat>> {
        let path = self.root.join(format!("{pid}/stat"));
        match std::fs::read_to_string(&path) {
            Ok(text) => parse_stat(&path, &text).map(Some),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                if self.real && process_exists(pid) {
                    // /proc mounted with `hidepid` hides other users' processes: the pid
                    // exists, but its start time cannot be read, so it must not count as dead.
                    return Err(Error::Identity {
                        path,
                        source: error,
                    });
                }
                Ok(None)
            }
            // A process that exits between open and read leaves ESRCH behind.
            Err(error) if error.raw_os_error() == Some(3) => Ok(None),
            Err(source) => Err(Error::Identity { path, source }),
        }
    }
}

/// Whether a process with `pid` exists, asked of the kernel with the null signal: `EPERM`
/// means it exists but belongs to another user.
fn process_exists(pid: i64) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: kill with signal 0 sends nothing; it only checks that the pid exists and may be
    // signalled. It has no memory-safety preconditions.
    let result = unsafe { libc::kill(pid, 0) };
    result == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Parses `/proc/<pid>/stat`. The command name (field 2) is in parentheses and may itself hold
/// spaces and parentheses, so the fields are counted from the last `)`.
pub(crate) fn parse_stat(path: &Path, text: &str) -> Result<ProcessStat> {
    let bad = |reason: &str| Error::ProcFormat {
        path: path.to_owned(),
        reason: reason.to_owned(),
    };
    let close = text
        .rfind(')')
        .ok_or_else(|| bad("no ')' after the command name"))?;
    let mut fields = text[close + 1..].split_ascii_whitespace();
    let state = fields
        .next()
        .and_then(|field| field.chars().next())
        .ok_or_else(|| bad("no state field"))?;
    // After the state (field 3) come fields 4..; field 22 is the 19th of those.
    let start_time = fields
        .nth(18)
        .ok_or_else(|| bad("fewer than 22 fields"))?
        .parse::<i64>()
        .map_err(|_| bad("field 22 (start time) is not a number"))?;
    Ok(ProcessStat { start_time, state })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_parentheses_and_spaces_in_the_command_name_parses() {
        let line = "42 (a) b (c) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 \
                    10 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0";
        let stat = parse_stat(Path::new("x"), line).unwrap();
        assert_eq!(stat.state, 'S');
        assert_eq!(stat.start_time, 987_654);
    }

    #[test]
    fn truncated_stat_is_a_format_error_not_a_panic() {
        assert!(parse_stat(Path::new("x"), "42 (a) S 1 2").is_err());
        assert!(parse_stat(Path::new("x"), "garbage").is_err());
        assert!(parse_stat(Path::new("x"), "").is_err());
    }

    #[test]
    fn own_identity_matches_this_process() {
        let me = ProcFs::default().own_identity().unwrap();
        assert_eq!(me.pid, i64::from(std::process::id()));
        assert_eq!(me.boot_id.len(), 36);
        let stat = ProcFs::default().stat(me.pid).unwrap().unwrap();
        assert_eq!(stat.start_time, me.start_time);
        assert!(!stat.has_exited());
    }
}
