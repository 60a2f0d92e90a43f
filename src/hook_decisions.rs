//! The qemu hook's decisions, counted for Prometheus: `virt_cpu_policy_hook_decisions_total{kind}`.
//!
//! The hook is a short process per guest operation and holds no counter, so each run adds its
//! decision to a small state file, `hook-decisions` in the state directory
//! (`/var/lib/virt-cpu-policy`, the hook's and the daemon's `--snapshot-dir`), and
//! virt-cpu-policyd renders the file into its metrics at every reconciliation
//! ([`crate::metrics`]). Reading the journal instead would tie the daemon to libsystemd's
//! sd-journal and its cursors, and miss hosts whose hook logs to a file.
//!
//! The file is text, one `KIND N` line per kind of the hook's decisions (the journal's kinds,
//! [`Decision::HOOK`]: `hook-allowed`, `hook-violation-allowed`, `hook-violation-refused`,
//! `hook-libvirt-refused`, `hook-error-allowed`, `hook-error-refused`), `#` lines comments. A
//! kind this version does not know (one a newer version counts: a name of [`is_kind_name`]'s
//! shape) is kept as it is and written back after the known ones, in the file's order, so a
//! downgrade or a mix of versions never resets the counts; the daemon renders the known kinds
//! only ([`Counts::iter`]: the metric's documented label values). It is
//! read and written under an exclusive `flock(2)` on `hook-decisions.lock` beside it
//! ([`crate::lockfile`]: libvirt starts guests in parallel, and no count may be lost), in place
//! ([`crate::writefile::overwrite_unsynced`]: not synced and no new file, as a guest start
//! waits); the daemon reads it under the lock shared ([`read`]), so it sees the old counts or
//! the new ones, never half a write. The hook's shell fallback (the binary cannot run) replaces
//! it under the same lock.
//!
//! Counting never changes the hook's answer: a state directory that cannot be made or written, a
//! lock held longer than [`LOCK_WAIT`], or a file that does not read as counts ([`Corrupt`]) is a
//! warning in the hook's log and the guest's answer stands. A corrupt file is replaced by counts
//! that start again from this decision (Prometheus takes the drop as a counter reset), never
//! appended to. Guests the hook does not judge (operations it passes, guests out of the policy's
//! scope) log no decision and are not counted.

use crate::log::Decision;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The counts file's name in the state directory.
pub const FILE: &str = "hook-decisions";

/// The lock file's name in the state directory ([`crate::lockfile::lock_path`] of [`FILE`]).
pub const LOCK_FILE: &str = "hook-decisions.lock";

/// The longest a hook waits for another one's lock before it gives up counting: the hooks' one
/// wait, [`crate::lockfile::HOOK_WAIT`].
pub const LOCK_WAIT: Duration = crate::lockfile::HOOK_WAIT;

/// The largest counts file read, in bytes: six short lines; anything longer is not one.
const MAX_BYTES: usize = 64 * 1024;

/// The hook's decisions by kind: one count per kind of [`Decision::HOOK`], in its order, and the
/// counts of kinds this version does not know, carried through unchanged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    /// The counts of [`Decision::HOOK`], in its order.
    known: [u64; Decision::HOOK.len()],
    /// Kinds a newer version counts (name, count), in the file's order.
    unknown: Vec<(String, u64)>,
}

/// The longest kind name kept: the journal's kinds are about 20 bytes.
const MAX_KIND_NAME: usize = 64;

/// Whether `name` has the shape of a decision kind (`hook-allowed`): a lowercase ASCII letter,
/// then lowercase letters, digits and `-`, at most 64 bytes. A name of this shape that is not a
/// hook kind this version knows is a newer version's kind, kept (the packaged qemu.d script's awk
/// reads the same shape).
#[must_use]
pub fn is_kind_name(name: &str) -> bool {
    name.len() <= MAX_KIND_NAME
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// Where `kind` is in [`Decision::HOOK`]; None for the daemon's kinds.
fn slot(kind: Decision) -> Option<usize> {
    Decision::HOOK.iter().position(|k| *k == kind)
}

/// Why a counts file's text is not counts: the line (from 1) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {what}")]
pub struct Corrupt {
    /// The line, counted from 1.
    pub line: usize,
    /// What is wrong with it.
    pub what: String,
}

/// Why [`count`] or [`read`] did not do all it should.
#[derive(Debug, thiserror::Error)]
pub enum CountError {
    /// The state directory, the lock or the counts file could not be used.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error (`TimedOut` for a lock held past [`LOCK_WAIT`]).
        #[source]
        source: std::io::Error,
    },
    /// The counts file is not counts ([`count`] replaces it).
    #[error("{}: not a counts file ({reason})", .path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
}

impl Counts {
    /// The count of `kind` (0 for the daemon's kinds, which the hook never makes).
    #[must_use]
    pub fn get(&self, kind: Decision) -> u64 {
        slot(kind).map_or(0, |i| self.known[i])
    }

    /// Count one decision of `kind` (saturating at `u64::MAX`; the daemon's kinds are not
    /// counted).
    pub fn add(&mut self, kind: Decision) {
        if let Some(i) = slot(kind) {
            self.known[i] = self.known[i].saturating_add(1);
        }
    }

    /// Every hook kind this version knows with its count, 0 included, in [`Decision::HOOK`]'s
    /// order: what the daemon renders.
    pub fn iter(&self) -> impl Iterator<Item = (Decision, u64)> + '_ {
        Decision::HOOK.into_iter().zip(self.known)
    }

    /// The kinds this version does not know, with their counts, in the file's order: carried
    /// through [`count`] unchanged, never rendered as metrics.
    #[must_use]
    pub fn unknown(&self) -> &[(String, u64)] {
        &self.unknown
    }

    /// The file's text: a comment, then one `KIND N` line per hook kind, then the kinds this
    /// version does not know, as read.
    #[must_use]
    pub fn render(&self) -> String {
        let mut s = String::from(
            "# virt-cpu-policy: the qemu hook's decisions on this host, by kind (virt_cpu_policy_hook_decisions_total)\n",
        );
        for (k, n) in self.iter() {
            let _ = writeln!(s, "{} {n}", k.name());
        }
        for (k, n) in &self.unknown {
            let _ = writeln!(s, "{k} {n}");
        }
        s
    }

    /// Reads [`Counts::render`]'s text: blank and `#` lines skipped, every other line `KIND N`
    /// with KIND a kind name ([`is_kind_name`]) named once and N a decimal `u64`; a hook kind
    /// not named is 0, one this version does not know is kept.
    ///
    /// # Errors
    /// [`Corrupt`] for the first line that is not so.
    pub fn parse(text: &str) -> Result<Counts, Corrupt> {
        let mut counts = Counts::default();
        let mut seen = [false; Decision::HOOK.len()];
        // Read as the packaged qemu.d script's awk reads it (its default field splitting): lines
        // end at '\n' only, fields are split by spaces and tabs only, so a '\r' or another
        // blank makes the file corrupt for both, and the two never disagree on a file.
        let blank = |c: char| c == ' ' || c == '\t';
        for (i, line) in text.split('\n').enumerate() {
            let line = line.trim_matches(blank);
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |what: String| Corrupt { line: i + 1, what };
            let fields: Vec<&str> = line.split(blank).filter(|f| !f.is_empty()).collect();
            let [name, n] = fields[..] else {
                return Err(bad(format!("`{line}` is not `KIND N`")));
            };
            if !is_kind_name(name) {
                return Err(bad(format!("`{name}` is not a kind name")));
            }
            // Digits only: `u64::from_str` also takes a leading '+', the script does not.
            let n: u64 = Some(n)
                .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| bad(format!("`{n}` is not a count")))?;
            let twice = match Decision::from_name(name).and_then(slot) {
                Some(slot) => {
                    counts.known[slot] = n;
                    std::mem::replace(&mut seen[slot], true)
                }
                None => {
                    let again = counts.unknown.iter().any(|(k, _)| k == name);
                    counts.unknown.push((name.to_string(), n));
                    again
                }
            };
            if twice {
                return Err(bad(format!("`{name}` counted twice")));
            }
        }
        Ok(counts)
    }
}

/// The counts in `path`: none when the file does not exist.
///
/// # Errors
/// [`CountError::Io`] when it exists but cannot be read as a regular file of at most 64 KiB;
/// [`CountError::Corrupt`] when it is not counts.
pub fn read_file(path: &Path) -> Result<Counts, CountError> {
    counts_of(
        path,
        crate::readfile::read_regular_if_present(path, MAX_BYTES),
    )
}

/// The counts in what was read of `path` (None: it does not exist), as [`read_file`] says.
fn counts_of(path: &Path, read: crate::lockfile::Old) -> Result<Counts, CountError> {
    let bytes = match read {
        Ok(Some(b)) => b,
        Ok(None) => return Ok(Counts::default()),
        Err(crate::readfile::ReadError::Io { source, .. }) => {
            return Err(CountError::Io {
                path: path.to_path_buf(),
                source,
            });
        }
        Err(e @ crate::readfile::ReadError::TooLarge { .. }) => {
            return Err(CountError::Corrupt {
                path: path.to_path_buf(),
                reason: e.to_string(),
            });
        }
    };
    let corrupt = |reason: String| CountError::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    let text = String::from_utf8(bytes).map_err(|_| corrupt("not UTF-8".into()))?;
    Counts::parse(&text).map_err(|c| corrupt(c.to_string()))
}

/// The counts in the state directory `state_dir` (for the daemon's metrics), read under the
/// lock shared (the hook writes them in place under it exclusive): waiting at most
/// [`LOCK_WAIT`]. A lock file that cannot be opened (a read-only state directory) leaves the
/// file read without it: nothing writes there then.
///
/// # Errors
/// As [`read_file`]; [`CountError::Io`] (`TimedOut`) when a writer held the lock past
/// [`LOCK_WAIT`].
pub fn read(state_dir: &Path) -> Result<Counts, CountError> {
    let file = state_dir.join(FILE);
    let _held = match crate::lockfile::Locked::shared_within(&state_dir.join(LOCK_FILE), LOCK_WAIT)
    {
        Ok(held) => Some(held),
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
            return Err(CountError::Io {
                path: file,
                source: e,
            });
        }
        Err(_) => None,
    };
    read_file(&file)
}

/// Adds one decision of `kind` to the counts in `state_dir` (made when missing), under the lock.
/// Returns the counts written, and the problem with the old file when it was replaced (not
/// counts, or not readable).
///
/// # Errors
/// [`CountError::Io`] when the directory, the lock or the write failed: nothing was counted and
/// the file is as it was.
pub fn count(state_dir: &Path, kind: Decision) -> Result<(Counts, Option<CountError>), CountError> {
    let file = state_dir.join(FILE);
    // Not synced: a sync added 0.3 ms to 3 ms at every guest start (benches/hook.rs); in place:
    // see `overwrite_unsynced`.
    let write = crate::writefile::overwrite_unsynced;
    crate::lockfile::update(&file, LOCK_WAIT, MAX_BYTES, write, |old| {
        let (mut counts, replaced) = match counts_of(&file, old) {
            Ok(c) => (c, None),
            Err(e) => (Counts::default(), Some(e)),
        };
        counts.add(kind);
        let text = counts.render();
        Ok(((counts, replaced), Some(text.into_bytes())))
    })
    .map_err(|e| CountError::Io {
        path: e.path,
        source: e.source,
    })
}

/// [`count`], as the hook calls it: any problem is a warning in the hook's log, where its
/// decision went ([`crate::log::init`]: journald or its log file, stderr only when that cannot be
/// opened; never stdout), and the guest's answer stands.
pub fn record(state_dir: &Path, kind: Decision) {
    match count(state_dir, kind) {
        Ok((_, None)) => {}
        Ok((_, Some(replaced))) => {
            tracing::warn!(error = %replaced, kind = kind.name(), "the hook's decision counts were replaced by new ones, from this decision");
        }
        Err(e) => {
            tracing::warn!(error = %e, kind = kind.name(), "cannot count the hook's decision; the decision stands");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("vcp-hookdec-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn the_text_reads_back_and_names_every_kind() {
        let mut c = Counts::default();
        c.add(Decision::HookAllowed);
        c.add(Decision::HookAllowed);
        c.add(Decision::HookErrorRefused);
        let text = c.render();
        assert_eq!(text.lines().filter(|l| !l.starts_with('#')).count(), 6);
        assert!(text.contains("\nhook-allowed 2\n"), "{text}");
        assert!(text.contains("\nhook-libvirt-refused 0\n"), "{text}");
        assert_eq!(Counts::parse(&text), Ok(c.clone()));
        // A kind not named is 0; blank lines and spaces are allowed.
        let c = Counts::parse("\n  hook-error-allowed   7 \n").unwrap();
        assert_eq!(c.get(Decision::HookErrorAllowed), 7);
        assert_eq!(c.get(Decision::HookAllowed), 0);
    }

    #[test]
    fn corrupt_text_names_its_line() {
        for (text, line, what) in [
            ("hook-allowed 1\nhook-allowed\n", 2, "is not `KIND N`"),
            ("hook-allowed 1 2\n", 1, "is not `KIND N`"),
            ("Hook-allowed 1\n", 1, "is not a kind name"),
            ("# c\nhook_allowed 1\n", 2, "is not a kind name"),
            ("-hook 1\n", 1, "is not a kind name"),
            ("hook-allowed\u{e9} 1\n", 1, "is not a kind name"),
            (&format!("h{} 1\n", "x".repeat(64)), 1, "is not a kind name"),
            (
                "hook-new 1\nhook-allowed 1\nhook-new 2\n",
                3,
                "counted twice",
            ),
            ("hook-allowed -1\n", 1, "is not a count"),
            ("hook-allowed 18446744073709551616\n", 1, "is not a count"),
            ("hook-allowed 1\nhook-allowed 2\n", 2, "counted twice"),
            // As the packaged script's awk reads it: '\r' and blanks other than space and tab
            // are not separators, a count is digits only.
            ("hook-allowed 1\r\n", 1, "is not a count"),
            ("hook-allowed 1\n\r\n", 2, "is not `KIND N`"),
            ("hook-allowed\u{a0}1\n", 1, "is not `KIND N`"),
            ("hook-allowed +1\n", 1, "is not a count"),
        ] {
            let e = Counts::parse(text).unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.what.contains(what), "{text:?}: {e}");
        }
    }

    /// A newer version's kinds (and any name of a kind's shape this version does not know) are
    /// kept: counting adds to the known kind and writes the others back unchanged, after the
    /// known ones, in the file's order; they are not among the kinds the daemon renders.
    #[test]
    fn kinds_of_a_newer_version_are_carried_through() {
        let d = scratch("newer");
        std::fs::create_dir_all(&d).unwrap();
        let written = "# a newer virt-cpu-policy\nhook-zeta-refused 7\nhook-allowed 3\nhook-alpha-allowed 18446744073709551615\n";
        std::fs::write(d.join(FILE), written).unwrap();
        let (c, replaced) = count(&d, Decision::HookAllowed).unwrap();
        assert!(replaced.is_none(), "{replaced:?}");
        assert_eq!(c.get(Decision::HookAllowed), 4);
        let unknown = [
            ("hook-zeta-refused".to_string(), 7),
            ("hook-alpha-allowed".to_string(), u64::MAX),
        ];
        assert_eq!(c.unknown(), unknown);
        assert_eq!(c.iter().count(), Decision::HOOK.len());
        let text = std::fs::read_to_string(d.join(FILE)).unwrap();
        assert!(
            text.ends_with(
                "hook-error-refused 0\nhook-zeta-refused 7\nhook-alpha-allowed 18446744073709551615\n"
            ),
            "{text}"
        );
        // Read back and counted again: the same unknown kinds, still unchanged.
        count(&d, Decision::HookErrorAllowed).unwrap();
        let again = read(&d).unwrap();
        assert_eq!(again.unknown(), unknown);
        assert_eq!(
            (
                again.get(Decision::HookAllowed),
                again.get(Decision::HookErrorAllowed)
            ),
            (4, 1)
        );
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn counting_makes_the_directory_and_adds_to_the_file() {
        let d = scratch("count");
        let state = d.join("state");
        let (c, replaced) = count(&state, Decision::HookViolationRefused).unwrap();
        assert!(replaced.is_none());
        assert_eq!(c.get(Decision::HookViolationRefused), 1);
        count(&state, Decision::HookViolationRefused).unwrap();
        count(&state, Decision::HookAllowed).unwrap();
        let c = read(&state).unwrap();
        assert_eq!(
            c.iter().collect::<Vec<_>>(),
            [
                (Decision::HookAllowed, 1),
                (Decision::HookViolationAllowed, 0),
                (Decision::HookViolationRefused, 2),
                (Decision::HookLibvirtRefused, 0),
                (Decision::HookErrorAllowed, 0),
                (Decision::HookErrorRefused, 0),
            ]
        );
        // No temporary file left beside the file and its lock.
        let mut names: Vec<String> = std::fs::read_dir(&state)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, [FILE, LOCK_FILE]);
        assert_eq!(read(&d.join("none")).unwrap(), Counts::default());
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn a_corrupt_file_is_replaced_not_appended_to() {
        let d = scratch("corrupt");
        std::fs::create_dir_all(&d).unwrap();
        for junk in [
            b"hook-allowed 5\ngarbage\n".to_vec(),
            b"\xff\xfe\x00".to_vec(),
            vec![b'x'; MAX_BYTES + 1],
        ] {
            std::fs::write(d.join(FILE), junk).unwrap();
            assert!(matches!(read(&d), Err(CountError::Corrupt { .. })));
            let (c, replaced) = count(&d, Decision::HookErrorAllowed).unwrap();
            let replaced = replaced.expect("the old file is reported");
            assert!(
                replaced.to_string().contains("not a counts file"),
                "{replaced}"
            );
            assert_eq!(
                c.get(Decision::HookAllowed),
                0,
                "the corrupt counts are dropped"
            );
            let text = std::fs::read_to_string(d.join(FILE)).unwrap();
            assert_eq!(text, c.render());
            assert_eq!(read(&d).unwrap().get(Decision::HookErrorAllowed), 1);
        }
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn a_state_directory_that_cannot_be_made_is_an_error_and_counts_nothing() {
        let d = scratch("nodir");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("file"), "x").unwrap();
        let e = count(&d.join("file/state"), Decision::HookAllowed).unwrap_err();
        assert!(matches!(e, CountError::Io { .. }), "{e}");
        assert!(e.to_string().contains("file/state"), "{e}");
        // record() says it and goes on.
        record(&d.join("file/state"), Decision::HookAllowed);
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn concurrent_counters_lose_no_count() {
        let d = scratch("threads");
        let threads: Vec<_> = (0..12)
            .map(|i| {
                let d = d.clone();
                std::thread::spawn(move || {
                    let kind = Decision::HOOK[i % Decision::HOOK.len()];
                    for _ in 0..10 {
                        count(&d, kind).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let c = read(&d).unwrap();
        let total: u64 = c.iter().map(|(_, n)| n).sum();
        assert_eq!(total, 12 * 10, "{c:?}");
        // Two threads per kind.
        assert!(c.iter().all(|(_, n)| n == 20), "{c:?}");
        std::fs::remove_dir_all(&d).ok();
    }
}
