//! What the host's QEMU gives a TCG guest (`<domain type='qemu'>` on x86): which release it is,
//! so whether its TCG emulates x2APIC, and the guest CPU libvirt compares with at start.
//!
//! libvirt probes every QEMU binary once and keeps the answers in its QEMU capability cache
//! (`<version>`, and per accelerator the CPU models with `usable` and their `<blocker>`s, and
//! `<hostCPU type='tcg'>`); the domcapabilities of `type='qemu'` give the TCG host-model CPU,
//! each model's `usable` and, on libvirt 11.x, its `<blockers>`. [`crate::host::Host`] says which
//! file answers; [`TcgFacts::gather`] asks it, once per domain and only when a rule can need it,
//! for what [`crate::validate`] and [`crate::rewrite`] judge: the APIC-ID rule
//! ([`crate::apic_id`]) and libvirt's CPU check under TCG.

use crate::domain::{Domain, cpu_mode, model_name};
use crate::host::{CacheTcg, Host, Sourced};
use crate::libvirt::arch::is_x86;
use crate::libvirt::cpu_def::{CpuCheck, CpuMode};
use crate::libvirt::domcaps::DomCaps;
use crate::libvirt::version::{LibvirtVersion, QemuVersion};
use crate::policy::Plan;
use crate::xml::child;
use std::collections::{BTreeMap, BTreeSet};

/// The first QEMU whose TCG emulates x2APIC, so runs x86 vCPUs with APIC IDs of 255 and more:
/// 9.0.0 (QEMU commit b5ee0468e9d2, "apic: add support for x2APIC mode", in the pull request
/// "x2APIC mode with TCG support" merged on 2024-02-14 for the 9.0 release; before it the TCG's
/// APIC had at most 255 IDs and `x86_cpus_init` refused more: "current -smp configuration
/// requires kernel irqchip and X2APIC API support", seen with QEMU 5.2 and 7.2).
pub const TCG_X2APIC_SINCE: QemuVersion = QemuVersion(LibvirtVersion {
    major: 9,
    minor: 0,
    micro: 0,
});

/// The first QEMU whose TCG builds a vCPU with `ht` and `cmp_legacy` (CPUID leaf 1 EDX bit 28,
/// leaf 0x80000001 ECX bit 1; QEMU sets `cmp_legacy` for a vendor other than Intel only) when
/// the CPU asks for them: 10.0.1 (the series "i386/cpu: Set up
/// CPUID_HT in x86_cpu_expand_features()", made supported under TCG, KVM and HVF, merged for
/// 10.1 and taken into the stable 10.0.1). Before it TCG filters both, so libvirt's
/// `check='full'` refuses a CPU requiring them: "guest CPU doesn't match specification: missing
/// features: ht,cmp_legacy" (seen with QEMU 5.2 and 7.2 under libvirt 7.0 and 9.0, with and
/// without a `<topology>`); QEMU 10.0.13 and 11.1 start it (libvirt 11.3 and 12.8). Neither is
/// in the TCG host-model CPU of domcapabilities, which is why the release decides.
pub const TCG_HT_SINCE: QemuVersion = QemuVersion(LibvirtVersion {
    major: 10,
    minor: 0,
    micro: 1,
});

/// The QEMU releases whose TCG never tells an ACPI guest of a hot-plugged x86 vCPU: 5.1.0 up
/// to, not including, 7.2.1. QEMU starts every pc and q35 guest on the legacy CPU hotplug
/// register block at I/O port 0xaf00 (one byte wide, `.valid.max_access_size = 1`); the AML QEMU
/// writes for the guest switches it to the modern interface by writing 0 there as a 4-byte
/// `CSEL` store. QEMU 5.1.0 (commit 5d971f9e6725, "memory: Revert "memory: accept mismatching
/// sizes in memory_region_access_valid"", the fix of CVE-2020-13754) refuses an access wider
/// than a region allows; KVM's port I/O path splits it into bytes, TCG's does not, so under TCG
/// the switch is dropped and the guest's hot-plug handler (`\_SB.CPUS.CSCN`) reads the legacy
/// block: libvirt's `setvcpus --live` succeeds, QEMU creates the vCPUs, the guest never sees
/// them. Fixed by "acpi: cpuhp: fix guest-visible maximum access size to the legacy reg block"
/// (QEMU commit dab30fbef389, 8.0.0, and the stable 7.2.1). Seen here: Debian 11's QEMU 5.2
/// (with a Debian 12 guest kernel, on pc and q35 machine types; a byte-wide write of 0 to port
/// 0xaf00 from inside the guest makes the same hot-plug reach it); Debian 12's 7.2.22, 10.0
/// and 11.1 deliver it (tests/guest/run). A distribution QEMU older than 5.1 that took the
/// CVE's fix can behave the same, unseen here.
pub const TCG_CPU_HOTPLUG_LOST: (QemuVersion, QemuVersion) = (
    QemuVersion(LibvirtVersion {
        major: 5,
        minor: 1,
        micro: 0,
    }),
    QemuVersion(LibvirtVersion {
        major: 7,
        minor: 2,
        micro: 1,
    }),
);

impl QemuVersion {
    /// Whether this QEMU's TCG loses the vCPUs hot-plugged into an x86 ACPI guest
    /// ([`TCG_CPU_HOTPLUG_LOST`]).
    #[must_use]
    pub fn tcg_loses_cpu_hotplug(self) -> bool {
        let (from, fixed) = TCG_CPU_HOTPLUG_LOST;
        self >= from && self < fixed
    }

    /// Whether this QEMU's TCG builds vCPUs with `ht` and `cmp_legacy` ([`TCG_HT_SINCE`]).
    #[must_use]
    pub fn tcg_has_ht(self) -> bool {
        self >= TCG_HT_SINCE
    }

    /// Whether this QEMU's TCG runs vCPUs with APIC IDs of 255 and more ([`TCG_X2APIC_SINCE`]).
    #[must_use]
    pub fn tcg_has_x2apic(self) -> bool {
        self >= TCG_X2APIC_SINCE
    }
}

/// What a QEMU's TCG says of one CPU model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcgModel {
    /// QEMU's `usable`: TCG gives every feature of QEMU's definition of the model.
    pub usable: bool,
    /// The features TCG lacks (libvirt spellings), when known: empty for a usable model; None
    /// for an unusable one whose blockers no source names (libvirt 9.0's domcapabilities).
    pub blockers: Option<BTreeSet<String>>,
    /// Where it came from (a domcapabilities file, or a capability cache file).
    pub source: String,
}

/// What the rules of one x86 TCG guest need of the host's QEMU, gathered with the other facts
/// ([`crate::domain_facts::DomainFacts::gather`]) and only when a rule can need them.
#[derive(Debug, Clone, Default)]
pub struct TcgFacts {
    /// Whether the guest runs under TCG on x86 (`type='qemu'`, x86_64 or i686); nothing else is
    /// gathered otherwise.
    pub x86_tcg: bool,
    /// The QEMU release ([`Host::qemu_version`]), looked up when the guest's vCPUs can reach an
    /// APIC ID of 255 ([`crate::apic_id`]), a `vcpu.*` rule can change them, vCPUs can be
    /// hot-plugged ([`TCG_CPU_HOTPLUG_LOST`]), libvirt compares the guest CPU
    /// ([`TCG_HT_SINCE`]) or an Intel IOMMU has `eim='on'`; None: not needed, or unknown (then
    /// judged as a QEMU before 9.0 for the refusals, the safe choice; no hot-plug warning is
    /// given without the release).
    pub version: Option<Sourced<QemuVersion>>,
    /// The TCG's verdict on each custom model the result can name, looked up when a `check` of
    /// `partial` or `full` makes libvirt compare the guest CPU with what TCG gives.
    pub models: BTreeMap<String, TcgModel>,
    /// The features of the CPU TCG gives (libvirt spellings) and where they came from: the
    /// host-model CPU of the `type='qemu'` domcapabilities, else `<hostCPU type='tcg'>` of
    /// libvirt's QEMU capability cache; looked up with [`TcgFacts::models`], or for a
    /// `cpu.min_level` rule.
    pub host_cpu: Option<(BTreeSet<String>, String)>,
    /// Whether libvirt takes QEMU's word on a model (`usable`, blockers) in its partial check, as
    /// libvirt 11.3 does for the models its cpu_map marks `<check partial='compat'/>` (a usable
    /// `pentium` passes although TCG lacks its `vme`; libvirt 9.0 refuses it: "Host CPU does not
    /// provide required features: vme", both seen): domcapabilities that list `<blockers>`, or
    /// without them a libvirt of 11.0 or later.
    pub usable_decides: bool,
}

impl TcgFacts {
    /// Whether the CPU libvirt's `check` compares a TCG guest's with has the feature `name`
    /// (libvirt's spelling): the CPU TCG gives ([`TcgFacts::host_cpu`]; false when unknown)
    /// has it, or, under `check='full'` (which compares the vCPU QEMU built, not the TCG
    /// host-model CPU of domcapabilities), it is `ht` or `cmp_legacy` and this QEMU is 10.0.1
    /// or later ([`TCG_HT_SINCE`]).
    ///
    /// Source: QEMU commit 5979f50fa9fd, "i386/tcg: Make CPUID_HT and CPUID_EXT3_CMP_LEG
    /// supported" (target/i386/cpu.c: `CPUID_HT` added to `TCG_FEATURES`,
    /// `CPUID_EXT3_CMP_LEG` to `TCG_EXT3_FEATURES`, so `x86_cpu_filter_features()` keeps the
    /// bits `x86_cpu_expand_features()` sets for more than one vCPU), pulled for 10.1 on
    /// 2025-05-20 and taken into the stable 10.0.1 (patch 50 of its series). The release is
    /// what decides: neither feature is in the TCG host-model CPU of domcapabilities.
    #[must_use]
    pub fn check_finds(&self, name: &str, check: CpuCheck) -> bool {
        let Some((gives, _)) = &self.host_cpu else {
            return false;
        };
        gives.contains(name)
            || (check == CpuCheck::Full
                && matches!(name, "ht" | "cmp_legacy")
                && self.version.as_ref().is_some_and(|v| v.value.tcg_has_ht()))
    }

    /// Gathers what `dom` under `plan` needs from `host`; `domcaps` are the domain's (of its
    /// virt type, so TCG's).
    #[must_use]
    pub fn gather(dom: &Domain<'_>, plan: &Plan, host: &Host, domcaps: Option<&DomCaps>) -> Self {
        if dom.virt_type() != "qemu" || !is_x86(dom.arch()) {
            return TcgFacts::default();
        }
        let (arch, emulator) = (dom.arch(), dom.emulator());
        let compare = compares(dom, plan);
        let version = needs_release(dom, plan, compare)
            .then(|| host.qemu_version(arch, emulator.as_deref()))
            .flatten();
        let mut facts = TcgFacts {
            x86_tcg: true,
            version,
            ..TcgFacts::default()
        };
        // A `cpu.min_level` rule asks what TCG gives too: QEMU drops, with a warning on its
        // stderr only, a required feature its TCG lacks when libvirt compares nothing
        // (`check='none'`), and the guest starts below the level (`host-level`).
        if !compare && plan.min_level.is_none() {
            return facts;
        }
        // The models' TCG verdicts matter only where libvirt compares.
        let names = if compare {
            compared_models(dom, plan)
        } else {
            BTreeSet::new()
        };
        // The cache is read only when domcapabilities leave a question open.
        let from_domcaps: BTreeMap<&str, TcgModel> = names
            .iter()
            .filter_map(|n| Some((n.as_str(), domcaps_tcg_model(domcaps?, n)?)))
            .collect();
        let dc_host_cpu = domcaps.and_then(|d| {
            let hm = d.host_model.as_ref()?;
            let model = hm.model.as_deref().and_then(|m| host.model_features(m));
            Some((hm.guaranteed_features(model.as_ref()), d.source.clone()))
        });
        let open = dc_host_cpu.is_none()
            || names.iter().any(|n| {
                from_domcaps
                    .get(n.as_str())
                    .is_none_or(|m| m.blockers.is_none())
            });
        let cache = open
            .then(|| {
                host.tcg_from_cache(arch, emulator.as_deref(), names.iter().map(String::as_str))
            })
            .flatten();
        facts.host_cpu = dc_host_cpu.or_else(|| cache.as_ref().and_then(cache_host_cpu));
        for name in &names {
            if let Some(m) = model_verdict(name, from_domcaps.get(name.as_str()), cache.as_ref()) {
                facts.models.insert(name.clone(), m);
            }
        }
        facts.usable_decides = match domcaps {
            Some(d) if !d.blockers.is_empty() => true,
            _ => host.libvirt_version().is_some_and(|v| v.value.major >= 11),
        };
        facts
    }
}

/// Whether a rule of `dom` under `plan` needs the QEMU release ([`TcgFacts::version`]): a
/// `vcpu.*` rule that can change the vCPUs, a CPU libvirt compares (`compare`, [`compares`]),
/// an Intel IOMMU with `eim='on'`, a `cpu.min_level` rule, vCPUs that reach an APIC ID of 255,
/// or room for hot-plugged vCPUs. Asked only then: finding the release can mean reading
/// libvirt's QEMU capability cache.
fn needs_release(dom: &Domain<'_>, plan: &Plan, compare: bool) -> bool {
    let vcpu_rule = plan.vcpu_max.is_some() || plan.topology.is_some() || plan.iommu.is_some();
    vcpu_rule
        || compare
        || dom.writes_eim_on()
        || plan.min_level.is_some()
        || reaches_x2apic(dom)
        || has_hotplug_room(dom)
}

/// The custom models libvirt can compare with what TCG gives: each `<cpu>`'s model and the
/// plan's (the rewrite may write it).
fn compared_models(dom: &Domain<'_>, plan: &Plan) -> BTreeSet<String> {
    dom.cpus()
        .iter()
        .filter_map(|c| child(*c, "model").and_then(model_name))
        .chain(plan.model.as_ref().map(|m| m.value.clone()))
        .collect()
}

/// The CPU TCG gives per libvirt's QEMU capability cache (`<hostCPU type='tcg'>`, its features
/// in libvirt's spelling), for when domcapabilities have no TCG host-model CPU.
fn cache_host_cpu(c: &CacheTcg) -> Option<(BTreeSet<String>, String)> {
    let on = c
        .host_cpu
        .as_ref()?
        .iter()
        .map(|f| libvirt_name(f))
        .collect();
    Some((on, format!("<hostCPU type='tcg'> in {}", c.source)))
}

/// The TCG's word on model `name`: domcapabilities' (`from_domcaps`) when it names the
/// blockers, else the capability cache's (`cache`, which always names them), else
/// domcapabilities' `usable` alone (libvirt 9.0); None when neither knows the model.
fn model_verdict(
    name: &str,
    from_domcaps: Option<&TcgModel>,
    cache: Option<&CacheTcg>,
) -> Option<TcgModel> {
    let cached = cache.and_then(|c| {
        let m = c.models.get(name)?;
        Some(TcgModel {
            usable: m.usable,
            blockers: Some(m.blockers.iter().map(|f| libvirt_name(f)).collect()),
            source: c.source.clone(),
        })
    });
    match from_domcaps {
        Some(m) if m.blockers.is_some() => Some(m.clone()),
        other => cached.or_else(|| other.cloned()),
    }
}

/// Whether libvirt can compare the guest CPU with what TCG gives at start: a `check` of
/// `partial` or `full` in the plan or a `<cpu>`, or a host-model CPU (libvirt's default check
/// for it is `partial`).
fn compares(dom: &Domain<'_>, plan: &Plan) -> bool {
    let checked = |c: Option<CpuCheck>| matches!(c, Some(CpuCheck::Partial | CpuCheck::Full));
    checked(plan.check.as_ref().map(|c| c.value))
        || plan
            .mode
            .as_ref()
            .is_some_and(|m| m.value == CpuMode::HostModel)
        || dom.cpus().iter().any(|c| {
            checked(c.attribute("check").and_then(CpuCheck::parse))
                || cpu_mode(*c) == Some(CpuMode::HostModel)
        })
}

/// A feature name of QEMU's in libvirt's spelling (`sse4_2` → `sse4.2`, `lahf-lm` → `lahf_lm`).
fn libvirt_name(qemu: &str) -> String {
    crate::cpu::normalize_feature(qemu).unwrap_or_else(|| qemu.to_string())
}

/// Whether the domain as written has a vCPU whose APIC ID passes 254 (its first `<cpu>`'s
/// topology, its `<vcpu>` maximum).
fn reaches_x2apic(dom: &Domain<'_>) -> bool {
    let max = child(dom.root(), "vcpu")
        .and_then(|v| crate::topology::read_vcpu(v).ok())
        .map_or(1, |c| c.max);
    let topology = dom
        .cpus()
        .first()
        .and_then(|c| child(*c, "topology"))
        .and_then(|t| crate::topology::Topology::read(t, false).ok());
    crate::apic_id::highest(topology.as_ref(), max)
        .is_some_and(|id| id > crate::apic_id::XAPIC_MAX_ID)
}

/// Whether the domain, as written, can take hot-plugged vCPUs (`<vcpu current>` below the
/// maximum), which [`TCG_CPU_HOTPLUG_LOST`] concerns.
fn has_hotplug_room(dom: &Domain<'_>) -> bool {
    child(dom.root(), "vcpus").is_some()
        || child(dom.root(), "vcpu")
            .and_then(|v| crate::topology::read_vcpu(v).ok())
            .is_some_and(|c| c.current < c.max)
}

/// domcapabilities' word on `model`: `usable`, and the blockers libvirt 11.x lists (a usable
/// model has none; libvirt 9.0 names none for an unusable one).
fn domcaps_tcg_model(d: &DomCaps, model: &str) -> Option<TcgModel> {
    let usable = d.model_usable(model)?;
    let blockers = if usable {
        Some(BTreeSet::new())
    } else {
        d.blockers.get(model).map(|b| b.iter().cloned().collect())
    };
    Some(TcgModel {
        usable,
        blockers,
        source: d.source.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcg_emulates_x2apic_from_qemu_9() {
        let v = |s: &str| s.parse::<QemuVersion>().unwrap();
        assert!(!v("5.2").tcg_has_x2apic());
        assert!(!v("7.2.22").tcg_has_x2apic());
        assert!(!v("8.2.9").tcg_has_x2apic());
        assert!(v("9").tcg_has_x2apic());
        assert!(v("10.0.13").tcg_has_x2apic());
    }

    /// `ht` and `cmp_legacy` are found beyond the TCG CPU only under `check='full'` and from
    /// QEMU 10.0.1 on; everything else only in the TCG CPU; nothing when it is unknown.
    #[test]
    fn check_finds_ht_and_cmp_legacy_in_what_qemu_10_0_1_builds() {
        let facts = |version: Option<&str>, host_cpu: bool| TcgFacts {
            x86_tcg: true,
            version: version.map(|v| Sourced {
                value: v.parse().unwrap(),
                source: "test".into(),
            }),
            host_cpu: host_cpu.then(|| (["sse2".to_string()].into(), "dc.xml".into())),
            ..TcgFacts::default()
        };
        let (full, partial) = (CpuCheck::Full, CpuCheck::Partial);
        let new = facts(Some("10.0.1"), true);
        for f in ["ht", "cmp_legacy", "sse2"] {
            assert!(new.check_finds(f, full), "{f}");
        }
        assert!(!new.check_finds("ht", partial) && !new.check_finds("avx", full));
        assert!(new.check_finds("sse2", partial));
        for old in [facts(Some("10.0.0"), true), facts(None, true)] {
            assert!(!old.check_finds("ht", full) && !old.check_finds("cmp_legacy", full));
            assert!(old.check_finds("sse2", full));
        }
        assert!(!facts(Some("11.1"), false).check_finds("ht", full));
    }

    #[test]
    fn domcapabilities_blockers_name_an_unusable_models_missing_features() {
        let doc = roxmltree::Document::parse("<domainCapabilities><domain>qemu</domain><arch>x86_64</arch><machine>pc-q35-10.0</machine><cpu><mode name='custom' supported='yes'><model usable='no' vendor='Intel'>SandyBridge</model><blockers model='SandyBridge'><feature name='tsc-deadline'/></blockers><model usable='yes'>Nehalem</model><model usable='no'>Haswell</model></mode></cpu></domainCapabilities>").unwrap();
        let d = DomCaps::read(doc.root_element(), "dc.xml").unwrap();
        let sb = domcaps_tcg_model(&d, "SandyBridge").unwrap();
        assert_eq!(
            sb.blockers.unwrap().into_iter().collect::<Vec<_>>(),
            ["tsc-deadline"]
        );
        let nh = domcaps_tcg_model(&d, "Nehalem").unwrap();
        assert!(nh.usable && nh.blockers.unwrap().is_empty());
        assert_eq!(domcaps_tcg_model(&d, "Haswell").unwrap().blockers, None);
        assert_eq!(domcaps_tcg_model(&d, "Penryn"), None);
    }
}
