//! Known hazards of the libvirt/QEMU stack (`src/hazards.toml`): combinations of releases and
//! guest shapes that break a guest's start or live migration, as data, each with its source.
//!
//! The table is compiled in and read once ([`table`]). [`matching`] gives the entries a guest's
//! start or migration meets, from the releases of its source and destination host and its
//! shape; `fleet` names each as a `stack-hazard` reason ([`crate::fleet`]). An entry holds only
//! when every fact it names is known and holds: a release a host's facts do not give is never
//! taken as one, and an entry that `needs` facts the tool does not have (kernel releases, device
//! offloads) is listed ([`table`], `docs/hazards.md`) and never matched.

use crate::finding::Code;
use crate::libvirt::version::{LibvirtVersion, QemuVersion};
use serde::Deserialize;
use std::sync::OnceLock;

/// The table's text.
const TABLE: &str = include_str!("hazards.toml");

/// What a hazard breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Breaks {
    /// A running guest's live migration to the destination.
    Migration,
    /// Any guest on the destination: started there, or arriving by migration.
    Start,
}

impl Breaks {
    /// `migration` or `start`, as the table writes it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Breaks::Migration => "migration",
            Breaks::Start => "start",
        }
    }
}

/// A release written as text in the table (`"10.0"`), read by its type's parser.
fn release<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    let text = String::deserialize(d)?;
    text.parse()
        .map(Some)
        .map_err(|e| serde::de::Error::custom(format!("'{text}': {e}")))
}

/// When a hazard holds: every condition given must (module docs).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct When {
    /// The guest's domain type (`kvm`, `qemu`).
    pub virt_type: Option<String>,
    /// The guest's `<topology threads>` at least this.
    pub threads_from: Option<u32>,
    /// The source host's QEMU below this release.
    #[serde(default, deserialize_with = "release")]
    pub source_qemu_below: Option<QemuVersion>,
    /// The destination's QEMU at least this release.
    #[serde(default, deserialize_with = "release")]
    pub destination_qemu_from: Option<QemuVersion>,
    /// The destination's QEMU below this release.
    #[serde(default, deserialize_with = "release")]
    pub destination_qemu_below: Option<QemuVersion>,
    /// The destination's libvirt at least this release.
    #[serde(default, deserialize_with = "release")]
    pub destination_libvirt_from: Option<LibvirtVersion>,
    /// The destination's libvirt below this release.
    #[serde(default, deserialize_with = "release")]
    pub destination_libvirt_below: Option<LibvirtVersion>,
    /// The destination's CPU vendor (`AMD`, `Intel`).
    pub vendor: Option<String>,
    /// The source host's libvirt at least this release (libvirt's NEWS names the releases a
    /// migration bug was in on either end: 10.2.0, 10.3.0).
    #[serde(default, deserialize_with = "release")]
    pub source_libvirt_from: Option<LibvirtVersion>,
    /// The source host's libvirt below this release.
    #[serde(default, deserialize_with = "release")]
    pub source_libvirt_below: Option<LibvirtVersion>,
    /// The version of the guest's versioned x86 machine type (`pc-i440fx-2.3`, `pc-q35-5.1`,
    /// `pc-1.3`: [`machine_version`]) at least this. QEMU removes machine types by their
    /// version (its docs/about/removed-features.rst and deprecated.rst).
    #[serde(default, deserialize_with = "release")]
    pub machine_from: Option<QemuVersion>,
    /// The version of the guest's versioned x86 machine type below this.
    #[serde(default, deserialize_with = "release")]
    pub machine_below: Option<QemuVersion>,
    /// The guest's CPU `<model>` is one of these (QEMU removes CPU models by name:
    /// `Icelake-Client` in 7.1).
    #[serde(default)]
    pub cpu_models: Vec<String>,
    /// The guest's CPU `<model>` is a versioned name (`Skylake-Client-v4`: ends in `-v` and
    /// digits), which libvirt knows from 10.10 (its 10.10.0 NEWS).
    #[serde(default)]
    pub cpu_model_versioned: bool,
    /// The guest's CPU enables (`require`, `force`) one of these features; a name ending in
    /// `*` names every feature it begins (`vmx-*`).
    #[serde(default)]
    pub cpu_features_enabled: Vec<String>,
    /// The guest's CPU disables (`disable`, `forbid`) one of these features (`*` as above).
    #[serde(default)]
    pub cpu_features_disabled: Vec<String>,
    /// Facts the tool does not have: an entry with any is never matched.
    #[serde(default)]
    pub needs: Vec<String>,
}

impl When {
    /// Whether it is about the guest's machine type or CPU model, which a host's own
    /// capabilities judge as libvirt does (`machine-unsupported` from its machine types,
    /// `cpu-model-unknown` from its cpu_map and domcapabilities' models): where they already
    /// refuse the guest, the entry would say the same cause a second time.
    #[must_use]
    pub fn judged_by_capabilities(&self) -> bool {
        self.machine_from.is_some() || self.machine_below.is_some() || !self.cpu_models.is_empty()
    }

    /// Whether a guest's findings (or a pair's reasons) with these codes already refuse it for
    /// what [`When::judged_by_capabilities`] entries are about.
    #[must_use]
    pub fn refused_by_capabilities(codes: impl IntoIterator<Item = Code>) -> bool {
        codes
            .into_iter()
            .any(|c| matches!(c, Code::MachineUnsupported | Code::CpuModelUnknown))
    }

    /// Whether it asks of the guest what no check of the destination's own capabilities
    /// answers (its domain type, threads, CPU features): such an entry may be said as not
    /// compared when a release it depends on is not given. One about a machine type or a CPU
    /// model is not: the destination's capabilities (its machine types, its cpu_map) judge
    /// those without the release (`machine-unsupported`, `cpu-model-unknown`); nor is one about
    /// hosts alone.
    fn about_guest(&self) -> bool {
        self.virt_type.is_some()
            || self.threads_from.is_some()
            || !self.cpu_features_enabled.is_empty()
            || !self.cpu_features_disabled.is_empty()
    }

    /// Whether the guest's shape meets every condition on the guest.
    fn shape_holds(&self, shape: &GuestShape) -> bool {
        let machine = |bound: Option<QemuVersion>, holds: fn(QemuVersion, QemuVersion) -> bool| {
            bound.is_none_or(|b| shape.machine.is_some_and(|m| holds(b, m)))
        };
        let model = shape.cpu_model.as_deref();
        self.virt_type
            .as_deref()
            .is_none_or(|t| t == shape.virt_type)
            && self.threads_from.is_none_or(|t| shape.threads >= t)
            && machine(self.machine_from, |b, m| m >= b)
            && machine(self.machine_below, |b, m| m < b)
            && (self.cpu_models.is_empty()
                || model.is_some_and(|m| self.cpu_models.iter().any(|c| c == m)))
            && (!self.cpu_model_versioned || model.is_some_and(is_versioned_model))
            && any_named(&self.cpu_features_enabled, &shape.features_enabled)
            && any_named(&self.cpu_features_disabled, &shape.features_disabled)
    }
}

/// Whether `names` is empty or one of its names (a trailing `*`: a prefix) is in `features`.
fn any_named(names: &[String], features: &[String]) -> bool {
    names.is_empty()
        || names.iter().any(|n| match n.strip_suffix('*') {
            Some(prefix) => features.iter().any(|f| f.starts_with(prefix)),
            None => features.iter().any(|f| f == n),
        })
}

/// Whether a CPU model name is QEMU's versioned spelling, `NAME-vN` (`Skylake-Client-v4`).
#[must_use]
pub fn is_versioned_model(model: &str) -> bool {
    model.rsplit_once("-v").is_some_and(|(name, n)| {
        !name.is_empty() && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
    })
}

/// The version of a versioned x86 machine type: `pc-i440fx-X.Y`, `pc-q35-X.Y` (and
/// `pc-q35-4.0.1`), the older `pc-X.Y`; None for an alias (`pc`, `q35`), a distribution's own
/// (`pc-q35-rhel9.2.0`) or another arch's, which the table's machine conditions never match.
#[must_use]
pub fn machine_version(machine: &str) -> Option<QemuVersion> {
    let v = ["pc-i440fx-", "pc-q35-", "pc-"]
        .iter()
        .find_map(|p| machine.strip_prefix(p))?;
    v.contains('.').then(|| v.parse().ok()).flatten()
}

/// One known hazard (the table's header says what each field holds).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hazard {
    /// A short name, unique in the table.
    pub id: String,
    /// What it breaks.
    pub breaks: Breaks,
    /// The combination and what happens.
    pub what: String,
    /// What happens: libvirt's or QEMU's own words in double quotes where they were seen, as
    /// the sentences print it.
    pub symptom: String,
    /// What the operator does about it.
    pub fix: String,
    /// Where the fact comes from.
    pub source: String,
    /// What this project saw on its rig, or why it cannot be reproduced there.
    pub reproduced: String,
    /// When it holds.
    pub when: When,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    hazard: Vec<Hazard>,
}

/// The table, parsed on first use.
///
/// # Panics
/// When `src/hazards.toml` does not parse: it is compiled in, and a test reads it.
#[must_use]
pub fn table() -> &'static [Hazard] {
    static PARSED: OnceLock<Vec<Hazard>> = OnceLock::new();
    PARSED.get_or_init(|| {
        toml::from_str::<Table>(TABLE)
            .unwrap_or_else(|e| panic!("src/hazards.toml: {e}"))
            .hazard
    })
}

/// The releases of one host, as its facts give them (None: not given).
#[derive(Debug, Clone, Copy, Default)]
pub struct Releases {
    /// Its libvirt.
    pub libvirt: Option<LibvirtVersion>,
    /// The QEMU libvirt drives there.
    pub qemu: Option<QemuVersion>,
}

/// What of a guest the table asks.
#[derive(Debug, Clone, Default)]
pub struct GuestShape {
    /// Its domain type.
    pub virt_type: String,
    /// Its `<topology threads>` (1 without a topology).
    pub threads: u32,
    /// Whether it runs (its arrival is a live migration), else it would be started.
    pub running: bool,
    /// The version of its versioned x86 machine type ([`machine_version`]), None otherwise.
    pub machine: Option<QemuVersion>,
    /// Its CPU `<model>`, trimmed (None without one).
    pub cpu_model: Option<String>,
    /// The features its CPU enables (`require`, `force`), in libvirt's spelling.
    pub features_enabled: Vec<String>,
    /// The features its CPU disables (`disable`, `forbid`).
    pub features_disabled: Vec<String>,
}

/// Whether a hazard holds for a pair, as far as the facts tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every condition is known to hold.
    Holds,
    /// Every condition known holds, and these facts, which the others need, are not given: the
    /// pair is not compared for it (only for an entry about the guest's shape: one about a
    /// host's own releases alone is not claimed on a guess).
    Unknown(Vec<&'static str>),
}

/// The entries whose conditions on the destination hold, or hold as far as its facts tell, for
/// a host of `destination` releases and CPU `vendor`, each with the destination's facts it
/// lacks (and none that `needs` facts the tool lacks): what a fleet keeps per class of hosts,
/// so that a pair of a host with none costs nothing more.
#[must_use]
pub fn at_destination(
    destination: Releases,
    vendor: Option<&str>,
) -> Vec<(&'static Hazard, Vec<&'static str>)> {
    table()
        .iter()
        .filter(|h| h.when.needs.is_empty())
        .filter_map(|h| Some((h, destination_lacks(h, destination, vendor)?)))
        .collect()
}

/// Whether hazard `h`'s conditions on the destination hold for a host of `destination`
/// releases and CPU `vendor` ([`at_destination`], its `needs` aside): None when one is known
/// not to, else the facts it lacks (an entry about hosts alone lacking one: None).
fn destination_lacks(
    h: &Hazard,
    destination: Releases,
    vendor: Option<&str>,
) -> Option<Vec<&'static str>> {
    let w = &h.when;
    let mut missing = Vec::new();
    let qemu = "the destination's QEMU release";
    let libvirt = "the destination's libvirt release";
    let checks = [
        bounds(
            w.destination_qemu_from,
            w.destination_qemu_below,
            destination.qemu,
            qemu,
        ),
        bounds(
            w.destination_libvirt_from,
            w.destination_libvirt_below,
            destination.libvirt,
            libvirt,
        ),
        match (w.vendor.as_deref(), vendor) {
            (None, _) => Some(None),
            (Some(v), Some(f)) => v.eq_ignore_ascii_case(f).then_some(None),
            (Some(_), None) => Some(Some("the destination's CPU vendor")),
        },
    ];
    for c in checks {
        if let Some(lacks) = c? {
            if !missing.contains(&lacks) {
                missing.push(lacks);
            }
        }
    }
    // One about the host's own releases alone, a release not given, is never claimed
    // ([`for_guest`]): not kept.
    (missing.is_empty() || w.about_guest()).then_some(missing)
}

/// A release's two bounds (`from` inclusive, `below` exclusive) as one condition ([`tri`]).
#[allow(clippy::option_option)] // As tri.
fn bounds<T: Copy + Ord>(
    from: Option<T>,
    below: Option<T>,
    fact: Option<T>,
    name: &'static str,
) -> Option<Option<&'static str>> {
    let lo = tri(from, fact, |c, f| f >= c, name)?;
    let hi = tri(below, fact, |c, f| f < c, name)?;
    Some(lo.or(hi))
}

/// One condition: None when it is known not to hold; `Some(None)` when absent or known to hold;
/// `Some(Some(fact))` when its fact is not given.
#[allow(clippy::option_option)] // Three answers, each read with `?` by its one caller.
fn tri<T>(
    cond: Option<T>,
    fact: Option<T>,
    holds: impl Fn(T, T) -> bool,
    name: &'static str,
) -> Option<Option<&'static str>> {
    match (cond, fact) {
        (None, _) => Some(None),
        (Some(_), None) => Some(Some(name)),
        (Some(c), Some(f)) => holds(c, f).then_some(None),
    }
}

/// Hazard `h` (whose destination conditions hold as [`at_destination`] says, lacking
/// `destination_lacks`) for a guest of `shape` arriving from its source host of `source`
/// releases (None: its source host is not known): its [`Outcome`], or None when a condition is
/// known not to hold. A `migration` hazard needs a running guest.
#[must_use]
pub fn for_guest(
    h: &Hazard,
    destination_lacks: &[&'static str],
    shape: &GuestShape,
    source: Option<Releases>,
) -> Option<Outcome> {
    let w = &h.when;
    if h.breaks == Breaks::Migration && !shape.running {
        return None;
    }
    if !w.shape_holds(shape) {
        return None;
    }
    let mut missing = destination_lacks.to_vec();
    let source_qemu = source.and_then(|s| s.qemu);
    if let Some(lacks) = tri(
        w.source_qemu_below,
        source_qemu,
        |c, f| f < c,
        "the QEMU release of the guest's source host",
    )? {
        missing.push(lacks);
    }
    if let Some(lacks) = bounds(
        w.source_libvirt_from,
        w.source_libvirt_below,
        source.and_then(|s| s.libvirt),
        "the libvirt release of the guest's source host",
    )? {
        missing.push(lacks);
    }
    if missing.is_empty() {
        Some(Outcome::Holds)
    } else if w.about_guest() {
        Some(Outcome::Unknown(missing))
    } else {
        None
    }
}

/// Whether an entry a guest of `shape` may meet on a host of libvirt `libvirt` (None: not
/// known) asks for that host's QEMU release: whoever judges one guest on one host reads the
/// release (libvirt's QEMU capability cache) only then.
#[must_use]
pub fn needs_qemu(shape: &GuestShape, libvirt: Option<LibvirtVersion>) -> bool {
    table().iter().any(|h| {
        let w = &h.when;
        let qemu = w.destination_qemu_from.is_some() || w.destination_qemu_below.is_some();
        let libvirt_may = bounds(
            w.destination_libvirt_from,
            w.destination_libvirt_below,
            libvirt,
            "",
        )
        .is_some();
        qemu && libvirt_may && may_meet_one(h, shape)
    })
}

/// [`may_meet`] of one entry.
fn may_meet_one(h: &Hazard, shape: &GuestShape) -> bool {
    let w = &h.when;
    w.needs.is_empty() && (h.breaks != Breaks::Migration || shape.running) && w.shape_holds(shape)
}

/// Whether a guest of `shape` can meet any entry of the table, whatever the hosts (its
/// conditions on the guest alone): a fleet asks it once per guest shape, and a shape that can
/// meet none costs its pairs nothing more.
#[must_use]
pub fn may_meet(shape: &GuestShape) -> bool {
    table().iter().any(|h| may_meet_one(h, shape))
}

/// The hazards a guest of `shape` is known to meet arriving from a host of `source` releases at
/// `destination` ([`at_destination`] then [`for_guest`], [`Outcome::Holds`] only).
#[must_use]
pub fn matching(
    shape: &GuestShape,
    source: Option<Releases>,
    destination: Releases,
    vendor: Option<&str>,
) -> Vec<&'static Hazard> {
    at_destination(destination, vendor)
        .into_iter()
        .filter(|(h, lacks)| for_guest(h, lacks, shape, source) == Some(Outcome::Holds))
        .map(|(h, _)| h)
        .collect()
}

/// The reason's sentence for hazard `h` met by a guest from a host of `source` releases at one
/// of `destination`: what happens, in the source's words, the releases that make it, the fix,
/// and where the fact comes from (a fleet pair's reason, which has no fix of its own).
#[must_use]
pub fn sentence(h: &Hazard, source: Option<Releases>, destination: Releases) -> String {
    let said = finding_sentence(h, source, destination);
    match said.rsplit_once("; source: ") {
        Some((what, src)) => format!("{what}; fix: {}; source: {src}", h.fix),
        None => said,
    }
}

/// [`sentence`] without the fix: a finding's message, whose fix is its own field.
#[must_use]
pub fn finding_sentence(h: &Hazard, source: Option<Releases>, destination: Releases) -> String {
    let of = |r: Releases| {
        let v = |x: Option<String>| x.unwrap_or_else(|| "(release not given)".into());
        format!(
            "libvirt {}, QEMU {}",
            v(r.libvirt.map(|l| l.to_string())),
            v(r.qemu.map(|q| q.to_string()))
        )
    };
    // A start's hazard is the destination's alone: where the guest comes from does not matter.
    let from = source
        .filter(|_| h.breaks == Breaks::Migration)
        .map_or_else(String::new, |s| format!("from {} ", of(s)));
    let to = if from.is_empty() { "on" } else { "to" };
    format!(
        "a known hazard of the stack ({}, {from}{to} {}): {} ({}); source: {}",
        h.id,
        of(destination),
        h.what,
        h.symptom,
        h.source
    )
}

/// Where the releases a hazard depends on come from, said after what is lacking: a fleet's
/// facts (the daemon publishes them), or, on one host, the source host the hook at `migrate
/// begin` is never told of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lacking {
    /// A fleet's facts lack it: `virt-cpu-policyd --publish` writes each host's releases.
    InFacts,
    /// The source host of an arrival on this host: libvirt does not name it to the hook.
    SourceHost,
}

/// The not-compared sentence for hazard `h`, whose facts `lacking` are not given (`why`: where
/// they would come from).
#[must_use]
pub fn unknown_sentence(h: &Hazard, lacking: &[&str], why: Lacking) -> String {
    let gap = match why {
        Lacking::InFacts => {
            "which the facts do not give (virt-cpu-policyd --publish writes each host's libvirt and QEMU releases)"
        }
        Lacking::SourceHost => {
            "which libvirt does not tell this host of an arriving guest (`virt-cpu-policy fleet` with both hosts' facts answers it)"
        }
    };
    format!(
        "not compared: the known hazard {} of the stack ({}: {}) depends on {}, {gap}; source: {}",
        h.id,
        h.breaks.as_str(),
        h.symptom,
        lacking.join(" and "),
        h.source
    )
}

#[cfg(test)]
mod tests;
