//! A cluster put together: the baseline every host can run, each host's psABI level and what it
//! lacks for the next ones, and the groups of hosts whose CPUs are identical.
//!
//! * x86: [`crate::cpu::baseline`] on the hosts' CPUs, restricted to the models every host with
//!   domcapabilities lists `usable='yes'`. The cluster's level is the lowest host level (a level
//!   is reached when every one of its features is there, so the common features reach exactly
//!   the lowest host's level).
//! * Other arches (aarch64): no custom model is migration-safe under KVM (libvirt has no
//!   `host-model` there and QEMU's named Arm models do not run under KVM), so there is no
//!   baseline: a `host-passthrough` guest may only migrate between hosts whose CPU is identical,
//!   and [`ClusterReport::groups`] lists those groups.
//!
//! Groups are given for x86 too: identical vendor and CPUID data, where a `host-passthrough`
//! guest can move as well.

use super::hosts::{ClusterHost, CpuOrigin};
use crate::cpu::CpuError;
use crate::cpu::Level;
use crate::cpu::baseline::{
    Baseline, BaselineOptions, InputCpu, Select, baseline, cpu_data, leave_out_kvm_never,
};
use crate::libvirt::arch::is_x86;
use crate::libvirt::cpu_map::x86::{CpuData, X86Map};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// How to compute a cluster report.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClusterOptions {
    /// Drop `migratable='no'` features (`invtsc`) from the baseline (`virsh cpu-baseline
    /// --migratable`).
    pub migratable: bool,
    /// Refuse hosts of different vendors as libvirt does, instead of a vendor-neutral result.
    pub strict_vendor: bool,
}

/// One host in a report.
#[derive(Debug, Clone)]
pub struct HostReport {
    /// The host's name.
    pub name: String,
    /// Its facts file.
    pub source: PathBuf,
    /// Where its CPU came from.
    pub origin: Option<CpuOrigin>,
    /// Its CPU's model and vendor as the facts name them.
    pub model: Option<String>,
    /// Its vendor.
    pub vendor: Option<String>,
    /// The highest psABI level its CPU reaches (x86 only; None below x86-64-v1 or off x86).
    pub level: Option<Level>,
    /// For each level above `level`: the level's features the host lacks, in the level table's
    /// order.
    pub lacks: BTreeMap<Level, Vec<String>>,
}

/// What [`analyze`] found.
#[derive(Debug, Clone)]
pub struct ClusterReport {
    /// The hosts' arch (`x86_64`, `aarch64`...).
    pub arch: String,
    /// The hosts, in the order given.
    pub hosts: Vec<HostReport>,
    /// The x86 baseline; None off x86.
    pub baseline: Option<Baseline>,
    /// The baseline's features ([`Baseline::effective_features`]); empty off x86.
    pub features: Vec<String>,
    /// The level every host reaches (the lowest host's); None off x86 or below x86-64-v1.
    pub level: Option<Level>,
    /// Hosts whose CPUs are identical, in order of first appearance; a host whose CPU is
    /// unknown is alone.
    pub groups: Vec<Vec<String>>,
    /// The hosts whose domcapabilities restricted the models (none: no restriction).
    pub usable_from: Vec<String>,
    /// Baseline features libvirt marks `migratable='no'`: a guest with them cannot be
    /// live-migrated (use [`ClusterOptions::migratable`]).
    pub non_migratable: Vec<String>,
    /// Machine types every host lists, when every host lists some.
    pub machines: Option<BTreeSet<String>>,
    /// Hosts with no known CPU (aarch64 domcapabilities): each is its own group.
    pub unknown_cpu: Vec<String>,
    /// The cpu_map used (x86).
    pub cpu_map: Option<PathBuf>,
    /// Features of a host's CPU the cpu_map in use does not define, left out of that host's CPU
    /// (host name, features): a newer libvirt's names, which a host whose libvirt has this
    /// cpu_map could never give a guest, so the baseline cannot hold them anyway. libvirt itself
    /// stops on them ("Unknown CPU feature"); the tool says them and goes on.
    pub left_out: Vec<(String, Vec<String>)>,
    /// Hosts whose libvirt limits the models the baseline may name (host name, how many models
    /// the other hosts' libvirts know that it does not, a few of them): from the models each
    /// host's domcapabilities list, usable or not.
    pub model_limits: Vec<(String, usize, Vec<String>)>,
    /// The features KVM never gives a guest ([`crate::cpu::KVM_NEVER_GIVES`]) the hosts' common
    /// CPU has, left out of the baseline because a host is known only by its physical CPU; None
    /// when nothing was left out (always when every host has domcapabilities, whose
    /// `host-model` never lists them).
    pub kvm_left_out: Option<KvmLeftOut>,
    /// The features QEMU derives from a guest's vCPU topology
    /// ([`crate::cpu::baseline::QEMU_TOPOLOGY_FEATURES`]) the hosts' common CPU required, left out
    /// of the baseline (a guest of one vCPU does not keep them on QEMU 10.0.1 and later); empty
    /// when it had none.
    pub topology_left_out: Vec<String>,
    /// `arch-capabilities` and its bits, left out of an AMD cluster's baseline
    /// ([`crate::cpu::baseline::leave_out_arch_capabilities`]); empty when it had none.
    pub arch_capabilities_left_out: Vec<String>,
}

/// The sentence of [`ClusterReport::arch_capabilities_left_out`] for reports and explanations.
#[must_use]
pub fn arch_capabilities_sentence(features: &[String]) -> String {
    format!(
        "left out of the baseline: {}: on AMD hosts QEMU before 10.1 aborts a guest whose CPU carries them (\"failed to set MSR 0x10a\"), and QEMU 10.1 leaves them out by default",
        features.join(", ")
    )
}

/// The sentence of [`ClusterReport::topology_left_out`] for reports and explanations.
#[must_use]
pub fn topology_sentence(features: &[String]) -> String {
    format!(
        "left out of the baseline: {}: QEMU sets them from each guest's vCPU topology (QEMU 10.0.1 and later leave them out of a guest of one vCPU, and the hook's started check would find them missing), so a cluster CPU does not require them",
        features.join(", ")
    )
}

/// What [`ClusterReport::kvm_left_out`] took out of a baseline, and because of which hosts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KvmLeftOut {
    /// The features (libvirt names, map order): the baseline had them, a guest gets none.
    pub features: Vec<String>,
    /// The hosts known only by their physical CPU (`virsh capabilities` or a bare host `<cpu>`,
    /// no domcapabilities `host-model`), in the order given.
    pub hosts: Vec<String>,
}

impl KvmLeftOut {
    /// One sentence for reports and explanations: the features, why, and the hosts.
    #[must_use]
    pub fn sentence(&self) -> String {
        format!(
            "left out of the baseline: {}: KVM never gives a guest these (Linux's KVM_GET_SUPPORTED_CPUID has none of them; libvirt calls a guest CPU requiring one incompatible: \"Host CPU does not provide required features\"), and host(s) {} are known only by their physical CPU (virsh capabilities), which lists them; give each host's virsh domcapabilities (a <hostFacts>) for a baseline of exactly what KVM gives",
            self.features.join(", "),
            self.hosts.join(", ")
        )
    }
}

impl ClusterReport {
    /// The hosts that do not reach `level`, each with the level's features it lacks.
    #[must_use]
    pub fn blocking(&self, level: Level) -> Vec<(&str, &[String])> {
        self.hosts
            .iter()
            .filter_map(|h| h.lacks.get(&level).map(|l| (h.name.as_str(), l.as_slice())))
            .collect()
    }
}

/// Puts the cluster of `hosts` together. `map` is needed for x86 hosts.
///
/// # Errors
/// [`CpuError::MixedArch`] for hosts of several arches; for x86: a host without a CPU
/// ([`CpuError::Facts`]), unknown models, features or vendors, and no common CPU
/// ([`CpuError::Incompatible`]).
pub fn analyze(
    hosts: &[ClusterHost],
    map: Option<&X86Map>,
    opts: &ClusterOptions,
) -> Result<ClusterReport, CpuError> {
    let Some(first) = hosts.first() else {
        return Err(CpuError::NoHosts);
    };
    let arch = first.arch.clone();
    if hosts.iter().any(|h| h.arch != arch) {
        let list: Vec<String> = hosts
            .iter()
            .map(|h| format!("{} ({})", h.name, h.arch))
            .collect();
        return Err(CpuError::MixedArch(list.join(", ")));
    }
    let mut report = ClusterReport {
        arch: arch.clone(),
        hosts: hosts
            .iter()
            .map(|h| HostReport {
                name: h.name.clone(),
                source: h.path.clone(),
                origin: h.origin,
                model: h.cpu.as_ref().and_then(|c| c.model.clone()),
                vendor: h.cpu.as_ref().and_then(|c| c.vendor.clone()),
                level: None,
                lacks: BTreeMap::new(),
            })
            .collect(),
        baseline: None,
        features: Vec::new(),
        level: None,
        groups: Vec::new(),
        usable_from: Vec::new(),
        non_migratable: Vec::new(),
        machines: common_machines(hosts),
        unknown_cpu: hosts
            .iter()
            .filter(|h| h.cpu.is_none())
            .map(|h| h.name.clone())
            .collect(),
        cpu_map: None,
        left_out: Vec::new(),
        model_limits: model_limits(hosts),
        kvm_left_out: None,
        topology_left_out: Vec::new(),
        arch_capabilities_left_out: Vec::new(),
    };
    match (is_x86(&arch), map) {
        (true, Some(map)) => x86(&mut report, hosts, map, *opts)?,
        (true, None) => {
            return Err(CpuError::Incompatible(
                "x86 hosts need libvirt's cpu_map".into(),
            ));
        }
        (false, _) => {
            let keys = hosts.iter().map(|h| {
                h.cpu.as_ref().map(|c| {
                    let mut f: Vec<&str> = c.features.iter().map(|(n, _)| n.as_str()).collect();
                    f.sort_unstable();
                    format!("{:?} {:?} {f:?}", c.model, c.vendor)
                })
            });
            report.groups = groups(hosts, keys);
        }
    }
    Ok(report)
}

/// The x86 part of [`analyze`]: each host's level and what it lacks, the groups of identical
/// CPUs, and libvirt's baseline restricted to the models every host can use.
fn x86(
    report: &mut ClusterReport,
    hosts: &[ClusterHost],
    map: &X86Map,
    opts: ClusterOptions,
) -> Result<(), CpuError> {
    report.cpu_map = Some(map.source().to_owned());
    let (datas, left_out) = host_data(hosts, map)?;
    report.left_out = left_out;
    host_levels(report, map, &datas);
    let keys = hosts.iter().zip(&datas).map(|(h, data)| {
        let vendor = h.cpu.as_ref().and_then(|c| c.vendor.as_deref());
        Some(format!("{vendor:?} {data:?}"))
    });
    report.groups = groups(hosts, keys);
    let usable = usable_models(report, hosts);
    let inputs: Vec<InputCpu<'_>> = hosts
        .iter()
        .zip(datas)
        .map(|(h, data)| {
            let cpu = h.cpu.as_ref();
            InputCpu {
                model: cpu.and_then(|c| c.model.as_deref()),
                vendor: cpu.and_then(|c| c.vendor.as_deref()),
                data,
            }
        })
        .collect();
    let mut b = baseline(
        map,
        &inputs,
        &BaselineOptions {
            usable: usable.as_ref(),
            migratable: opts.migratable,
            vendor_neutral: !opts.strict_vendor,
        },
    )
    .map_err(|e| naming_the_hosts(report, e))?;
    leave_out_what_guests_lose(report, hosts, map, &mut b);
    report.features = b
        .effective_features(map)
        .into_iter()
        .map(str::to_owned)
        .collect();
    report.non_migratable = b
        .cpu
        .require
        .iter()
        .filter(|f| map.feature(f).is_some_and(|f| !f.migratable))
        .cloned()
        .collect();
    report.baseline = Some(b);
    Ok(())
}

/// `e` from libvirt's baseline, an incompatibility naming each host's CPU: libvirt's sentence
/// names no host, and the operator needs to know which differ.
fn naming_the_hosts(report: &ClusterReport, e: CpuError) -> CpuError {
    match e {
        CpuError::Incompatible(why) => {
            let cpus: Vec<String> = report
                .hosts
                .iter()
                .map(|h| {
                    let model = h.model.as_deref().unwrap_or("no model");
                    let vendor = h.vendor.as_deref().unwrap_or("no vendor");
                    format!("{}: {model}, {vendor}", h.name)
                })
                .collect();
            CpuError::Incompatible(format!("{why} (hosts {})", cpus.join("; ")))
        }
        e => e,
    }
}

/// Takes out of baseline `b` what a guest given it would not keep, and says so in `report`:
/// with hosts known by their physical CPU (not domcapabilities' host-model), what KVM never
/// gives a guest ([`ClusterReport::kvm_left_out`]); the features QEMU derives from a guest's
/// topology ([`ClusterReport::topology_left_out`]); on AMD, `arch-capabilities`
/// ([`ClusterReport::arch_capabilities_left_out`]).
fn leave_out_what_guests_lose(
    report: &mut ClusterReport,
    hosts: &[ClusterHost],
    map: &X86Map,
    b: &mut Baseline,
) {
    let physical: Vec<String> = hosts
        .iter()
        .filter(|h| h.origin != Some(CpuOrigin::HostModel))
        .map(|h| h.name.clone())
        .collect();
    if !physical.is_empty() {
        let features = leave_out_kvm_never(map, b);
        if !features.is_empty() {
            report.kvm_left_out = Some(KvmLeftOut {
                features,
                hosts: physical,
            });
        }
    }
    report.topology_left_out = crate::cpu::baseline::leave_out_topology(b);
    let vendor = b.cpu.vendor.clone().or_else(|| {
        // The hosts' one vendor when the baseline does not name it (not every host did).
        let mut v = hosts.iter().filter_map(|h| h.cpu.as_ref()?.vendor.clone());
        let first = v.next()?;
        v.all(|x| x == first).then_some(first)
    });
    report.arch_capabilities_left_out =
        crate::cpu::baseline::leave_out_arch_capabilities(b, vendor.as_deref());
}

/// Each host's CPU as CPUID data, in the hosts' order, and the features each host's CPU names
/// that the cpu_map does not define, left out of its data ([`ClusterReport::left_out`]).
///
/// # Errors
/// A host without a CPU, or whose vendor or model the cpu_map does not know.
#[allow(clippy::type_complexity)]
fn host_data(
    hosts: &[ClusterHost],
    map: &X86Map,
) -> Result<(Vec<CpuData>, Vec<(String, Vec<String>)>), CpuError> {
    let mut datas: Vec<CpuData> = Vec::new();
    let mut left_out = Vec::new();
    for h in hosts {
        let Some(cpu) = &h.cpu else {
            return Err(CpuError::Facts {
                path: h.path.clone(),
                message: "no host CPU: its domcapabilities have no supported host-model (give virsh capabilities, or both in a <hostFacts>)".into(),
            });
        };
        if cpu.model.is_none() {
            return Err(CpuError::Facts {
                path: h.path.clone(),
                message: "its host CPU names no <model> (libvirt: \"Missing CPU model name\")"
                    .into(),
            });
        }
        if let Some(v) = cpu.vendor.as_ref().filter(|v| !map.has_vendor(v)) {
            return Err(CpuError::UnknownVendor {
                path: h.path.clone(),
                vendor: v.clone(),
                map: map.source().to_owned(),
            });
        }
        let unknown: Vec<String> = cpu
            .features
            .iter()
            .filter(|(f, _)| map.feature(f).is_none())
            .map(|(f, _)| f.clone())
            .collect();
        if unknown.is_empty() {
            datas.push(cpu_data(map, cpu, Select::All, &h.path)?);
        } else {
            let mut known = cpu.clone();
            known.features.retain(|(f, _)| !unknown.contains(f));
            datas.push(cpu_data(map, &known, Select::All, &h.path)?);
            left_out.push((h.name.clone(), unknown));
        }
    }
    Ok((datas, left_out))
}

/// The host (or hosts, on a tie) whose libvirt limits the models most
/// ([`ClusterReport::model_limits`]): of the hosts with domcapabilities, the one lacking the most
/// models another host's domcapabilities list. Empty when every such host lists the same models.
fn model_limits(hosts: &[ClusterHost]) -> Vec<(String, usize, Vec<String>)> {
    let all: BTreeSet<&String> = hosts
        .iter()
        .filter_map(|h| h.known_models.as_ref())
        .flatten()
        .collect();
    let lacking: Vec<(String, Vec<String>)> = hosts
        .iter()
        .filter_map(|h| {
            let known = h.known_models.as_ref()?;
            let lacks: Vec<String> = all
                .iter()
                .filter(|m| !known.contains(**m))
                .map(|m| (*m).clone())
                .collect();
            Some((h.name.clone(), lacks))
        })
        .collect();
    let most = lacking.iter().map(|(_, l)| l.len()).max().unwrap_or(0);
    lacking
        .into_iter()
        .filter(|(_, l)| most > 0 && l.len() == most)
        .map(|(name, l)| (name, most, l.into_iter().take(4).collect()))
        .collect()
}

/// Each host's highest level and, for every level above it, the features it lacks; the
/// cluster's level is the lowest host's.
fn host_levels(report: &mut ClusterReport, map: &X86Map, datas: &[CpuData]) {
    for (r, data) in report.hosts.iter_mut().zip(datas) {
        r.level = Level::highest(|f| map.has_feature(data, f));
        for level in Level::ALL.into_iter().filter(|l| Some(*l) > r.level) {
            let lacks = level
                .features()
                .into_iter()
                .filter(|f| !map.has_feature(data, f))
                .map(str::to_owned)
                .collect();
            r.lacks.insert(level, lacks);
        }
    }
    report.level = report.hosts.iter().map(|h| h.level).min().flatten();
}

/// The models every host with domcapabilities lists as usable (None: no host lists any), and
/// those hosts' names in [`ClusterReport::usable_from`].
fn usable_models(report: &mut ClusterReport, hosts: &[ClusterHost]) -> Option<BTreeSet<String>> {
    let mut usable: Option<BTreeSet<String>> = None;
    for h in hosts {
        if let Some(u) = &h.usable_models {
            report.usable_from.push(h.name.clone());
            usable = Some(match usable {
                None => u.clone(),
                Some(all) => all.intersection(u).cloned().collect(),
            });
        }
    }
    usable
}

/// Hosts grouped by their CPU identity `keys` (one per host; None: alone), groups in order of
/// first appearance.
fn groups(hosts: &[ClusterHost], keys: impl Iterator<Item = Option<String>>) -> Vec<Vec<String>> {
    let mut out: Vec<(Option<String>, Vec<String>)> = Vec::new();
    for (h, k) in hosts.iter().zip(keys) {
        match out.iter_mut().find(|(g, _)| k.is_some() && *g == k) {
            Some((_, names)) => names.push(h.name.clone()),
            None => out.push((k, vec![h.name.clone()])),
        }
    }
    out.into_iter().map(|(_, names)| names).collect()
}

/// The machine types every host lists, when every host lists some.
fn common_machines(hosts: &[ClusterHost]) -> Option<BTreeSet<String>> {
    let mut all: Option<BTreeSet<String>> = None;
    for h in hosts {
        if h.machines.is_empty() {
            return None;
        }
        all = Some(match all {
            None => h.machines.clone(),
            Some(a) => a.intersection(&h.machines).cloned().collect(),
        });
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::hosts::read_hosts;
    use crate::testdata::corpus;

    #[test]
    #[cfg_attr(
        not(vcp_shared_corpus),
        ignore = "needs ../shared/corpus beside the checkout"
    )]
    fn aarch64_groups_from_the_corpus() {
        let c = corpus("");
        let hosts = read_hosts(&[
            c.join("virt-manager/capabilities/kvm-aarch64.xml"),
            c.join("libvirt-domaincapsdata/qemu_11.0.0-virt.aarch64.xml"),
            c.join("libvirt-domaincapsdata/qemu_11.1.0-virt.aarch64.xml"),
        ])
        .unwrap();
        let r = analyze(&hosts, None, &ClusterOptions::default()).unwrap();
        assert_eq!(r.arch, "aarch64");
        assert!(r.baseline.is_none() && r.level.is_none());
        assert_eq!(r.groups.len(), 3, "{:?}", r.groups);
        assert_eq!(r.unknown_cpu.len(), 2);
    }

    #[test]
    #[cfg_attr(
        not(vcp_shared_corpus),
        ignore = "needs ../shared/corpus beside the checkout"
    )]
    fn mixed_arches_are_refused() {
        let c = corpus("");
        let hosts = read_hosts(&[
            c.join("virt-manager/capabilities/kvm-aarch64.xml"),
            c.join("libvirt-cputestdata/x86_64-cpuid-Xeon-E5-2650-v4-host.xml"),
        ])
        .unwrap();
        let e = analyze(&hosts, None, &ClusterOptions::default()).unwrap_err();
        assert!(matches!(e, CpuError::MixedArch(_)), "{e}");
        assert!(e.to_string().contains("kvm-aarch64 (aarch64)"), "{e}");
    }

    #[test]
    #[cfg_attr(
        not(vcp_shared_corpus),
        ignore = "needs ../shared/corpus beside the checkout"
    )]
    fn levels_blockers_and_groups() {
        let c = corpus("");
        let map = X86Map::load(&crate::testdata::cpu_map()).unwrap();
        let d = c.join("libvirt-cputestdata");
        let hosts = read_hosts(&[
            d.join("x86_64-cpuid-Xeon-E5-2650-v4-host.xml"),
            d.join("x86_64-cpuid-Core-i7-3770-host.xml"),
            d.join("x86_64-cpuid-Xeon-E5-2650-v4-host.xml"),
        ]);
        // The same file twice names the same host twice.
        assert!(hosts.unwrap_err().to_string().contains("one file per host"));
        let hosts = read_hosts(&[
            d.join("x86_64-cpuid-Xeon-E5-2650-v4-host.xml"),
            d.join("x86_64-cpuid-Core-i7-3770-host.xml"),
            d.join("x86_64-cpuid-Core2-E6850-host.xml"),
        ])
        .unwrap();
        let r = analyze(&hosts, Some(&map), &ClusterOptions::default()).unwrap();
        let levels: Vec<Option<Level>> = r.hosts.iter().map(|h| h.level).collect();
        assert_eq!(levels, [Some(Level::V3), Some(Level::V2), Some(Level::V1)]);
        assert_eq!(r.level, Some(Level::V1));
        let v2 = r.blocking(Level::V2);
        assert_eq!(v2.len(), 1);
        assert_eq!(v2[0].0, "x86_64-cpuid-Core2-E6850-host");
        assert!(v2[0].1.contains(&"sse4.2".to_string()));
        assert_eq!(r.blocking(Level::V3).len(), 2);
        assert_eq!(r.groups.len(), 3);
        assert!(
            r.hosts[0]
                .lacks
                .get(&Level::V4)
                .is_some_and(|l| l.contains(&"avx512f".into()))
        );
        // The Core2 lacks invtsc; the Xeon alone has it, and a guest with it cannot migrate.
        assert!(r.non_migratable.is_empty());
        let xeon = || read_hosts(&[d.join("x86_64-cpuid-Xeon-E5-2650-v4-host.xml")]).unwrap();
        let one = analyze(&xeon(), Some(&map), &ClusterOptions::default()).unwrap();
        assert_eq!(one.non_migratable, ["invtsc"]);
        assert!(one.features.contains(&"invtsc".into()));
        let opts = ClusterOptions {
            migratable: true,
            ..ClusterOptions::default()
        };
        let m = analyze(&xeon(), Some(&map), &opts).unwrap();
        assert!(m.non_migratable.is_empty() && !m.features.contains(&"invtsc".into()));
    }

    /// Hosts known only by their physical CPU: the features KVM never gives a guest go from the
    /// baseline (required ones dropped, the model's own disabled), named with the hosts; with
    /// domcapabilities nothing changes (their host-model lists none of them).
    #[test]
    #[cfg_attr(
        not(vcp_shared_corpus),
        ignore = "needs ../shared/corpus beside the checkout"
    )]
    fn kvm_never_features_are_left_out_for_physical_cpus_only() {
        use crate::cpu::kvm_never_gives;
        let root = corpus("");
        let map = X86Map::load(&crate::testdata::cpu_map()).unwrap();
        let data = root.join("libvirt-cputestdata");
        let read = |files: &[&str]| {
            let paths: Vec<PathBuf> = files.iter().map(|f| root.join(f)).collect();
            let hosts = read_hosts(&paths).unwrap();
            analyze(&hosts, Some(&map), &ClusterOptions::default()).unwrap()
        };
        // Two Core 2: libvirt's cpu-baseline says core2duo, whose own `monitor` KVM never gives.
        let core2 = read(&[
            "libvirt-cputestdata/x86_64-cpuid-Core2-Q9500-host.xml",
            "libvirt-cputestdata/x86_64-cpuid-Core2-E6850-host.xml",
        ]);
        let base = core2.baseline.as_ref().unwrap();
        assert_eq!(base.cpu.model, "core2duo");
        assert_eq!(base.cpu.disable, ["monitor"]);
        assert_eq!(base.cpu.require, ["ss", "vmx", "cx16", "pdcm", "lahf_lm"]);
        let left = core2.kvm_left_out.as_ref().unwrap();
        assert_eq!(
            left.features,
            [
                "ds", "acpi", "ht", "tm", "pbe", "dtes64", "monitor", "ds_cpl", "est", "tm2",
                "xtpr"
            ]
        );
        assert_eq!(
            left.hosts,
            [
                "x86_64-cpuid-Core2-Q9500-host",
                "x86_64-cpuid-Core2-E6850-host"
            ]
        );
        assert!(core2.features.iter().all(|f| !kvm_never_gives(f)));
        assert!(core2.features.contains(&"vmx".to_string()));
        // Every real CPU alone: nothing KVM never gives is left in its baseline.
        let mut dropped = 0;
        for e in std::fs::read_dir(&data).unwrap() {
            let p = e.unwrap().path();
            if !p.to_string_lossy().ends_with("-host.xml") {
                continue;
            }
            let hosts = read_hosts(&[p]).unwrap();
            // Some name models or features of a newer libvirt than this cpu_map's.
            let Ok(r) = analyze(&hosts, Some(&map), &ClusterOptions::default()) else {
                continue;
            };
            assert!(
                r.features.iter().all(|f| !kvm_never_gives(f)),
                "{:?}",
                r.hosts[0].name
            );
            dropped += usize::from(r.kvm_left_out.is_some());
        }
        assert!(dropped >= 15, "{dropped}");
        // Domcapabilities only, and a physical CPU beside one: nothing to leave out.
        for files in [
            &[
                "libvirt-domaincapsdata/qemu_7.2.0-q35.x86_64.xml",
                "libvirt-domaincapsdata/qemu_8.0.0.x86_64.xml",
            ][..],
            &[
                "libvirt-cputestdata/x86_64-cpuid-Core2-E6850-host.xml",
                "host-libvirt-9.0-qemu-7.2/domcapabilities-x86_64-q35-kvm.xml",
            ][..],
        ] {
            let report = read(files);
            assert!(report.kvm_left_out.is_none(), "{files:?}");
            assert!(
                report.features.iter().all(|f| !kvm_never_gives(f)),
                "{files:?}"
            );
        }
    }
}
