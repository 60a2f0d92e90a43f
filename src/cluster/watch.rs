//! The cluster CPU never changes in silence: the last cluster CPU a host saw
//! ([`super::cluster_cpu::ClusterCpu`], from `[host] cluster`) is kept in the state directory
//! (`/var/lib/virt-cpu-policy/cluster-cpu`, the daemon's `--snapshot-dir`), so the first process
//! to see another one (the qemu hook at a guest start, or `virt-cpu-policyd` at a full
//! reconciliation) logs the change once ([`CLUSTER_CPU_CHANGED_ID`]: old and new model,
//! fingerprint, level, and the hosts responsible) and counts it; the others find it already
//! remembered and say nothing. The daemon's metrics show the CPU and the counts
//! (`virt_cpu_policy_cluster_cpu_info`, `virt_cpu_policy_cluster_level`,
//! `virt_cpu_policy_cluster_cpu_changes_total`; docs/metrics.md).
//!
//! The file is read and replaced under an exclusive `flock(2)` on `cluster-cpu.lock` beside it
//! ([`crate::lockfile`], so a hook and the daemon seeing the change at once log it once) and
//! written through [`crate::writefile::write_atomic`] (a reader never sees half of it).

use super::cluster_cpu::ClusterCpu;
use crate::cpu::Level;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The journal `MESSAGE_ID` of a cluster CPU change (docs/journal.md: `cluster-cpu-changed`).
pub const CLUSTER_CPU_CHANGED_ID: &str = "048feeb4354c4187aeb51526585bb052";

/// The state file's name in the state directory.
pub const STATE_FILE: &str = "cluster-cpu";

/// Which way the cluster CPU went (the `direction` label of
/// `virt_cpu_policy_cluster_cpu_changes_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Direction {
    /// `drop`: a lower psABI level, or at the same level features lost and none gained.
    Drop,
    /// `rise`: a higher level, or at the same level features gained and none lost.
    Rise,
    /// `change`: the same level, features both lost and gained (another model).
    Change,
}

impl Direction {
    /// Every direction, in the order the metric lists them.
    pub const ALL: [Direction; 3] = [Direction::Drop, Direction::Rise, Direction::Change];

    /// The label value.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Drop => "drop",
            Direction::Rise => "rise",
            Direction::Change => "change",
        }
    }
}

/// The cluster CPU as remembered: what the metrics show and a change is told against.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen {
    /// libvirt's model name.
    pub model: String,
    /// [`super::cluster_cpu::NamedCpu::fingerprint`] (8 hex digits).
    pub fingerprint: String,
    /// Its psABI level (None: below x86-64-v1).
    pub level: Option<Level>,
    /// Its effective features, sorted.
    pub features: Vec<String>,
    /// Each host with its own level, in the order of `[host] cluster`.
    pub hosts: Vec<(String, Option<Level>)>,
    /// Changes seen on this host so far, by direction.
    pub changes: BTreeMap<Direction, u64>,
}

/// A change of the cluster CPU, as logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuChange {
    /// Which way it went.
    pub direction: Direction,
    /// The CPU before.
    pub old: Seen,
    /// The CPU now.
    pub new: Seen,
    /// The hosts responsible, each as `NAME` with why (`joined`, `left`, `missing F, G`,
    /// `x86-64-v3 -> x86-64-v2`); empty when the same hosts at the same levels give another CPU
    /// (a facts file changed in features no level needs).
    pub responsible: Vec<String>,
}

/// `x86-64-vN`, or `below x86-64-v1`.
fn level_text(l: Option<Level>) -> &'static str {
    l.map_or("below x86-64-v1", Level::as_str)
}

/// The level as the metric's number: 0 below x86-64-v1, 1 to 4.
#[must_use]
pub fn level_number(l: Option<Level>) -> i64 {
    match l {
        None => 0,
        Some(Level::V1) => 1,
        Some(Level::V2) => 2,
        Some(Level::V3) => 3,
        Some(Level::V4) => 4,
    }
}

impl Seen {
    /// What `cpu` is, with no changes counted.
    #[must_use]
    pub fn of(cpu: &ClusterCpu) -> Seen {
        let named = cpu.named();
        Seen {
            model: cpu.model.clone(),
            fingerprint: named.fingerprint(),
            level: cpu.level,
            features: named.features,
            hosts: cpu
                .hosts
                .iter()
                .cloned()
                .zip(cpu.host_levels.iter().copied())
                .collect(),
            changes: BTreeMap::new(),
        }
    }

    /// The state file's text: `KEY VALUE` lines (`model`, `fingerprint`, `level`, `features`,
    /// one `host NAME LEVEL` per host, one `changes DIRECTION N` per direction).
    #[must_use]
    pub fn render(&self) -> String {
        let mut s = format!(
            "# virt-cpu-policy: the last cluster CPU seen on this host ([host] cluster)\nmodel {}\nfingerprint {}\nlevel {}\nfeatures {}\n",
            self.model,
            self.fingerprint,
            self.level.map_or("none", Level::as_str),
            self.features.join(" ")
        );
        for (h, l) in &self.hosts {
            let _ = writeln!(s, "host {h} {}", l.map_or("none", Level::as_str));
        }
        for d in Direction::ALL {
            let n = self.changes.get(&d).copied().unwrap_or(0);
            let _ = writeln!(s, "changes {} {n}", d.as_str());
        }
        s
    }

    /// Reads [`Seen::render`]'s text; None when it has no fingerprint (not such a file).
    #[must_use]
    pub fn parse(text: &str) -> Option<Seen> {
        let level = |v: &str| v.parse::<Level>().ok();
        let mut seen = Seen::default();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (key, value) = line.split_once(' ').unwrap_or((line, ""));
            match key {
                "model" => seen.model = value.to_string(),
                "fingerprint" => seen.fingerprint = value.to_string(),
                "level" => seen.level = level(value),
                "features" => {
                    seen.features = value.split_whitespace().map(str::to_string).collect();
                }
                "host" => {
                    let (name, l) = value.rsplit_once(' ').unwrap_or((value, "none"));
                    seen.hosts.push((name.to_string(), level(l)));
                }
                "changes" => {
                    let (d, n) = value.split_once(' ').unwrap_or((value, "0"));
                    let d = Direction::ALL.into_iter().find(|x| x.as_str() == d);
                    if let (Some(d), Ok(n)) = (d, n.parse()) {
                        seen.changes.insert(d, n);
                    }
                }
                _ => {}
            }
        }
        (!seen.fingerprint.is_empty()).then_some(seen)
    }

    /// `MODEL (LEVEL, N features, fingerprint FP)`.
    #[must_use]
    pub fn describe(&self) -> String {
        format!(
            "{} ({}, {} features, fingerprint {})",
            self.model,
            level_text(self.level),
            self.features.len(),
            self.fingerprint
        )
    }
}

/// How `new` differs from `old`, and the hosts responsible. `cpu` is the new cluster CPU (its
/// [`ClusterCpu::blocked`] names the hosts that hold it below the old level).
#[must_use]
pub fn compare(old: &Seen, new: &Seen, cpu: &ClusterCpu) -> CpuChange {
    let lost = old.features.iter().any(|f| !new.features.contains(f));
    let gained = new.features.iter().any(|f| !old.features.contains(f));
    let direction = match new.level.cmp(&old.level) {
        std::cmp::Ordering::Less => Direction::Drop,
        std::cmp::Ordering::Greater => Direction::Rise,
        std::cmp::Ordering::Equal if lost && !gained => Direction::Drop,
        std::cmp::Ordering::Equal if gained && !lost => Direction::Rise,
        std::cmp::Ordering::Equal => Direction::Change,
    };
    let old_hosts: BTreeMap<&str, Option<Level>> =
        old.hosts.iter().map(|(h, l)| (h.as_str(), *l)).collect();
    let new_hosts: BTreeMap<&str, Option<Level>> =
        new.hosts.iter().map(|(h, l)| (h.as_str(), *l)).collect();
    let mut responsible = Vec::new();
    // Below the old level: the hosts lacking it, with the features they lack.
    if direction == Direction::Drop {
        if let Some(old_level) = old.level.filter(|l| Some(*l) > new.level) {
            if let Some((_, hosts)) = cpu.blocked.iter().find(|(l, _)| *l == old_level) {
                responsible.extend(hosts.iter().cloned());
            }
        }
    }
    if responsible.is_empty() {
        for (h, l) in &new_hosts {
            match old_hosts.get(h) {
                None => responsible.push(format!("{h} (joined)")),
                Some(was) if was != l => {
                    responsible.push(format!("{h} ({} -> {})", level_text(*was), level_text(*l)));
                }
                Some(_) => {}
            }
        }
        for h in old_hosts.keys().filter(|h| !new_hosts.contains_key(*h)) {
            responsible.push(format!("{h} (left)"));
        }
    }
    CpuChange {
        direction,
        old: old.clone(),
        new: new.clone(),
        responsible,
    }
}

impl CpuChange {
    /// The log line: `the cluster CPU dropped: OLD -> NEW; lost: ...; gained: ...; hosts
    /// responsible: ...`.
    #[must_use]
    pub fn message(&self) -> String {
        let verb = match self.direction {
            Direction::Drop => "dropped",
            Direction::Rise => "rose",
            Direction::Change => "changed",
        };
        let diff = |a: &Seen, b: &Seen| -> String {
            let v: Vec<&str> = a
                .features
                .iter()
                .filter(|f| !b.features.contains(f))
                .map(String::as_str)
                .collect();
            if v.is_empty() {
                "none".into()
            } else {
                v.join(", ")
            }
        };
        let who = if self.responsible.is_empty() {
            "none named (the same hosts at the same levels: a host's facts changed)".to_string()
        } else {
            self.responsible.join("; ")
        };
        format!(
            "the cluster CPU {verb}: {} -> {}; features lost: {}; gained: {}; hosts responsible: {who}",
            self.old.describe(),
            self.new.describe(),
            diff(&self.old, &self.new),
            diff(&self.new, &self.old),
        )
    }

    /// Log it once: WARN for a drop, INFO otherwise, with `MESSAGE_ID`
    /// [`CLUSTER_CPU_CHANGED_ID`] and the fields `DIRECTION`, `OLD_MODEL`, `NEW_MODEL`,
    /// `OLD_FINGERPRINT`, `NEW_FINGERPRINT`, `OLD_LEVEL`, `NEW_LEVEL`, `HOSTS_RESPONSIBLE`.
    pub fn log(&self) {
        let message = self.message();
        let responsible = self.responsible.join("; ");
        macro_rules! event {
            ($lvl:ident) => {
                tracing::$lvl!(
                    message_id = CLUSTER_CPU_CHANGED_ID,
                    direction = self.direction.as_str(),
                    old_model = self.old.model.as_str(),
                    new_model = self.new.model.as_str(),
                    old_fingerprint = self.old.fingerprint.as_str(),
                    new_fingerprint = self.new.fingerprint.as_str(),
                    old_level = level_text(self.old.level),
                    new_level = level_text(self.new.level),
                    hosts_responsible = responsible.as_str(),
                    "{message}"
                )
            };
        }
        if self.direction == Direction::Drop {
            event!(warn);
        } else {
            event!(info);
        }
    }
}

/// Errors of [`note`]: the state file could not be locked, read or written.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {source}")]
pub struct WatchError {
    /// The file.
    pub path: PathBuf,
    /// The operating system's error.
    #[source]
    pub source: std::io::Error,
}

/// The largest state file read, in bytes: a few short lines (a fingerprint, a CPU, host names).
const STATE_LIMIT: usize = 1 << 20;

/// Compares `cpu` with the cluster CPU remembered in `state_dir`: the first time (no state), it
/// is remembered and nothing is said; when it differs (another fingerprint), the change is
/// counted and remembered and returned for the caller to [`CpuChange::log`]; when it is the same,
/// nothing is written. Returns what is remembered now (for the metrics) and the change, if any.
///
/// # Errors
/// [`WatchError`] when the state directory, the lock or the state file cannot be used.
pub fn note(state_dir: &Path, cpu: &ClusterCpu) -> Result<(Seen, Option<CpuChange>), WatchError> {
    // Bounded, and a regular file only: the hook calls this at every guest start, and libvirt
    // puts no timeout on a hook (a FIFO in place of the file would block a plain read).
    let file = state_dir.join(STATE_FILE);
    let write = crate::writefile::write_atomic;
    crate::lockfile::update(
        &file,
        crate::lockfile::HOOK_WAIT,
        STATE_LIMIT,
        write,
        |old| {
            let old = match old {
                Ok(bytes) => bytes.and_then(|b| Seen::parse(&String::from_utf8_lossy(&b))),
                Err(e) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        e.to_string(),
                    ));
                }
            };
            Ok(changed(old.as_ref(), cpu))
        },
    )
    .map_err(|e| WatchError {
        path: e.path,
        source: e.source,
    })
}

/// What [`note`] remembers after `old` (None: nothing yet) and sees `cpu`: the new memory, the
/// change, and the state file's new text (None when nothing is to be written: the same CPU from
/// the same hosts).
fn changed(old: Option<&Seen>, cpu: &ClusterCpu) -> ((Seen, Option<CpuChange>), Option<Vec<u8>>) {
    let mut new = Seen::of(cpu);
    let change = match old {
        Some(old) if old.fingerprint == new.fingerprint && old.hosts == new.hosts => {
            return ((old.clone(), None), None);
        }
        Some(old) if old.fingerprint == new.fingerprint => {
            // The same CPU from other hosts: remembered, not a change of the CPU.
            new.changes = old.changes.clone();
            None
        }
        Some(old) => {
            new.changes = old.changes.clone();
            let c = compare(old, &new, cpu);
            *new.changes.entry(c.direction).or_default() += 1;
            Some(CpuChange {
                new: new.clone(),
                ..c
            })
        }
        None => None,
    };
    let text = new.render().into_bytes();
    ((new, change), Some(text))
}

/// [`note`], and the change logged ([`CpuChange::log`]): what the hook and the daemon call. A state
/// directory that cannot be used is logged at WARN (the guest's answer stands) and gives None.
pub fn tell(state_dir: &Path, cpu: &ClusterCpu) -> Option<Seen> {
    match note(state_dir, cpu) {
        Ok((seen, change)) => {
            if let Some(c) = change {
                c.log();
            }
            Some(seen)
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot remember the cluster CPU");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu(model: &str, level: Level, features: &[&str], hosts: &[(&str, Level)]) -> ClusterCpu {
        ClusterCpu {
            model: model.into(),
            features: features.iter().map(|f| (*f).to_string()).collect(),
            level: Some(level),
            hosts: hosts.iter().map(|(h, _)| (*h).to_string()).collect(),
            host_levels: hosts.iter().map(|(_, l)| Some(*l)).collect(),
            arch: "x86_64".into(),
            ..ClusterCpu::default()
        }
    }

    #[test]
    fn the_state_text_reads_back() {
        let mut s = Seen::of(&cpu(
            "Haswell",
            Level::V3,
            &["avx2", "avx"],
            &[("a", Level::V3), ("b", Level::V4)],
        ));
        s.changes.insert(Direction::Drop, 2);
        let back = Seen::parse(&s.render()).expect("parses");
        assert_eq!(back.features, vec!["avx", "avx2"]);
        assert_eq!(back.changes.get(&Direction::Drop), Some(&2));
        assert_eq!(back.changes.get(&Direction::Rise), Some(&0));
        assert_eq!(back.hosts, s.hosts);
        assert_eq!(back.level, Some(Level::V3));
        assert_eq!(Seen::parse("# nothing\n"), None);
    }

    /// A FIFO in place of the state file or its lock is an error at once, never a hang (the
    /// hook calls `note` at every guest start; libvirt puts no timeout on a hook).
    #[test]
    fn a_fifo_in_place_of_the_state_or_lock_is_an_error_at_once() {
        for name in [STATE_FILE.to_string(), format!("{STATE_FILE}.lock")] {
            let dir = std::env::temp_dir().join(format!(
                "vcp-watch-fifo-{}-{}",
                std::process::id(),
                name.len()
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            let status = std::process::Command::new("mkfifo")
                .arg(dir.join(&name))
                .status()
                .unwrap();
            assert!(status.success());
            let start = std::time::Instant::now();
            let e = note(
                &dir,
                &cpu("Haswell", Level::V3, &["avx"], &[("a", Level::V3)]),
            )
            .unwrap_err();
            assert!(
                start.elapsed() < std::time::Duration::from_secs(5),
                "{name}: {e}"
            );
            std::fs::remove_dir_all(&dir).ok();
        }
    }

    #[test]
    fn a_joining_host_that_lowers_the_level_is_named_once() {
        let dir = std::env::temp_dir().join(format!("vcp-watch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let before = cpu(
            "Haswell",
            Level::V3,
            &["avx", "avx2", "sse2"],
            &[("a", Level::V3)],
        );
        let (_, c) = note(&dir, &before).unwrap();
        assert_eq!(c, None, "the first sighting is remembered, not a change");
        let mut after = cpu(
            "Nehalem",
            Level::V2,
            &["sse2"],
            &[("a", Level::V3), ("old", Level::V2)],
        );
        after.blocked = vec![(Level::V3, vec!["old (missing avx, avx2)".into()])];
        let (seen, c) = note(&dir, &after).unwrap();
        let c = c.expect("a change");
        assert_eq!(c.direction, Direction::Drop);
        assert_eq!(c.responsible, vec!["old (missing avx, avx2)".to_string()]);
        assert!(
            c.message()
                .contains("features lost: avx, avx2; gained: none")
        );
        assert_eq!(seen.changes.get(&Direction::Drop), Some(&1));
        let (seen, c) = note(&dir, &after).unwrap();
        assert_eq!(c, None, "said once");
        assert_eq!(seen.changes.get(&Direction::Drop), Some(&1));
        let (seen, c) = note(&dir, &before).unwrap();
        let c = c.expect("the host left");
        assert_eq!(c.direction, Direction::Rise);
        assert_eq!(c.responsible, vec!["old (left)".to_string()]);
        assert_eq!(seen.changes.get(&Direction::Rise), Some(&1));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn level_numbers() {
        assert_eq!(level_number(None), 0);
        assert_eq!(level_number(Some(Level::V1)), 1);
        assert_eq!(level_number(Some(Level::V4)), 4);
    }
}
