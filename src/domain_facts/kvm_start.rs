//! The host CPUs libvirt compares a KVM guest's custom CPU with at start, gathered for
//! [`crate::validate`]'s KVM start check (which judges, module docs there): the host's own CPU
//! with what QEMU's KVM adds (`check='partial'`), and KVM's host-model CPU (`check='full'`).

use crate::cluster::hosts::ClusterHost;
use crate::cpu::baseline::{BaselineOptions, decode};
use crate::cpu::normalize_feature;
use crate::domain::Domain;
use crate::host::{Host, Sourced};
use crate::libvirt::arch::is_x86;
use crate::libvirt::cpu_def::{CpuDef, FeaturePolicy};
use crate::libvirt::cpu_map::x86::X86Map;
use crate::libvirt::domcaps::DomCaps;
use std::collections::BTreeSet;
use std::sync::OnceLock;

/// The host CPUs a KVM guest's custom CPU is compared with at start, and the cpu_map to compare
/// with, loaded on first use: a usable model with nothing required or forbidden beyond it needs
/// neither (loading libvirt's cpu_map as CPUID data costs the hook about 4 ms).
#[derive(Debug, Clone)]
pub struct KvmStartHost<'h> {
    /// The host, whose own CPU ([`Host::host_cpu`]) is asked only when the map is loaded: this
    /// machine's is decoded from CPUID then, not for a guest that needs no comparison.
    pub(crate) host: &'h Host,
    /// The guest's arch: the host CPU is compared with only when it is of that arch.
    arch: String,
    /// KVM's domcapabilities with a host-model CPU, when given.
    pub(crate) domcaps: Option<&'h DomCaps>,
    /// The guest's `<emulator>`: whose QEMU capability cache file tells what QEMU's KVM adds
    /// when no domcapabilities are given ([`KvmStartHost::kvm_cpu_from_cache`]).
    emulator: Option<String>,
    /// What [`KvmStartHost::loaded`] made.
    loaded: OnceLock<Option<Loaded>>,
}

/// The two host CPUs, once made (the map is the host's: [`Host::x86_map`]).
#[derive(Debug, Clone)]
pub(crate) struct Loaded {
    /// libvirt's "full" host CPU ([`ClusterHost::started_kvm_compare`]) and where it came from,
    /// for messages ("capabilities host CPU, caps.xml, with the features QEMU's KVM adds per
    /// domcaps.xml"): what `check='partial'` compares with. None without capabilities.
    pub(crate) full: Option<(ClusterHost, String)>,
    /// What KVM gives a guest: domcapabilities' host-model CPU, and its file, else (a host as
    /// found) QEMU's KVM host CPU of the capability cache decoded as libvirt decodes it into
    /// that CPU: what a CPU QEMU builds under `check='full'` cannot exceed. None when neither.
    pub(crate) host_model: Option<(ClusterHost, String)>,
    /// What libvirt's "full" host CPU is made of: the host's own CPU, its `<signature>`, and the
    /// host-model CPU whose features it lists; None without the host's own CPU.
    full_of: Option<FullOf>,
    /// The features that CPU lists ([`Loaded::full_listed`]), decoded on first need: only a
    /// guest that forbids a feature asks, and a fleet judges many classes of hosts.
    full_listed: OnceLock<Option<BTreeSet<String>>>,
}

/// The host's own CPU, its `<signature>` (family, model, stepping) and the host-model CPU: what
/// libvirt's "full" host CPU is made of.
type FullOf = (CpuDef, Option<(u32, u32, u32)>, Option<CpuDef>);

impl Loaded {
    /// The features libvirt's "full" host CPU lists by name, where `virCPUCheckForbiddenFeatures`
    /// looks a forbidden feature up ([`full_listed`]), decoded with `map` on first need; None
    /// without the host's own CPU.
    pub(crate) fn full_listed(&self, map: &X86Map) -> Option<&BTreeSet<String>> {
        self.full_listed
            .get_or_init(|| {
                let (physical, signature, host_model) = self.full_of.as_ref()?;
                full_listed(map, physical, *signature, host_model.as_ref())
            })
            .as_ref()
    }
}

impl KvmStartHost<'_> {
    /// The map and host CPUs, loaded now if they were not; None when the cpu_map cannot be
    /// read (its own findings say so).
    pub(crate) fn loaded(&self) -> Option<(&X86Map, &Loaded)> {
        // The host's map: loaded once for this comparison and the decoding of this machine's
        // CPU ([`Host::host_cpu`]).
        let map = self.host.x86_map().ok()?;
        let loaded = self
            .loaded
            .get_or_init(|| {
                let domcaps = self.domcaps;
                let physical = self
                    .host
                    .host_cpu()
                    .filter(|c| {
                        crate::libvirt::arch::host_cpu_serves(&self.arch, c.value.arch.as_deref())
                    })
                    // A host CPU naming no model carries no CPUID facts to compare with.
                    .filter(|c| c.value.model.is_some());
                // What QEMU's KVM adds to the CPUID: domcapabilities' host-model CPU, else (a
                // host as found) QEMU's own word in this machine's capability cache.
                let given =
                    domcaps.and_then(|d| d.host_model.as_ref().map(|hm| (hm, d.source.as_str())));
                // What KVM gives, as found: the same word of QEMU's, decoded as libvirt decodes
                // it into domcapabilities' host-model CPU.
                let cached = match given {
                    None => self
                        .kvm_cpu_from_cache(map, physical.and_then(|p| p.value.vendor.as_deref())),
                    Some(_) => None,
                };
                let adds = given.or_else(|| cached.as_ref().map(|(c, s)| (c, s.as_str())));
                let full = physical.map(|physical| {
                    let source = match adds {
                        Some((_, d)) => format!(
                            "{}, with the features QEMU's KVM adds per {d}",
                            physical.source
                        ),
                        None => physical.source.clone(),
                    };
                    let host = ClusterHost::started_kvm_compare(
                        "this host",
                        &physical.source,
                        &physical.value,
                        adds.map(|(hm, _)| hm),
                        map,
                    );
                    (host, source)
                });
                let host_model = domcaps
                    .map(|d| (ClusterHost::from_domcaps("this host", d), d.source.clone()))
                    .or_else(|| {
                        let (cpu, source) = cached.as_ref()?;
                        let cpu = CpuDef {
                            arch: Some(self.arch.clone()),
                            ..cpu.clone()
                        };
                        Some((
                            ClusterHost::of_host_model("this host", source, cpu),
                            source.clone(),
                        ))
                    });
                let full_of = physical.map(|p| {
                    (
                        p.value.clone(),
                        self.host.host_cpu_signature(),
                        adds.map(|(hm, _)| hm.clone()),
                    )
                });
                Some(Loaded {
                    full,
                    host_model,
                    full_of,
                    full_listed: OnceLock::new(),
                })
            })
            .as_ref()?;
        Some((map, loaded))
    }

    /// QEMU's KVM host CPU from this machine's QEMU capability cache ([`Host::kvm_host_cpu_from_cache`]),
    /// decoded as libvirt decodes it into domcapabilities' host-model CPU
    /// (`virQEMUCapsInitCPUModelX86`: the true properties as CPUID data, then `x86Decode` with
    /// the host's `vendor`), and where it came from; None without a fresh cache file or a model
    /// that decodes it.
    fn kvm_cpu_from_cache(&self, map: &X86Map, vendor: Option<&str>) -> Option<(CpuDef, String)> {
        self.host
            .kvm_cpu_decoded(&self.arch, self.emulator.as_deref(), vendor, || {
                self.decode_kvm_cpu(map, vendor)
            })
            .map(|c| (c.value, c.source))
    }

    /// [`KvmStartHost::kvm_cpu_from_cache`]'s decoding, made once per run.
    fn decode_kvm_cpu(&self, map: &X86Map, vendor: Option<&str>) -> Option<Sourced<CpuDef>> {
        let cpu = self
            .host
            .kvm_host_cpu_from_cache(&self.arch, self.emulator.as_deref())?;
        let mut data = map.empty_data();
        for name in &cpu.value {
            // QEMU's spellings (`lahf-lm`); a property libvirt has no feature for is not CPUID.
            let name = normalize_feature(name).unwrap_or_else(|| name.clone());
            if let Some(f) = map.feature(&name) {
                data.add(&f.data);
            }
        }
        let decoded = decode(map, &data, vendor, &[], &BaselineOptions::default()).ok()?;
        // The model's features QEMU's KVM lacks are disabled, as in domcapabilities'
        // host-model CPU (`pni` on a nested host): what KVM does not give.
        let features = (decoded
            .require
            .into_iter()
            .map(|f| (f, FeaturePolicy::Require)))
        .chain(
            decoded
                .disable
                .into_iter()
                .map(|f| (f, FeaturePolicy::Disable)),
        );
        Some(Sourced {
            value: CpuDef {
                model: Some(decoded.model),
                vendor: decoded.vendor,
                features: features.collect(),
                ..CpuDef::default()
            },
            source: cpu.source,
        })
    }
}

/// The facts for this module's checks, gathered for an x86 KVM domain (whatever its CPU: a
/// rewrite may write a model into it) on a host whose capabilities give its CPU (or whose own
/// CPU can be decoded) or whose domcapabilities give KVM's host-model CPU, and whose cpu_map is
/// libvirt's own directory; None otherwise ([`missing`] says why). Nothing is loaded here.
#[must_use]
pub fn gather<'h>(dom: &Domain<'_>, host: &'h Host) -> Option<KvmStartHost<'h>> {
    if dom.virt_type() != "kvm" || !is_x86(dom.arch()) {
        return None;
    }
    // Gathered whatever the CPU: a rewrite may write a model (QEMU's default one, for a level)
    // into a CPU that had none. Nothing is decoded or loaded here.
    // Whether the host's own CPU can be known, without decoding this machine's CPUID now.
    let physical = host.may_know_host_cpu(dom.arch());
    let domcaps = host
        .domcaps_for(dom.arch(), "kvm", dom.machine())
        .filter(|d| d.host_model.is_some());
    if !physical && domcaps.is_none() {
        return None;
    }
    // libvirt's cpu_map directory, loaded on first use ([`Host::x86_map`]).
    host.cpu_map_dir.as_ref()?;
    Some(KvmStartHost {
        host,
        arch: dom.arch().to_owned(),
        domcaps,
        emulator: dom.emulator(),
        loaded: OnceLock::new(),
    })
}

/// Why [`gather`] found nothing to compare the x86 KVM domain `dom`'s custom CPU with, as a
/// phrase naming the missing fact (for `not-compared`): libvirt's cpu_map not in use, or
/// neither the host's own CPU nor KVM's host-model CPU known. Decodes nothing: [`gather`]
/// answered when this machine's CPU could be decoded.
#[must_use]
pub fn missing(dom: &Domain<'_>, host: &Host) -> Option<String> {
    if host.cpu_map_dir.is_none() {
        return Some(format!(
            "libvirt's cpu_map is not in use ({}), and the comparison is made on its CPUID data",
            host.cpu_map_note
                .as_deref()
                .unwrap_or("the built-in table has no CPUID data")
        ));
    }
    let own = if host.may_know_host_cpu(dom.arch()) {
        host.host_cpu_unknown()
            .unwrap_or("of another arch")
            .to_string()
    } else {
        host.host_cpu_unknown()
            .unwrap_or("no capabilities host CPU given")
            .to_string()
    };
    Some(format!(
        "the host's own CPU is not known: {own}; nor is what KVM gives: no kvm domcapabilities with a host-model CPU"
    ))
}

/// The features libvirt's "full" host CPU lists by name (`virQEMUCapsInitHostCPUModel`, x86
/// under KVM: this host's CPUID decoded as a guest CPU, `virCPUGetHost(VIR_CPU_TYPE_GUEST)`, so a
/// model with features disabled may win, then every feature of the host-model CPU `host_model`
/// expanded, `virCPUExpandFeatures`, made `require`): the features its model holds are not
/// listed. `virCPUCheckForbiddenFeatures` (libvirt 9.0 and later, before the comparison) looks a
/// forbidden feature up in this list only ("Host CPU provides forbidden feature 'lm'"); one the
/// model holds is found by the comparison instead, in its words ("Host CPU provides forbidden
/// features: avx512f"). Seen: on an AMD EPYC whose CPUID decodes to no EPYC model of libvirt
/// 9.0's cpu_map, `avx512f` is listed (9.0: the first words); libvirt 11.3 and 12.8 decode it as
/// `EPYC-Genoa`, whose `<signature>` is the CPU's (`signature`, preferred by the decoding) and
/// which holds `avx512f` (the second); `lm`, in the host-model CPU's model, listed on all three.
/// None when `physical` cannot be decoded with `map`.
fn full_listed(
    map: &X86Map,
    physical: &CpuDef,
    signature: Option<(u32, u32, u32)>,
    host_model: Option<&CpuDef>,
) -> Option<BTreeSet<String>> {
    use crate::cpu::baseline::{Select, cpu_data};
    let here = std::path::Path::new("the host's CPU");
    let data = cpu_data(map, physical, Select::All, here).ok()?;
    let decoded =
        crate::cpu::baseline::decode_signed(map, &data, physical.vendor.as_deref(), signature)
            .ok()?;
    let mut listed: BTreeSet<String> = decoded.require.into_iter().collect();
    if let Some(hm) = host_model {
        let expanded = cpu_data(map, hm, Select::All, here).ok()?;
        listed.extend(map.feature_names(&expanded).into_iter().map(str::to_owned));
    }
    Some(listed)
}
