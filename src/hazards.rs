//! Known hazards of the libvirt/QEMU stack (`src/hazards.toml`): combinations of releases and
//! guest shapes that break a guest's start or live migration, as data, each with its source.
//!
//! The table is compiled in and read once ([`table`]). [`matching`] gives the entries a guest's
//! start or migration meets, from the releases of its source and destination host and its
//! shape; `fleet` names each as a `stack-hazard` reason ([`crate::fleet`]). An entry holds only
//! when every fact it names is known and holds: a release a host's facts do not give is never
//! taken as one, and an entry that `needs` facts the tool does not have (kernel releases, device
//! offloads) is listed ([`table`], `docs/hazards.md`) and never matched.

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
    /// Facts the tool does not have: an entry with any is never matched.
    #[serde(default)]
    pub needs: Vec<String>,
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
    /// libvirt's or QEMU's words where seen, else what happens.
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
        .filter_map(|h| {
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
            let about_guest = w.virt_type.is_some() || w.threads_from.is_some();
            (missing.is_empty() || about_guest).then_some((h, missing))
        })
        .collect()
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
    if w.virt_type.as_deref().is_some_and(|t| t != shape.virt_type)
        || w.threads_from.is_some_and(|t| shape.threads < t)
    {
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
    if missing.is_empty() {
        Some(Outcome::Holds)
    } else if w.virt_type.is_some() || w.threads_from.is_some() {
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
    w.needs.is_empty()
        && (h.breaks != Breaks::Migration || shape.running)
        && w.virt_type.as_deref().is_none_or(|t| t == shape.virt_type)
        && w.threads_from.is_none_or(|t| shape.threads >= t)
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
        let v = |x: Option<String>| x.unwrap_or_else(|| "not given".into());
        format!(
            "libvirt {}, QEMU {}",
            v(r.libvirt.map(|l| l.to_string())),
            v(r.qemu.map(|q| q.to_string()))
        )
    };
    let from = source.map_or_else(String::new, |s| format!("from {} ", of(s)));
    format!(
        "a known hazard of the stack ({}, {}to {}): {} (\"{}\"); source: {}",
        h.id,
        from,
        of(destination),
        h.what,
        h.symptom,
        h.source
    )
}

/// The not-compared sentence for hazard `h`, whose facts `lacking` are not given.
#[must_use]
pub fn unknown_sentence(h: &Hazard, lacking: &[&str]) -> String {
    format!(
        "not compared: the known hazard {} of the stack ({}: \"{}\") depends on {}, which the facts do not give (virt-cpu-policyd --publish writes each host's libvirt and QEMU releases); source: {}",
        h.id,
        h.breaks.as_str(),
        h.symptom,
        lacking.join(" and "),
        h.source
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(libvirt: &str, qemu: &str) -> Releases {
        Releases {
            libvirt: Some(libvirt.parse().unwrap()),
            qemu: Some(qemu.parse().unwrap()),
        }
    }

    fn kvm_threads(threads: u32) -> GuestShape {
        GuestShape {
            virt_type: "kvm".into(),
            threads,
            running: true,
        }
    }

    #[test]
    fn every_entry_has_its_words_and_source_and_a_unique_id() {
        let t = table();
        assert!(t.len() >= 4, "{}", t.len());
        let mut ids = std::collections::BTreeSet::new();
        for h in t {
            assert!(ids.insert(h.id.clone()), "{}: id twice", h.id);
            for (field, text) in [
                ("what", &h.what),
                ("symptom", &h.symptom),
                ("fix", &h.fix),
                ("source", &h.source),
                ("reproduced", &h.reproduced),
            ] {
                assert!(!text.trim().is_empty(), "{}: no {field}", h.id);
            }
        }
    }

    /// The rig's pairs (tests/fleet/migrate): started on 9.0/7.2, to 11.3/10.0 it fails, to
    /// 12.8/11.1 it migrates; one thread per core, or TCG, or a stopped guest, meets nothing.
    #[test]
    fn the_ht_hazard_holds_for_the_failing_pair_only() {
        let bookworm = r("9.0.0", "7.2.22");
        let ids = |shape: &GuestShape, src: Option<Releases>, dst: Releases| -> Vec<&str> {
            matching(shape, src, dst, Some("AMD"))
                .into_iter()
                .map(|h| h.id.as_str())
                .collect()
        };
        let trixie = r("11.3.0", "10.0.7");
        let forky = r("12.8.0", "11.1.0");
        assert_eq!(
            ids(&kvm_threads(2), Some(bookworm), trixie),
            ["ht-extra-after-qemu-10"]
        );
        assert!(ids(&kvm_threads(2), Some(bookworm), forky).is_empty());
        assert!(ids(&kvm_threads(1), Some(bookworm), trixie).is_empty());
        let tcg = GuestShape {
            virt_type: "qemu".into(),
            ..kvm_threads(2)
        };
        assert!(ids(&tcg, Some(bookworm), trixie).is_empty());
        let stopped = GuestShape {
            running: false,
            ..kvm_threads(2)
        };
        assert!(ids(&stopped, Some(bookworm), trixie).is_empty());
        // A release not given is not taken as one: the pair is not compared for it.
        let unknown = Releases {
            qemu: None,
            ..trixie
        };
        assert!(ids(&kvm_threads(2), Some(bookworm), unknown).is_empty());
        let told: Vec<_> = at_destination(unknown, Some("AMD"))
            .into_iter()
            .filter_map(|(h, lacks)| for_guest(h, &lacks, &kvm_threads(2), Some(bookworm)))
            .collect();
        assert_eq!(
            told,
            [Outcome::Unknown(vec!["the destination's QEMU release"])]
        );
        // libvirt 12.4 with a QEMU before 7.2: every guest, running or not.
        let odd = r("12.4.0", "7.1.0");
        assert_eq!(ids(&stopped, None, odd), ["libvirt-12.4-qemu-7.2"]);
    }
}
