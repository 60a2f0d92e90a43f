//! Can this host run that guest as it is: the one judge of a destination, used by the hook on
//! `migrate begin` and `restore begin` (this host's facts) and by `virt-cpu-policy fleet` (each
//! host's own facts, for every guest of the fleet).
//!
//! A guest runs on a host when libvirt there defines and starts it (for a running guest: takes
//! it by live migration, which keeps its CPU: libvirt refuses any ABI change). The judge is the
//! guest's [`Pipeline`] with the host's facts: [`crate::validate::validate`] (what libvirt or
//! QEMU there would refuse: a mode that host does not offer, a model or feature its libvirt does
//! not know, a machine type its QEMU lacks, a vCPU maximum above its limits), the machine type
//! against the host's capabilities, and the guest's custom CPU compared with the host's
//! host-model CPU for the guest's virt type, or for a KVM guest on a host known only by `virsh
//! capabilities`, with its physical CPU less what KVM never gives a guest
//! ([`crate::cpu::compare`], libvirt's `x86Compute`: what libvirt checks when it starts a
//! `check='partial'` guest). Findings that
//! come from the policy ([`Code::is_policy`]) are not a question of the host: libvirt keeps the
//! guest's CPU on migrate and restore anyway.

pub mod group;

use crate::cluster::hosts::ClusterHost;
use crate::cluster::hosts::compare;
use crate::cpu::compare::{Comparison, Compatibility};
use crate::domain::Domain;
use crate::domain_facts::DomainFacts;
use crate::finding::{Code, Finding, Severity};
use crate::guest_cpu::guest_cpu_of;
use crate::host::{Host, Sourced};
use crate::libvirt::cpu_def::CpuDef;
use crate::libvirt::cpu_def::{CpuCheck, CpuMode};
use crate::libvirt::cpu_map::x86::X86Map;
use crate::libvirt::domcaps::DomCaps;
use crate::pipeline::Pipeline;
use crate::xml::child;
use roxmltree::Node;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// libvirt's x86 cpu_map as CPUID data ([`X86Map`]), loaded from a directory on first use and
/// kept: the hook loads it at most once per run, `fleet` once per cpu_map for every host that
/// uses it.
#[derive(Debug)]
pub struct CpuMapCache {
    dir: Option<PathBuf>,
    map: OnceLock<Result<X86Map, String>>,
}

impl CpuMapCache {
    /// The cpu_map in `dir` (None: there is none, and nothing can be compared).
    #[must_use]
    pub fn new(dir: Option<&Path>) -> CpuMapCache {
        CpuMapCache {
            dir: dir.map(Path::to_path_buf),
            map: OnceLock::new(),
        }
    }

    /// The map, loaded now if it was not.
    ///
    /// # Errors
    /// Why there is none: no directory, or the loader's sentence (the same each time).
    pub fn get(&self) -> Result<&X86Map, String> {
        let Some(dir) = &self.dir else {
            return Err("libvirt's cpu_map is absent (the compare needs its CPUID data)".into());
        };
        self.map
            .get_or_init(|| X86Map::load(dir).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(Clone::clone)
    }
}

/// How the guest arrives on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// Live migration or restore: the guest keeps the CPU it runs with, so a feature the host
    /// cannot give would be taken from a running guest, whatever `check` says.
    Migration,
    /// Define and start (a stopped guest): with `check='none'` (written, or libvirt's default
    /// for a TCG custom CPU) libvirt does not compare, and QEMU starts the guest without what
    /// the host cannot give (seen on libvirt 7.0 to 12.8: the live XML lists those features
    /// `policy='disable'`).
    Start,
}

/// What comparing the guest's CPU with the host's found.
#[derive(Debug, Clone)]
pub enum CpuCompare {
    /// It runs there: `identical` or `superset`, said in words for the log.
    Runs(String),
    /// It does not: the finding that says why.
    Incompatible(Finding),
    /// Nothing to compare (libvirt compares nothing either: the guest's CPU is not a custom one
    /// with a model, or not x86): why, for the log.
    NotCompared(String),
    /// Not compared for want of a fact libvirt has at arrival (this host's host-model CPU or
    /// capabilities host CPU, its cpu_map, a CPU its cpu_map decodes): why, naming the fact. Not
    /// "runs": `fleet`'s `not-compared` verdict.
    Unknown(String),
}

/// The judge's answer for one guest on one host.
#[derive(Debug, Clone)]
pub struct Judgement {
    /// Everything [`crate::validate::validate`] found, in its order.
    pub findings: Vec<Finding>,
    /// An arch and virt type the host's capabilities do not offer at all ([`arch_missing`]):
    /// then nothing else is said.
    pub arch: Option<Finding>,
    /// A machine type the host's capabilities do not list for the guest's arch and virt type
    /// ([`machine_missing`]), when [`crate::validate::validate`] had nothing to say about it.
    pub machine: Option<Finding>,
    /// The CPU comparison.
    pub cpu: CpuCompare,
}

impl Judgement {
    /// The reasons the host cannot run the guest, in order: the machine type, then the errors
    /// of libvirt's own rules, the host not reaching the guest's level, an unusable model when
    /// the CPUs could not be compared, and what TCG lacks for it likewise (when they could, the
    /// comparison, libvirt's own test, decides: a host-model guest arrives as a model with the
    /// features it lacked disabled), then the CPU comparison. Empty: the guest runs there. An arch
    /// the host does not offer is then the only reason.
    #[must_use]
    pub fn blocking(&self) -> Vec<&Finding> {
        // A guest of an arch the host does not run: its machine type, modes and CPU were
        // judged against facts of another arch, and say nothing more.
        if let Some(a) = &self.arch {
            return vec![a];
        }
        let compared = !matches!(
            self.cpu,
            CpuCompare::NotCompared(_) | CpuCompare::Unknown(_)
        );
        let mut out: Vec<&Finding> = self.machine.iter().collect();
        // What the emulator's TCG lacks for the guest's CPU (`tcg-cpu-missing`) and the
        // validator's start-time comparison of a KVM custom CPU (`cpu-incompatible`,
        // crate::validate::kvm) are the CPU comparison's question too: when the CPUs were
        // compared, the comparison alone answers, so one missing feature is never two reasons.
        // `kvm-check-full` stays: the `hypervisor` bit QEMU adds is no question of the host.
        let cpu_question = |c: Code| {
            matches!(
                c,
                Code::CpuModelUnusable | Code::TcgCpuMissing | Code::CpuIncompatible
            )
        };
        out.extend(self.findings.iter().filter(|f| {
            if cpu_question(f.code) {
                return !compared;
            }
            (f.severity == Severity::Error && !f.code.is_policy())
                || f.code == Code::HostLevel
                // Libvirt starts it; the guest's own kernel stops: no start there runs it.
                || f.code == Code::OsFloor
        }));
        if let CpuCompare::Incompatible(f) = &self.cpu {
            out.push(f);
        }
        out
    }
}

/// Judges the guest of `p` arriving on `host` by `arrival`, comparing CPUs with `map`.
#[must_use]
pub fn judge(p: &Pipeline<'_, '_>, host: &Host, map: &CpuMapCache, arrival: Arrival) -> Judgement {
    let mut findings = crate::validate::validate(p.dom, &p.plan, &p.facts);
    // Said once, as the judgement's `arch`.
    findings.retain(|f| f.code != Code::ArchUnsupported);
    // A running guest's OS booted on the CPU it keeps: its floor is a question for a start only.
    if arrival == Arrival::Migration {
        findings.retain(|f| !crate::validate::is_floor_finding(f));
    }
    let already = findings.iter().any(|f| f.code == Code::MachineUnsupported);
    let machine = (!already).then(|| machine_missing(p.dom, host)).flatten();
    Judgement {
        findings,
        arch: arch_missing(p.dom, host),
        machine,
        cpu: compare_cpu(p.dom, &p.facts, host.host_cpu(), map, arrival),
    }
}

/// The guest's arch and virt type when the host's facts say it runs none of them
/// ([`Host::arch_unsupported`]: capabilities listing guests and none of that arch and type, an
/// x86_64 guest on an aarch64 host, a `kvm` guest of an arch the host only emulates; without
/// capabilities, domcapabilities of no such arch): libvirt refuses the guest at define, "could
/// not find capabilities for arch=x86_64 domaintype=kvm" (`virCapabilitiesDomainDataLookup`).
/// Nothing is said when the facts hold neither.
#[must_use]
pub fn arch_missing(dom: &Domain<'_>, host: &Host) -> Option<Finding> {
    let offer = host.arch_unsupported(dom.arch(), dom.virt_type())?;
    Some(crate::validate::arch_unsupported(dom, &offer))
}

/// The guest's machine type when the host's capabilities list machine types for its arch and
/// virt type and none of them is it (nor an alias of it): libvirt refuses the guest at define,
/// "Emulator '...' does not support machine type '...'" (seen on libvirt 12.8 / QEMU 11.1 for
/// every machine type before 5.2, which QEMU 11.1 removed). Nothing is said when the
/// capabilities list no machine type of that arch (no capabilities among the host's facts).
#[must_use]
pub fn machine_missing(dom: &Domain<'_>, host: &Host) -> Option<Finding> {
    let (arch, vt, machine) = (dom.arch(), dom.virt_type(), dom.machine());
    if machine.is_empty() {
        return None;
    }
    let emulator = host.caps_lack_machine(arch, vt, machine, dom.emulator().as_deref())?;
    Some(Finding::error(
        Code::MachineUnsupported,
        format!(
            "the host's QEMU does not offer machine type '{machine}' for {arch} {vt} guests (its capabilities do not list it): libvirt refuses the guest (\"Emulator '{emulator}' does not support machine type '{machine}'\")"
        ),
        "give the guest a machine type both hosts offer (the oldest common one keeps the device model)",
    ))
}

/// The guest's CPU against the host's host-model CPU for the guest's arch, virt type and
/// machine type (its domcapabilities); for a KVM guest on a host without one, against its
/// `physical` CPU (`virsh capabilities`' `<host><cpu>`) less the features KVM never gives a
/// guest ([`ClusterHost::kvm_of_physical`]: the most KVM can give, so a feature missing there is
/// missing from any host-model too); as `virt-cpu-policy compare` judges it
/// ([`crate::cpu::compare`], libvirt's `x86Compute`): libvirt compares a custom CPU with
/// the host's when it starts the incoming guest (`check='partial'`) or checks what QEMU gave
/// (`check='full'`), so an incompatible CPU fails later anyway, after the migration began.
#[must_use]
pub fn compare_cpu(
    dom: &Domain<'_>,
    facts: &DomainFacts<'_>,
    physical: Option<&Sourced<CpuDef>>,
    map: &CpuMapCache,
    arrival: Arrival,
) -> CpuCompare {
    let cpu = match cpu_libvirt_compares(dom) {
        Ok(cpu) => cpu,
        Err(why) => return CpuCompare::NotCompared(format!("CPU not compared: {why}")),
    };
    // A stopped guest started unchecked: libvirt compares nothing, whatever the host's CPU (an
    // incompatible one runs too: libvirt_check_on_arrival), so no fact is missing.
    let started_unchecked = arrival == Arrival::Start && unchecked(dom, cpu);
    let compared =
        host_cpu_libvirt_compares_with(dom, facts, physical, arrival).and_then(|against| {
            let (model, c, source) = compare_with(dom, &against, map)?;
            Ok(libvirt_check_on_arrival(
                dom, cpu, &model, c, &source, arrival,
            ))
        });
    compared.unwrap_or_else(|why| {
        let why = format!("CPU not compared: {why}");
        if started_unchecked {
            CpuCompare::NotCompared(why)
        } else {
            CpuCompare::Unknown(why)
        }
    })
}

/// The guest's CPU in `dom` compared with the host CPU `against` as libvirt's `x86Compute`
/// does ([`crate::cpu::compare`], on `map`'s CPUID data): the guest's model, the
/// comparison, and where the host's CPU came from (for messages). Err: why it cannot be.
fn compare_with(
    dom: &Domain<'_>,
    against: &HostCpu<'_>,
    map: &CpuMapCache,
) -> Result<(String, Comparison, String), String> {
    let map = map.get()?;
    let guest_path = PathBuf::from("the incoming domain XML");
    let g = guest_cpu_of(dom, &guest_path).map_err(|e| e.to_string())?;
    let (host, source) = against.as_cluster_host(map, g.cpu.model.as_deref());
    let c = compare(map, &host, &g, &guest_path).map_err(|e| e.to_string())?;
    let model = g.cpu.model.unwrap_or_else(|| "?".into());
    Ok((model, c, source))
}

/// The guest's `<cpu>` when libvirt compares it with a host's: the first, a custom CPU that
/// names a model, of an x86 guest (libvirt's `x86Compute`); Err: why it does not.
fn cpu_libvirt_compares<'d, 't>(dom: &'d Domain<'t>) -> Result<Node<'d, 't>, String> {
    let Some(cpu) = dom.cpus().first().copied() else {
        return Err("the guest has no <cpu>".into());
    };
    if crate::domain::cpu_mode(cpu) != Some(CpuMode::Custom) {
        let mode = cpu.attribute("mode").unwrap_or_default();
        return Err(format!("a {mode} CPU takes this host's own CPU"));
    }
    if child(cpu, "model").is_none() {
        // libvirt compares nothing either ("only topology part of CPU def is used").
        return Err("the CPU names no model (QEMU's default one)".into());
    }
    if !crate::libvirt::arch::is_x86(dom.arch()) {
        return Err(format!(
            "libvirt's CPU compare is for x86, the guest is {}",
            dom.arch()
        ));
    }
    Ok(cpu)
}

/// The host CPU a guest's custom CPU is compared with.
enum HostCpu<'a> {
    /// The host-model CPU of the host's domcapabilities for the guest's virt type.
    HostModel(&'a DomCaps),
    /// The host's physical CPU (`virsh capabilities`), of a KVM guest's arch.
    Physical(&'a Sourced<CpuDef>),
    /// What libvirt compares a KVM guest's custom CPU with when it starts it (`check` partial
    /// or full): the host's physical CPU with the features QEMU's KVM adds, per the host-model
    /// CPU of its domcapabilities when there ([`ClusterHost::started_kvm_compare`]; the
    /// validator's start check, [`crate::validate`], compares the same). Not what KVM gives: a
    /// feature the CPUID has and KVM drops (`pni` on a nested host) passes, and QEMU drops it.
    StartedKvm(&'a Sourced<CpuDef>, Option<&'a DomCaps>),
}

impl HostCpu<'_> {
    /// The host to compare with, and where its CPU came from, for messages: the host-model CPU,
    /// or the physical CPU less the features KVM never gives a guest
    /// ([`ClusterHost::kvm_of_physical`]).
    fn as_cluster_host(&self, map: &X86Map, model: Option<&str>) -> (ClusterHost, String) {
        match self {
            // libvirt 11.3 and later compare a model their cpu_map does not mark `<check
            // partial='compat'/>` with what KVM gives instead.
            HostCpu::StartedKvm(_, Some(d))
                if model.is_some_and(|m| map.partial_check_against_kvm(m)) =>
            {
                HostCpu::HostModel(d).as_cluster_host(map, model)
            }
            HostCpu::StartedKvm(c, d) => (
                ClusterHost::started_kvm_compare(
                    "this host",
                    &c.source,
                    &c.value,
                    d.and_then(|d| d.host_model.as_ref()),
                    map,
                ),
                format!(
                    "own CPU, {}, with the features QEMU's KVM adds{}, which libvirt compares a custom CPU with at start",
                    c.source,
                    d.map(|d| format!(" per {}", d.source)).unwrap_or_default()
                ),
            ),
            HostCpu::HostModel(d) => (
                ClusterHost::from_domcaps("this host", d),
                format!("host-model CPU from {}", d.source),
            ),
            HostCpu::Physical(c) => (
                ClusterHost::kvm_of_physical("this host", &c.source, &c.value, map),
                format!(
                    "{}, less the features KVM never gives a guest, as it has no domcapabilities host-model",
                    c.source
                ),
            ),
        }
    }
}

/// The host CPU libvirt compares the guest's with: for a stopped KVM guest's start, the host's
/// own CPU with what QEMU's KVM adds ([`HostCpu::StartedKvm`]); else the host-model CPU of its
/// domcapabilities (a running guest arrives with what QEMU dropped at its start already out of
/// its live CPU); without one, for a KVM guest, its physical CPU of the guest's arch less what KVM never gives a
/// guest (the most KVM can give it; under TCG the physical CPU says nothing of what QEMU
/// emulates). Err: neither is known.
fn host_cpu_libvirt_compares_with<'a>(
    dom: &Domain<'_>,
    facts: &DomainFacts<'a>,
    physical: Option<&'a Sourced<CpuDef>>,
    arrival: Arrival,
) -> Result<HostCpu<'a>, String> {
    let host_model = facts.domcaps.filter(|d| d.host_model.is_some());
    let of_arch = physical.filter(|c| {
        dom.virt_type() == "kvm"
            && crate::libvirt::arch::host_cpu_serves(dom.arch(), c.value.arch.as_deref())
    });
    if let (Arrival::Start, Some(c)) = (arrival, of_arch) {
        return Ok(HostCpu::StartedKvm(c, host_model));
    }
    if let Some(d) = host_model {
        return Ok(HostCpu::HostModel(d));
    }
    physical
        .filter(|c| dom.virt_type() == "kvm" && crate::libvirt::arch::host_cpu_serves(dom.arch(), c.value.arch.as_deref()))
        .map(HostCpu::Physical)
        .ok_or_else(|| {
            let (arch, vt) = (dom.arch(), dom.virt_type());
            let missing = format!(
                "this host's host-model CPU is unknown (no domcapabilities for {arch} {vt} among its facts: its facts file, the daemon's snapshot or --caps)"
            );
            if vt == "kvm" {
                format!("{missing}, and so is the CPU KVM can give (no capabilities host CPU of that arch)")
            } else {
                format!("{missing}; its physical CPU says nothing of what QEMU emulates")
            }
        })
}

/// Whether the guest's custom CPU is checked `none`: written, or libvirt's default for a custom
/// CPU ('none' under TCG, 'partial' under KVM).
fn unchecked(dom: &Domain<'_>, cpu: Node<'_, '_>) -> bool {
    cpu.attribute("check").map_or(
        CpuCheck::default_for(CpuMode::Custom, dom.virt_type()) == CpuCheck::None,
        |c| c == "none",
    )
}

/// What libvirt does with the guest's CPU (model `model`) on arrival, given the comparison `c`
/// with this host's (from `source`): `identical` or `superset` runs; `incompatible` runs only
/// when a stopped guest starts unchecked (`check='none'`, written or libvirt's default for a TCG
/// custom CPU: QEMU starts it without what is missing), else it is refused (`partial` at start,
/// `full` on what QEMU built, and a running guest would lose features it uses).
fn libvirt_check_on_arrival(
    dom: &Domain<'_>,
    cpu: Node<'_, '_>,
    model: &str,
    c: Comparison,
    source: &str,
    arrival: Arrival,
) -> CpuCompare {
    match c.verdict {
        Compatibility::Identical | Compatibility::Superset => CpuCompare::Runs(format!(
            "CPU {model}: this host's is {} ({source})",
            c.verdict.as_str(),
        )),
        Compatibility::Incompatible => {
            let reason = c.message.unwrap_or_else(|| "incompatible".into());
            if unchecked(dom, cpu) && arrival == Arrival::Start {
                return CpuCompare::Runs(format!(
                    "CPU {model}: {reason}; with check='none' libvirt does not compare and QEMU starts the guest without them (this host's {source})"
                ));
            }
            let when = if cpu.attribute("check") == Some("none") {
                "with check='none' libvirt does not check, and QEMU would drop what is missing from the running guest"
            } else {
                "libvirt's own CPU check would refuse the guest when it starts here"
            };
            CpuCompare::Incompatible(Finding::error(
                Code::CpuIncompatible,
                format!(
                    "this host cannot run the guest's CPU (model {model}): {reason} (this host's {source}; {when})"
                ),
                "migrate it to a host whose CPU has these features, or give the guest a CPU every host of the cluster can run (cpu.model = \"baseline\"; virt-cpu-policy baseline)",
            ))
        }
    }
}
