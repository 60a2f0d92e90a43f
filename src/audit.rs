//! `audit`: every stored definition of a host judged with one policy and one set of host facts.
//!
//! An operator's first fleet question is which guests are below the policy, where and why. The
//! stored definitions (`/etc/libvirt/qemu/*.xml`) answer it without libvirt: they are read as
//! files, so an audit works while libvirtd is down and obeys the hook's rule never to call it.
//! Host facts are discovered once ([`Host::discover`]) and shared by every file, which is what
//! makes 1,000 definitions take well under a second; each file's verdict is exactly what
//! `check` gives it ([`Verdict::of`]).
//!
//! Besides the verdict a guest gets the columns an operator reads first: the psABI level its CPU
//! reaches on this host ([`level_of`]), its vCPU maximum beside the machine type's limit, and the
//! rules involved ([`rules_involved`]). A file that cannot be read or judged is an [`Entry`] of
//! its own, never a reason to stop.

use crate::cpu::{Level, default_model};
use crate::domain::{Domain, cpu_features, cpu_mode};
use crate::domain_facts::DomainFacts;
use crate::finding::Severity;
use crate::host::{Host, MachineLimit};
use crate::libvirt::cpu_def::CpuMode;
use crate::libvirt::cpu_def::guaranteed_features;
use crate::pipeline::Pipeline;
use crate::policy::{Plan, Policy};
use crate::rewrite::{Outcome, rewrite_pipeline};
use crate::topology::read_vcpu;
use crate::verdict::Verdict;
use crate::xml::child;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Where libvirt keeps the stored definitions of the system instance's QEMU/KVM guests.
pub const DEFAULT_DIR: &str = "/etc/libvirt/qemu";

/// Where libvirt keeps the status files of the system instance's running guests
/// (`<domstatus>`, [`crate::domain::STATUS_ROOT`]): a transient guest's only document.
pub const RUNNING_DIR: &str = "/run/libvirt/qemu";

/// The psABI level a guest's CPU reaches on this host, and what that was decided from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LevelReading {
    /// The level; None when it cannot be known (see `basis`) or is below x86-64-v1.
    pub level: Option<Level>,
    /// What the level was decided from: `model` (cpu_map's features of the model plus the listed
    /// ones), `model and domcapabilities` (those, limited to what this host's KVM gives),
    /// `model and QEMU's KVM host CPU` (the same, what KVM gives read as found from libvirt's
    /// QEMU capability cache),
    /// `domcapabilities` (the host-model CPU of this host), or why it is unknown: `not x86_64`,
    /// `unknown model`, `no domcapabilities` (a host-dependent mode and no `--caps` file saying
    /// what the host gives), `TCG` (QEMU's emulated CPU for a host-dependent mode).
    pub basis: &'static str,
}

/// One judged definition.
#[derive(Debug, Clone)]
pub struct Guest {
    /// The file it was read from.
    pub file: PathBuf,
    /// The rewrite's outcome: verdict, changes and findings, as `check` reports them.
    pub outcome: Outcome,
    /// The level its CPU reaches on this host, as stored (before any rewrite).
    pub level: LevelReading,
    /// `<vcpu>`'s maximum; None when absent or unreadable.
    pub vcpu_max: Option<u32>,
    /// The machine type's vCPU limit and its source; None out of scope or when no source knows.
    pub machine_limit: Option<MachineLimit>,
    /// The rules involved ([`rules_involved`]).
    pub rules: Vec<String>,
    /// Whether the file is a running guest's status file (`<domstatus>`): the guest judged is
    /// its live XML, the CPU it runs with, not the definition it restarts from.
    pub running: bool,
}

impl Guest {
    /// The verdict (`conforms`, `needs-rewrite`, `cannot-conform`, `out-of-scope`,
    /// `not-compared`).
    #[must_use]
    pub fn verdict(&self) -> Verdict {
        Verdict::of(&self.outcome)
    }
}

/// One audited file.
#[derive(Debug, Clone)]
pub enum Entry {
    /// A definition judged.
    Guest(Box<Guest>),
    /// A file that could not be read or judged: the file and the one-line reason.
    Unreadable(PathBuf, String),
}

/// Figures over every entry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Files audited (guests plus unreadable).
    pub files: usize,
    /// Guests that conform as they are.
    pub conforms: usize,
    /// Guests that conform only after a rewrite.
    pub needs_rewrite: usize,
    /// Guests that cannot conform.
    pub cannot_conform: usize,
    /// Guests of a type the tool does not handle.
    pub out_of_scope: usize,
    /// Guests a start check could not be made for ([`Verdict::NotCompared`]).
    pub not_compared: usize,
    /// Files that could not be read or judged.
    pub unreadable: usize,
}

impl Totals {
    /// The totals of `entries`.
    #[must_use]
    pub fn of(entries: &[Entry]) -> Totals {
        let mut t = Totals {
            files: entries.len(),
            ..Totals::default()
        };
        for e in entries {
            match e {
                Entry::Unreadable(..) => t.unreadable += 1,
                Entry::Guest(g) => match g.verdict() {
                    Verdict::Conforms => t.conforms += 1,
                    Verdict::NeedsRewrite => t.needs_rewrite += 1,
                    Verdict::CannotConform => t.cannot_conform += 1,
                    Verdict::OutOfScope => t.out_of_scope += 1,
                    Verdict::NotCompared => t.not_compared += 1,
                },
            }
        }
        t
    }
}

/// Why the list of files could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    /// A directory named on the command line could not be listed.
    #[error("cannot list {path}: {source}")]
    Dir {
        /// The directory.
        path: PathBuf,
        /// The operating system's reason.
        source: std::io::Error,
    },
}

/// The files to audit: each directory of `paths` contributes every entry whose name ends in
/// `.xml` (not recursing: libvirt keeps `autostart/` links and `networks/` below it), sorted;
/// each other path is taken as named. Entries that are not regular files (a directory called
/// `x.xml`, a dangling link, a FIFO) are kept, so [`judge_file`] reports them. A file named
/// twice (a directory and a file in it, `f.xml` and `./f.xml`) is audited once, where first
/// named: the totals and gauges count stored definitions.
///
/// # Errors
/// [`ListError::Dir`] when a directory cannot be listed.
pub fn files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, ListError> {
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for p in paths {
        let found = if p.is_dir() {
            crate::readfile::xml_entries(p).map_err(|source| ListError::Dir {
                path: p.clone(),
                source,
            })?
        } else {
            vec![p.clone()]
        };
        for f in found {
            // The path itself when it cannot be resolved (missing: reported as unreadable).
            let key = std::fs::canonicalize(&f).unwrap_or_else(|_| f.clone());
            if seen.insert(key) {
                out.push(f);
            }
        }
    }
    Ok(out)
}

/// Read `path` through the one bounded reader ([`crate::readfile::read_regular`]): a regular
/// file only, checked on the open descriptor (a FIFO would block the audit), at most
/// [`crate::xml::MAX_INPUT_BYTES`], the limit `check` puts on its INPUT.
fn read_file(path: &Path) -> Result<Vec<u8>, String> {
    crate::readfile::read_regular(path, crate::xml::MAX_INPUT_BYTES).map_err(|e| e.to_string())
}

/// Judge one file under `policy` with `host` facts: a stored definition (`<domain>`) or a
/// running guest's status file (`<domstatus>`, its live `<domain>` judged); never an error, a
/// file that cannot be read, decoded or parsed becomes [`Entry::Unreadable`].
#[must_use]
pub fn judge_file(path: &Path, policy: &Policy, host: &Host) -> Entry {
    let unreadable = |why: String| Entry::Unreadable(path.to_path_buf(), why);
    let bytes = match read_file(path) {
        Ok(b) => b,
        Err(why) => return unreadable(why),
    };
    let what = path.display().to_string();
    let judged = crate::xml::decode(&bytes, &what).and_then(|text| {
        let (domain, running) = crate::domain::guest_document(text, &what)?;
        Ok((judge(domain, &what, policy, host)?, running))
    });
    match judged {
        Ok(((outcome, level, vcpu_max, machine_limit, rules), running)) => {
            Entry::Guest(Box::new(Guest {
                file: path.to_path_buf(),
                outcome,
                level,
                vcpu_max,
                machine_limit,
                rules,
                running,
            }))
        }
        Err(e) => unreadable(e.to_string()),
    }
}

/// What [`judge`] finds about one document.
type Judged = (
    Outcome,
    LevelReading,
    Option<u32>,
    Option<MachineLimit>,
    Vec<String>,
);

/// Parse once, plan and gather facts once ([`Pipeline`]), rewrite (as [`crate::rewrite::rewrite`]
/// does) and read the audit's columns from the same parse and facts.
fn judge(text: &str, what: &str, policy: &Policy, host: &Host) -> crate::Result<Judged> {
    let dom = Domain::parse(text, what)?;
    let vcpu_max = child(dom.root(), "vcpu")
        .and_then(|v| read_vcpu(v).ok())
        .map(|c| c.max);
    if !dom.in_scope() {
        let outcome = Outcome::out_of_scope(&dom);
        let level = LevelReading {
            level: None,
            basis: "out of scope",
        };
        return Ok((outcome, level, vcpu_max, None, Vec::new()));
    }
    let p = Pipeline::new(&dom, policy, host)?;
    let (dom, facts) = (&p.dom, &p.facts);
    let outcome = rewrite_pipeline(&p, what, policy)?;
    let level = level_of(dom, facts);
    // A machine type the emulator lacks has no limit: a built-in family rule would invent one.
    let limit = facts
        .machine_unsupported
        .is_none()
        .then(|| {
            facts.machine_limit.clone().or_else(|| {
                host.machine_limit(
                    dom.arch(),
                    dom.virt_type(),
                    dom.machine(),
                    dom.emulator().as_deref(),
                )
            })
        })
        .flatten();
    let rules = rules_involved(&outcome, &p.plan);
    Ok((outcome, level, vcpu_max, limit, rules))
}

/// The rules involved in a verdict: for a guest that cannot conform, the rule of each error
/// finding (`libvirt: CODE` for libvirt's own rules); for one that needs a rewrite, the rule of
/// each change; for a conforming guest, the rules that matched it. In first-seen order, once each.
#[must_use]
pub fn rules_involved(o: &Outcome, plan: &Plan) -> Vec<String> {
    let names: Vec<String> = match Verdict::of(o) {
        Verdict::CannotConform => o
            .findings
            .iter()
            .filter(|f| f.severity == Severity::Error)
            .map(|f| {
                f.rule
                    .clone()
                    .unwrap_or_else(|| crate::change::libvirt_rule(f.code.as_str()))
            })
            .collect(),
        Verdict::NeedsRewrite => o.changes.iter().map(|c| c.rule.clone()).collect(),
        Verdict::Conforms => plan.matched.clone(),
        Verdict::OutOfScope | Verdict::NotCompared => Vec::new(),
    };
    let mut seen = BTreeSet::new();
    names
        .into_iter()
        .filter(|n| seen.insert(n.clone()))
        .collect()
}

/// The psABI level the domain's CPU, as stored, reaches on this host. libvirt reads the first
/// `<cpu>` only. A custom CPU (or none: QEMU's default model) has its model's features plus the
/// listed ones; under KVM, when domcapabilities say what this host's host-model CPU is, only the
/// features KVM gives count (QEMU drops the rest silently). A host-model, host-passthrough or
/// maximum CPU under KVM gets the host-model CPU's features, minus the ones the domain disables.
#[must_use]
pub fn level_of(dom: &Domain<'_>, facts: &DomainFacts<'_>) -> LevelReading {
    let reading = |level, basis| LevelReading { level, basis };
    if dom.arch() != "x86_64" {
        return reading(None, "not x86_64");
    }
    let cpu = dom.cpus().first().copied();
    let custom = cpu.map_or(Some(CpuMode::Custom), cpu_mode) == Some(CpuMode::Custom);
    let explicit = cpu.map(cpu_features).unwrap_or_default();
    let kvm = dom.virt_type() == "kvm";
    let host = facts
        .domcaps
        .filter(|_| kvm)
        .and_then(|d| d.host_model.as_ref())
        .map(|hm| {
            let model = hm.model.as_deref().and_then(|m| facts.model_features(m));
            hm.guaranteed_features(model)
        });
    let highest = |feats: &BTreeSet<String>| Level::highest(|f| feats.contains(f));
    if custom {
        let model = cpu
            .and_then(|c| child(c, "model"))
            .and_then(crate::domain::model_name)
            .or_else(|| default_model(dom.arch()).map(str::to_string))
            .unwrap_or_default();
        let Some(model_features) = facts.model_features(&model) else {
            return reading(None, "unknown model");
        };
        let feats = guaranteed_features(Some(model_features), &explicit);
        // As found (no domcapabilities), what KVM gives is QEMU's KVM host CPU of libvirt's
        // capability cache, as `cpu-level` judges it: the column and the verdict agree.
        let cached = || {
            facts
                .host_model_features(&[], true)
                .filter(|_| kvm)
                .map(|(f, _)| f)
        };
        return match (&host, host.is_none().then(cached).flatten()) {
            (Some(h), _) => {
                let given: BTreeSet<String> = feats.intersection(h).cloned().collect();
                reading(highest(&given), "model and domcapabilities")
            }
            (None, Some(h)) => {
                let given: BTreeSet<String> = feats.intersection(&h).cloned().collect();
                reading(highest(&given), "model and QEMU's KVM host CPU")
            }
            (None, None) => reading(highest(&feats), "model"),
        };
    }
    if !kvm {
        return reading(None, "TCG");
    }
    match host {
        Some(h) => reading(
            highest(&guaranteed_features(Some(&h), &explicit)),
            "domcapabilities",
        ),
        None => reading(None, "no domcapabilities"),
    }
}

/// Judge every file in order, calling `progress(done, total)` after each.
pub fn run(
    files: &[PathBuf],
    policy: &Policy,
    host: &Host,
    mut progress: impl FnMut(usize, usize),
) -> Vec<Entry> {
    let mut out = Vec::with_capacity(files.len());
    for (i, f) in files.iter().enumerate() {
        out.push(judge_file(f, policy, host));
        progress(i + 1, files.len());
    }
    out
}

/// The gauges of an audit (for `audit --format prometheus`): guests by verdict, unreadable files,
/// rules involved, the host's level and libvirt version, the cluster CPU when the policy used one;
/// `started`: when the audit began, in
/// seconds since the Unix epoch.
#[must_use]
pub fn gauges(entries: &[Entry], host: &Host, started: f64) -> crate::metrics::Gauges {
    let mut g = crate::metrics::Gauges {
        host_level: crate::metrics::host_level(host),
        libvirt_version: host.libvirt_version().map(|v| v.value.to_string()),
        timestamp_seconds: started,
        // The cluster CPU when the policy used one (no changes: those the daemon counts).
        cluster: host
            .cluster_cpu_computed()
            .map(crate::cluster::watch::Seen::of),
        ..crate::metrics::Gauges::default()
    };
    for e in entries {
        match e {
            Entry::Guest(guest) => g.count(guest.verdict(), &guest.rules),
            Entry::Unreadable(..) => g.unreadable += 1,
        }
    }
    g.duration_seconds = (crate::metrics::now_seconds() - started).max(0.0);
    g
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::HostOptions;

    fn host_with(domcaps: Option<&str>) -> (Host, Option<PathBuf>) {
        let dir = std::env::temp_dir().join(format!(
            "vcp-audit-unit-{}-{}",
            std::process::id(),
            domcaps.map_or(0, str::len)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let caps: Vec<PathBuf> = domcaps
            .map(|d| {
                let p = dir.join("dc.xml");
                std::fs::write(&p, d).unwrap();
                p
            })
            .into_iter()
            .collect();
        let h = Host::discover(&HostOptions {
            caps,
            qemu_cache: Some(PathBuf::new()),
            ..HostOptions::default()
        })
        .unwrap();
        (h, Some(dir))
    }

    fn level(xml: &str, host: &Host) -> LevelReading {
        let p = Policy::builtin();
        let dom = Domain::parse(xml, "t").unwrap();
        let plan = p.plan_for(&dom);
        let facts = DomainFacts::gather(&dom, &plan, host);
        level_of(&dom, &facts)
    }

    /// A nested KVM such as the project's test machine's gives a host-model CPU without pni and
    /// popcnt (seen with libvirt 9.0's domcapabilities).
    const DOMCAPS: &str = "<domainCapabilities><path>/usr/bin/qemu-system-x86_64</path><domain>kvm</domain><machine>pc-q35-7.2</machine><arch>x86_64</arch><vcpu max='288'/><cpu><mode name='host-model' supported='yes'><model fallback='forbid'>Nehalem</model><feature policy='disable' name='pni'/><feature policy='disable' name='popcnt'/></mode></cpu></domainCapabilities>";

    fn dom(vt: &str, cpu: &str) -> String {
        format!(
            "<domain type='{vt}'><name>g</name><vcpu>2</vcpu><os><type arch='x86_64' machine='pc'>hvm</type></os>{cpu}</domain>"
        )
    }

    #[test]
    fn level_from_model_and_host() {
        let (bare, d1) = host_with(None);
        let (dc, d2) = host_with(Some(DOMCAPS));
        let nehalem = dom("kvm", "<cpu mode='custom'><model>Nehalem</model></cpu>");
        assert_eq!(
            level(&nehalem, &bare),
            LevelReading {
                level: Some(Level::V2),
                basis: "model"
            }
        );
        // This host's KVM drops pni and popcnt: Nehalem gets v1 here.
        assert_eq!(
            level(&nehalem, &dc),
            LevelReading {
                level: Some(Level::V1),
                basis: "model and domcapabilities"
            }
        );
        // Under TCG the host does not limit a custom model.
        assert_eq!(
            level(&dom("qemu", "<cpu><model>Nehalem</model></cpu>"), &dc).level,
            Some(Level::V2)
        );
        // No <cpu>: qemu64, v1.
        assert_eq!(level(&dom("kvm", ""), &bare).level, Some(Level::V1));
        let hm = dom("kvm", "<cpu mode='host-model'/>");
        assert_eq!(level(&hm, &bare).basis, "no domcapabilities");
        assert_eq!(
            level(&hm, &dc),
            LevelReading {
                level: Some(Level::V1),
                basis: "domcapabilities"
            }
        );
        assert_eq!(
            level(&dom("qemu", "<cpu mode='maximum'/>"), &dc).basis,
            "TCG"
        );
        assert_eq!(
            level(&dom("kvm", "<cpu><model>NoSuchModel</model></cpu>"), &bare).basis,
            "unknown model"
        );
        for d in [d1, d2].into_iter().flatten() {
            std::fs::remove_dir_all(d).ok();
        }
    }
}
