//! Prometheus metrics of one host's guests, in the text exposition format (version 0.0.4) that
//! node_exporter's textfile collector reads.
//!
//! Fleets already run Prometheus with a node_exporter on every hypervisor; the tool feeds that
//! rather than growing a fleet service of its own. Two writers share these names:
//! `virt-cpu-policyd --metrics-file PATH` (the gauges and its counters, after every reconcile)
//! and `virt-cpu-policy audit --format prometheus` (the gauges once, for hosts without the
//! daemon). docs/metrics.md lists every metric.
//!
//! The text is produced by the `prometheus-client` crate's 0.0.4 encoder (counters get their
//! `_total`, units their suffix, info metrics their `_info`), from plain values: this module keeps
//! no global registry, so a render is a pure function of [`Gauges`] and [`Counters`]: each
//! metric's series are sorted, so the same figures always give the same text.

use crate::cpu::{Level, normalize_feature};
use crate::host::Host;
use crate::verdict::Verdict;
use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};
use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;

/// Why the daemon could not make a guest conform (the `reason` label of
/// `virt_cpu_policy_failures_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FailureReason {
    /// `cannot-conform`: the definition cannot conform to the policy.
    CannotConform,
    /// `unreadable`: libvirt could not give the definition, or it does not parse.
    Unreadable,
    /// `backup`: its backup could not be written (nothing defined).
    Backup,
    /// `define`: libvirt refused the rewritten definition.
    Define,
}

impl FailureReason {
    /// Every reason, in the order the metric lists them.
    pub const ALL: [FailureReason; 4] = [
        FailureReason::CannotConform,
        FailureReason::Unreadable,
        FailureReason::Backup,
        FailureReason::Define,
    ];

    /// The `reason` label.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            // The verdict's word: the reason is that verdict.
            FailureReason::CannotConform => Verdict::CannotConform.as_str(),
            FailureReason::Unreadable => "unreadable",
            FailureReason::Backup => "backup",
            FailureReason::Define => "define",
        }
    }
}

/// The label set of one series: (name, value) pairs.
type Labels = Vec<(String, String)>;

/// The psABI level guests get on this host, and where that came from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HostLevel {
    /// The level; None when unknown or below x86-64-v1.
    pub level: Option<Level>,
    /// [`SOURCE_DOMCAPS`], [`SOURCE_QEMU_CACHE`], [`SOURCE_CPUINFO`] or `unknown`.
    pub source: &'static str,
}

/// [`HostLevel::source`]: the host-model CPU of a KVM x86_64 domcapabilities (what KVM and QEMU
/// give a host-model guest).
pub const SOURCE_DOMCAPS: &str = "domcapabilities";

/// [`HostLevel::source`]: QEMU's own view of the host-model CPU under KVM, `<hostCPU
/// type='kvm'>` in libvirt's QEMU capability cache (what KVM gives guests).
pub const SOURCE_QEMU_CACHE: &str = "qemu capability cache";

/// [`HostLevel::source`]: the flags of the physical CPU; under nested virtualisation KVM may give
/// guests less, and the label says so.
pub const SOURCE_CPUINFO: &str = "/proc/cpuinfo (physical CPU, not what KVM gives guests)";

/// The state of the stored definitions at one point in time: what the gauges say.
#[derive(Debug, Clone, Default)]
pub struct Gauges {
    /// Guests by verdict (a missing key is 0).
    pub guests: BTreeMap<Verdict, u64>,
    /// Definitions that could not be read or judged (unreadable file, malformed XML).
    pub unreadable: u64,
    /// (rule, verdict) → guests with that verdict in which the rule is involved; only
    /// `needs-rewrite` and `cannot-conform` are counted.
    pub rule_guests: BTreeMap<(String, Verdict), u64>,
    /// The host's level ([`host_level`]).
    pub host_level: HostLevel,
    /// The host's libvirt version (`MAJOR.MINOR.MICRO`), when known.
    pub libvirt_version: Option<String>,
    /// The cluster CPU (`[host] cluster`) and its changes seen on this host, when the policy
    /// uses one ([`crate::cluster::watch`]).
    pub cluster: Option<crate::cluster::watch::Seen>,
    /// When the figures were taken: seconds since the Unix epoch.
    pub timestamp_seconds: f64,
    /// How long taking them took, in seconds.
    pub duration_seconds: f64,
}

impl Gauges {
    /// Count one guest with `verdict` and the rules involved in it.
    pub fn count(&mut self, verdict: Verdict, rules: &[String]) {
        *self.guests.entry(verdict).or_default() += 1;
        if matches!(verdict, Verdict::NeedsRewrite | Verdict::CannotConform) {
            // Once per label value: two OSes' floors are one rule here.
            let labels: std::collections::BTreeSet<&str> = rules
                .iter()
                .map(|r| crate::validate::bounded_rule(r))
                .collect();
            for r in labels {
                *self
                    .rule_guests
                    .entry((r.to_string(), verdict))
                    .or_default() += 1;
            }
        }
    }
}

/// What the daemon did since it started (counters only ever grow).
#[derive(Debug, Clone, Default)]
pub struct Counters {
    /// Stored definitions rewritten and defined.
    pub rewrites: u64,
    /// Rule → rewrites in which it changed something.
    pub rule_rewrites: BTreeMap<String, u64>,
    /// Reason → guests that could not be made to conform, counted at each reconciliation that
    /// met them.
    pub failures: BTreeMap<FailureReason, u64>,
    /// Reconciliations run (full and per event).
    pub reconciles: u64,
    /// The qemu hook's decisions on this host by kind, as its state file counts them
    /// ([`crate::hook_decisions`]): read at each render, not counted by the daemon, so they count
    /// across the daemon's restarts.
    pub hook_decisions: crate::hook_decisions::Counts,
}

/// Seconds since the Unix epoch, now.
#[must_use]
pub fn now_seconds() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The level a host-model guest gets on this host, from the first source that knows: the KVM
/// x86_64 domcapabilities' host-model CPU when a host-fact file gives one; else QEMU's view of it
/// in libvirt's QEMU capability cache (`<hostCPU type='kvm'>` of the file for this host's
/// `qemu-system-x86_64`); else the physical CPU's flags (`/proc/cpuinfo`: under nested
/// virtualisation KVM may give guests much less, so the label says so); else unknown.
#[must_use]
pub fn host_level(host: &Host) -> HostLevel {
    let domcaps = host
        .domcaps
        .iter()
        .find(|d| d.arch == "x86_64" && d.virt_type == "kvm");
    if let Some((_, level)) = domcaps.and_then(|d| host.host_model_level(d)) {
        return HostLevel {
            level,
            source: SOURCE_DOMCAPS,
        };
    }
    if crate::libvirt::arch::host_arch() == "x86_64" {
        if let Some(level) = qemu_cache_level(host) {
            return HostLevel {
                level,
                source: SOURCE_QEMU_CACHE,
            };
        }
        if let Some(level) = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .as_deref()
            .and_then(cpuinfo_level)
        {
            return HostLevel {
                level,
                source: SOURCE_CPUINFO,
            };
        }
    }
    HostLevel {
        level: None,
        source: "unknown",
    }
}

/// The level of `<hostCPU type='kvm'>` in the file of libvirt's QEMU capability cache (the
/// host's, unless disabled or moved) whose emulator is `qemu-system-x86_64`; None when there is
/// no such file or element.
#[expect(
    clippy::option_option,
    reason = "no file, or a file whose host CPU is below x86-64-v1 (a level is Option<Level>)"
)]
fn qemu_cache_level(host: &Host) -> Option<Option<Level>> {
    let file = host.qemu_cache().for_emulator("/qemu-system-x86_64")?;
    kvm_host_cpu_level(&crate::libvirt::qemu_caps::read_file(&file.path)?)
}

/// The level QEMU's host-model CPU under KVM reaches, from a QEMU capability cache file
/// ([`crate::libvirt::qemu_caps::QemuCaps::kvm_host_cpu`]), QEMU spellings (`lahf-lm`,
/// `sse4.1`) normalised to libvirt's; None when the file has no `<hostCPU type='kvm'>`.
#[must_use]
pub fn kvm_host_cpu_level(
    qemu_caps: &crate::libvirt::qemu_caps::QemuCaps,
) -> Option<Option<Level>> {
    let features: std::collections::BTreeSet<String> = qemu_caps
        .kvm_host_cpu
        .as_ref()?
        .iter()
        .map(|f| normalize_feature(f).unwrap_or_else(|| f.clone()))
        .collect();
    Some(Level::highest(|f| features.contains(f)))
}

/// The level the first `flags` line of `/proc/cpuinfo` text reaches (Linux spellings normalised
/// to libvirt's); None when there is no such line.
#[must_use]
pub fn cpuinfo_level(cpuinfo: &str) -> Option<Option<Level>> {
    let line = cpuinfo.lines().find(|l| l.starts_with("flags"))?;
    let flags: std::collections::BTreeSet<String> = line
        .split_once(':')?
        .1
        .split_whitespace()
        .map(|f| normalize_feature(f).unwrap_or_else(|| f.to_string()))
        .collect();
    Some(Level::highest(|f| flags.contains(f)))
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect()
}

fn clamp(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The gauges both writers share.
fn register_gauges(reg: &mut Registry, g: &Gauges) {
    let guests = Family::<Labels, Gauge>::default();
    reg.register(
        "virt_cpu_policy_guests",
        "Stored guest definitions by verdict (conforms, needs-rewrite, cannot-conform, out-of-scope, not-compared)",
        guests.clone(),
    );
    for v in Verdict::ALL {
        let n = g.guests.get(&v).copied().unwrap_or(0);
        guests
            .get_or_create(&labels(&[("verdict", v.as_str())]))
            .set(clamp(n));
    }
    let unreadable = Gauge::<i64>::default();
    unreadable.set(clamp(g.unreadable));
    reg.register(
        "virt_cpu_policy_unreadable_definitions",
        "Stored definitions that could not be read or judged (unreadable file, malformed XML)",
        unreadable,
    );
    let rules = Family::<Labels, Gauge>::default();
    reg.register(
        "virt_cpu_policy_rule_guests",
        "Guests that need a rewrite or cannot conform, by the rule involved (a guest counts once per rule)",
        rules.clone(),
    );
    for ((rule, verdict), n) in &g.rule_guests {
        rules
            .get_or_create(&labels(&[("rule", rule), ("verdict", verdict.as_str())]))
            .set(clamp(*n));
    }
    let level = g.host_level.level.map_or("unknown", Level::as_str);
    reg.register(
        "virt_cpu_policy_host_level",
        "The x86-64 psABI level a host-model guest gets on this host, and where that came from",
        Info::new(labels(&[("level", level), ("source", g.host_level.source)])),
    );
    reg.register(
        "virt_cpu_policy_libvirt",
        "The host's libvirt version",
        Info::new(labels(&[(
            "version",
            g.libvirt_version.as_deref().unwrap_or("unknown"),
        )])),
    );
    reg.register(
        "virt_cpu_policy_build",
        "The version of virt-cpu-policy that wrote these metrics",
        Info::new(labels(&[("version", env!("CARGO_PKG_VERSION"))])),
    );
    if let Some(c) = &g.cluster {
        register_cluster(reg, c);
    }
    let stamp = Gauge::<f64, AtomicU64>::default();
    stamp.set(g.timestamp_seconds);
    reg.register_with_unit(
        "virt_cpu_policy_last_reconcile_timestamp",
        "When these figures were taken (the daemon's last reconciliation, or the audit run), seconds since the Unix epoch",
        Unit::Seconds,
        stamp,
    );
    let duration = Gauge::<f64, AtomicU64>::default();
    duration.set(g.duration_seconds);
    reg.register_with_unit(
        "virt_cpu_policy_reconcile_duration",
        "How long taking these figures took",
        Unit::Seconds,
        duration,
    );
}

/// The cluster CPU's series: its name and level.
fn register_cluster(reg: &mut Registry, c: &crate::cluster::watch::Seen) {
    use crate::cluster::watch::level_number;
    reg.register(
        "virt_cpu_policy_cluster_cpu",
        "The cluster CPU this host computes from [host] cluster: libvirt model, fingerprint (as virt-cpu-policy traits names it) and x86-64 psABI level",
        Info::new(labels(&[
            ("model", &c.model),
            ("fingerprint", &c.fingerprint),
            ("level", c.level.map_or("none", Level::as_str)),
        ])),
    );
    let level = Gauge::<i64>::default();
    level.set(level_number(c.level));
    reg.register(
        "virt_cpu_policy_cluster_level",
        "The x86-64 psABI level of the cluster CPU as a number: 0 (below x86-64-v1) to 4",
        level,
    );
}

/// The daemon's counter of the cluster CPU's changes: kept in the state file, so it counts
/// across restarts and the hook's sightings too.
fn register_cluster_changes(reg: &mut Registry, c: &crate::cluster::watch::Seen) {
    use crate::cluster::watch::Direction;
    let family = Family::<Labels, Counter>::default();
    reg.register(
        "virt_cpu_policy_cluster_cpu_changes",
        "Changes of the cluster CPU seen on this host (hook or daemon), by direction (drop, rise, change)",
        family.clone(),
    );
    for d in Direction::ALL {
        let n = c.changes.get(&d).copied().unwrap_or(0);
        family
            .get_or_create(&labels(&[("direction", d.as_str())]))
            .inc_by(n);
    }
}

/// The daemon's counters; `rules` are the policy's rule names, each given a series from the start
/// (at 0), as Prometheus advises for known label values.
fn register_counters(reg: &mut Registry, c: &Counters, rules: &[String]) {
    let rewrites = Counter::<u64>::default();
    rewrites.inc_by(c.rewrites);
    reg.register(
        "virt_cpu_policy_rewrites",
        "Stored definitions the daemon rewrote and defined since it started",
        rewrites,
    );
    let per_rule = Family::<Labels, Counter>::default();
    reg.register(
        "virt_cpu_policy_rule_rewrites",
        "Rewrites since the daemon started in which the rule changed something",
        per_rule.clone(),
    );
    for r in rules
        .iter()
        .chain(std::iter::once(&crate::change::BUILTIN_RULE.to_string()))
    {
        // Creating the series is the point: it is exported at 0.
        let _ = per_rule.get_or_create(&labels(&[("rule", r)]));
    }
    for (r, n) in &c.rule_rewrites {
        per_rule.get_or_create(&labels(&[("rule", r)])).inc_by(*n);
    }
    let failures = Family::<Labels, Counter>::default();
    reg.register(
        "virt_cpu_policy_failures",
        "Guests the daemon could not make conform since it started, by reason, counted at each reconciliation that met them",
        failures.clone(),
    );
    for reason in FailureReason::ALL {
        let n = c.failures.get(&reason).copied().unwrap_or(0);
        failures
            .get_or_create(&labels(&[("reason", reason.as_str())]))
            .inc_by(n);
    }
    let reconciles = Counter::<u64>::default();
    reconciles.inc_by(c.reconciles);
    reg.register(
        "virt_cpu_policy_reconciles",
        "Reconciliations the daemon ran since it started (full and per event)",
        reconciles,
    );
    let hook = Family::<Labels, Counter>::default();
    reg.register(
        "virt_cpu_policy_hook_decisions",
        "The qemu hook's decisions on this host by kind, as the journal names them (hook-allowed, hook-violation-allowed, hook-violation-refused, hook-libvirt-refused, hook-error-allowed, hook-error-refused)",
        hook.clone(),
    );
    for (kind, n) in c.hook_decisions.iter() {
        hook.get_or_create(&labels(&[("kind", kind.name())]))
            .inc_by(n);
    }
}

/// The Prometheus text (format 0.0.4) of `gauges`, and of the daemon's `counters` when given
/// (`rules`: the policy's rule names, for the per-rule counter's series).
#[must_use]
pub fn render(gauges: &Gauges, counters: Option<&Counters>, rules: &[String]) -> String {
    let mut reg = Registry::default();
    register_gauges(&mut reg, gauges);
    if let Some(c) = counters {
        register_counters(&mut reg, c, rules);
        if let Some(cluster) = &gauges.cluster {
            register_cluster_changes(&mut reg, cluster);
        }
    }
    let mut out = String::new();
    // Writing into a String cannot fail; the encoder's only error is the writer's.
    let _ = prometheus_text::encode(&mut out, &reg);
    sorted_series(&out)
}

/// The text with each metric's series in sorted order: a family keeps its series in a hash map,
/// so the encoder's order changes from run to run (and a diff of two runs would show noise).
/// Metrics stay in the order they were registered; `# HELP`/`# TYPE` lines stay in place.
pub(crate) fn sorted_series(text: &str) -> String {
    fn flush(series: &mut Vec<&str>, out: &mut String) {
        series.sort_unstable();
        for line in series.drain(..) {
            out.push_str(line);
            out.push('\n');
        }
    }
    let mut out = String::with_capacity(text.len());
    let mut series: Vec<&str> = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') {
            flush(&mut series, &mut out);
            out.push_str(line);
            out.push('\n');
        } else {
            series.push(line);
        }
    }
    flush(&mut series, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt::Write as _;

    fn sample() -> Gauges {
        let mut g = Gauges {
            host_level: HostLevel {
                level: Some(Level::V1),
                source: "domcapabilities",
            },
            libvirt_version: Some("9.0.0".into()),
            timestamp_seconds: 1_700_000_000.5,
            duration_seconds: 0.25,
            ..Gauges::default()
        };
        g.count(Verdict::Conforms, &["v2".into()]);
        g.count(
            Verdict::NeedsRewrite,
            &["v2".into(), "built-in: libvirt rules".into()],
        );
        g.count(Verdict::NeedsRewrite, &["v2".into()]);
        g.count(
            Verdict::CannotConform,
            &["libvirt: topology-mismatch".into()],
        );
        g.unreadable = 2;
        g
    }

    #[test]
    fn gauges_in_the_text_format() {
        let text = render(&sample(), None, &[]);
        for line in [
            "# TYPE virt_cpu_policy_guests gauge",
            "virt_cpu_policy_guests{verdict=\"conforms\"} 1",
            "virt_cpu_policy_guests{verdict=\"needs-rewrite\"} 2",
            "virt_cpu_policy_guests{verdict=\"cannot-conform\"} 1",
            "virt_cpu_policy_guests{verdict=\"out-of-scope\"} 0",
            "virt_cpu_policy_unreadable_definitions 2",
            "virt_cpu_policy_rule_guests{rule=\"v2\",verdict=\"needs-rewrite\"} 2",
            "virt_cpu_policy_rule_guests{rule=\"built-in: libvirt rules\",verdict=\"needs-rewrite\"} 1",
            "virt_cpu_policy_rule_guests{rule=\"libvirt: topology-mismatch\",verdict=\"cannot-conform\"} 1",
            "# TYPE virt_cpu_policy_host_level_info gauge",
            "virt_cpu_policy_host_level_info{level=\"x86-64-v1\",source=\"domcapabilities\"} 1",
            "virt_cpu_policy_libvirt_info{version=\"9.0.0\"} 1",
            "virt_cpu_policy_last_reconcile_timestamp_seconds 1700000000.5",
            "virt_cpu_policy_reconcile_duration_seconds 0.25",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "no line {line:?} in:\n{text}"
            );
        }
        // A conforming guest's rules are not counted per rule.
        assert!(!text.contains("verdict=\"conforms\"} 1\nvirt_cpu_policy_rule"));
        assert!(!text.contains("rule=\"v2\",verdict=\"conforms\""), "{text}");
        assert!(
            !text.contains("_total"),
            "no counters without the daemon:\n{text}"
        );
        assert!(
            !text.contains("# EOF"),
            "OpenMetrics, not the 0.0.4 format:\n{text}"
        );
    }

    #[test]
    fn counters_get_total_and_every_known_series() {
        let mut c = Counters {
            rewrites: 3,
            reconciles: 5,
            ..Counters::default()
        };
        c.rule_rewrites.insert("v2".into(), 3);
        c.failures.insert(FailureReason::Define, 1);
        c.hook_decisions =
            crate::hook_decisions::Counts::parse("hook-violation-refused 2\n").unwrap();
        let text = render(&sample(), Some(&c), &["v2".into(), "v3 \"quoted\"".into()]);
        for line in [
            "# TYPE virt_cpu_policy_rewrites_total counter",
            "virt_cpu_policy_rewrites_total 3",
            "virt_cpu_policy_rule_rewrites_total{rule=\"v2\"} 3",
            "virt_cpu_policy_rule_rewrites_total{rule=\"v3 \\\"quoted\\\"\"} 0",
            "virt_cpu_policy_rule_rewrites_total{rule=\"built-in: libvirt rules\"} 0",
            "virt_cpu_policy_failures_total{reason=\"define\"} 1",
            "virt_cpu_policy_failures_total{reason=\"cannot-conform\"} 0",
            "virt_cpu_policy_reconciles_total 5",
            "# TYPE virt_cpu_policy_hook_decisions_total counter",
            "virt_cpu_policy_hook_decisions_total{kind=\"hook-violation-refused\"} 2",
            "virt_cpu_policy_hook_decisions_total{kind=\"hook-error-allowed\"} 0",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "no line {line:?} in:\n{text}"
            );
        }
    }

    #[test]
    fn series_come_sorted_and_every_render_is_the_same() {
        let mut g = sample();
        for rule in ["b rule", "a rule", "z rule", "m rule", "c rule"] {
            g.count(Verdict::NeedsRewrite, &[rule.into()]);
            g.count(Verdict::CannotConform, &[rule.into()]);
        }
        let mut c = Counters::default();
        c.failures.insert(FailureReason::Backup, 2);
        let first = render(&g, Some(&c), &["y".into(), "x".into(), "w".into()]);
        for _ in 0..20 {
            assert_eq!(
                render(&g, Some(&c), &["y".into(), "x".into(), "w".into()]),
                first
            );
        }
        let rules: Vec<&str> = first
            .lines()
            .filter(|l| l.starts_with("virt_cpu_policy_rule_guests{"))
            .collect();
        let mut sorted = rules.clone();
        sorted.sort_unstable();
        assert_eq!(rules, sorted);
        assert_eq!(rules.len(), 13, "{first}");
        let verdicts: Vec<&str> = first
            .lines()
            .filter(|l| l.starts_with("virt_cpu_policy_guests{"))
            .collect();
        assert_eq!(
            verdicts,
            [
                "virt_cpu_policy_guests{verdict=\"cannot-conform\"} 6",
                "virt_cpu_policy_guests{verdict=\"conforms\"} 1",
                "virt_cpu_policy_guests{verdict=\"needs-rewrite\"} 7",
                "virt_cpu_policy_guests{verdict=\"not-compared\"} 0",
                "virt_cpu_policy_guests{verdict=\"out-of-scope\"} 0",
            ]
        );
    }

    #[test]
    fn the_rule_label_takes_a_closed_set_of_values() {
        let mut g = Gauges::default();
        // Two guests below their OS's floor (the OS is free text from the domain), one of them
        // also held back by a policy rule.
        g.count(
            Verdict::CannotConform,
            &["the floor of rhel10.0".into(), "v2".into()],
        );
        g.count(
            Verdict::CannotConform,
            &["the floor of Some OS (64-bit)".into()],
        );
        let rules: Vec<(&str, u64)> = g
            .rule_guests
            .iter()
            .map(|((r, _), n)| (r.as_str(), *n))
            .collect();
        assert_eq!(rules, [("the floor of the guest's OS", 2), ("v2", 1)]);
    }

    #[test]
    fn the_duration_is_the_last_line_of_the_gauges() {
        // The cron recipe of docs/metrics.md moves a file into place only when it ends so (a
        // complete write).
        let text = render(&sample(), None, &[]);
        let last = text.lines().last().unwrap();
        assert!(
            last.starts_with("virt_cpu_policy_reconcile_duration_seconds "),
            "{last}"
        );
    }

    #[test]
    fn qemu_caps_host_cpu_gives_a_level() {
        let props = |names: &[&str], value: &str| -> String {
            names.iter().fold(String::new(), |mut s, n| {
                let _ = write!(s, "<property name='{n}' type='boolean' value='{value}'/>");
                s
            })
        };
        // QEMU's spellings: lahf-lm, sse4.1, sse4-2.
        let v1 = [
            "cmov", "cx8", "fpu", "fxsr", "mmx", "syscall", "sse", "sse2", "lm",
        ];
        let v2 = [
            "cx16", "lahf-lm", "popcnt", "pni", "sse4.1", "sse4-2", "ssse3",
        ];
        let doc = |on: &[&str], off: &[&str]| {
            format!(
                "<qemuCaps><emulator>/usr/bin/qemu-system-x86_64</emulator><hostCPU type='tcg' model='base'>{}</hostCPU><hostCPU type='kvm' model='base' migratability='yes'>{}{}<property name='family' type='number' value='6'/></hostCPU></qemuCaps>",
                props(&v1, "true") + &props(&v2, "true"),
                props(on, "true"),
                props(off, "false")
            )
        };
        let all: Vec<&str> = v1.iter().chain(&v2).copied().collect();
        let level = |xml: &str| {
            let d = roxmltree::Document::parse(xml).ok()?;
            kvm_host_cpu_level(&crate::libvirt::qemu_caps::QemuCaps::read(
                d.root_element(),
                "t",
            ))
        };
        assert_eq!(level(&doc(&all, &[])), Some(Some(Level::V2)));
        // This nested host: KVM gives guests no pni, ssse3, sse4.x or popcnt.
        let nested = doc(
            &v1,
            &[
                "pni", "ssse3", "sse4.1", "sse4.2", "popcnt", "cx16", "lahf-lm",
            ],
        );
        assert_eq!(level(&nested), Some(Some(Level::V1)));
        assert_eq!(level("<qemuCaps/>"), None);
    }

    #[test]
    fn cpuinfo_flags_give_a_level() {
        let v2 = "processor : 0\nflags\t\t: fpu cx8 cmov mmx fxsr sse sse2 syscall lm pni ssse3 cx16 sse4_1 sse4_2 popcnt lahf_lm\n";
        assert_eq!(cpuinfo_level(v2), Some(Some(Level::V2)));
        let v1 = v2.replace(" popcnt", "");
        assert_eq!(cpuinfo_level(&v1), Some(Some(Level::V1)));
        assert_eq!(cpuinfo_level("processor : 0\n"), None);
    }
}
