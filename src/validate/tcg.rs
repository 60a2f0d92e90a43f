//! What QEMU's TCG (`<domain type='qemu'>`) refuses at start that KVM would run: vCPUs whose
//! APIC IDs need x2APIC, and a guest CPU libvirt compares with what TCG emulates.
//!
//! * **APIC IDs of 255 and more** ([`crate::apic_id`]): QEMU before 9.0 runs no TCG guest whose
//!   vCPUs can reach one ("current -smp configuration requires kernel irqchip and X2APIC API
//!   support", the maximum counts); QEMU 9.0 and later create such a vCPU only with x2APIC in
//!   the guest CPU ("APIC ID 255 requires x2APIC feature in CPU": at start for the online vCPUs;
//!   a vCPU hot-plugged later fails, which is a warning: the start succeeds. QEMU 10.0 aborts
//!   the running guest, "Unable to read from monitor"; QEMU 11.1 refuses the vCPU, `device_add`:
//!   "APIC ID 256 requires x2APIC feature in CPU"). Seen with QEMU 5.2, 7.2, 10.0 and 11.1 under
//!   libvirt 7.0, 9.0, 11.3 and 12.8 (`tests/integration/tcg.rs`). An unknown QEMU release is
//!   judged as the older QEMU: the safe choice.
//! * **`check='partial'`** (libvirt's default for `host-model`; under TCG a custom CPU gets
//!   `check='none'` at define): libvirt compares the guest CPU with the CPU TCG gives
//!   (`qemuProcessUpdateGuestCPU`, `virCPUCompare` against the full host-model of the virt type)
//!   and refuses "the CPU is incompatible with host CPU: Host CPU does not provide required
//!   features: x2apic, tsc-deadline" or "... Host CPU provides forbidden features: sse4.2".
//! * **`check='full'`**: libvirt compares the CPU QEMU built with the one written: "guest CPU
//!   doesn't match specification: extra features: hypervisor, ... missing features: ...". QEMU
//!   sets the `hypervisor` bit in every vCPU, so a named model without it never passes.
//!
//! What TCG gives comes from the domcapabilities of `type='qemu'` (its host-model CPU, the
//! models' `usable` and libvirt 11.x's `<blockers>`) and libvirt's QEMU capability cache (the
//! same blockers, both generations): [`crate::tcg_facts::TcgFacts`].

use crate::apic_id::{apic_id, first_x2apic_vcpu};
use crate::cpu::default_model;
use crate::domain::{Domain, cpu_features, cpu_mode, model_name};
use crate::domain_facts::{DomainFacts, VersionRule};
use crate::finding::{Code, Finding, Severity};
use crate::host::Sourced;
use crate::libvirt::cpu_def::{CpuCheck, CpuMode, FeaturePolicy, guaranteed_features};
use crate::libvirt::version::QemuVersion;
use crate::topology::{Topology, enabled_vcpu_ids};
use crate::xml::child;
use roxmltree::Node;
use std::collections::BTreeSet;

/// A `<cpu>`'s listed features with their policies (None: a word libvirt does not know).
type Listed = [(String, Option<FeaturePolicy>)];

/// Whether the guest CPU has x2APIC under this host's TCG: a custom CPU by its model (cpu_map)
/// and listed features; `host-model` by its listed policy, else the TCG host-model CPU of
/// domcapabilities, else the QEMU release (TCG's `max` CPU, which host-model and `maximum` are
/// made from, has x2APIC from QEMU 9.0 on: seen on 10.0); `maximum` unless it disables it.
#[must_use]
pub(crate) fn has_x2apic(
    arch: &str,
    mode: CpuMode,
    model: Option<&str>,
    listed: &Listed,
    facts: &DomainFacts<'_>,
) -> bool {
    let written = listed
        .iter()
        .rev()
        .find(|(f, _)| f == "x2apic")
        .map(|(_, p)| p.is_some_and(FeaturePolicy::gives));
    let tcg_max_has_it = facts
        .tcg
        .version
        .as_ref()
        .is_some_and(|v| v.value.tcg_has_x2apic());
    match mode {
        CpuMode::Custom => {
            let Some(model) = model.or_else(|| default_model(arch)) else {
                return written == Some(true);
            };
            guaranteed_features(facts.model_features(model), listed).contains("x2apic")
        }
        CpuMode::HostModel => written.unwrap_or_else(|| {
            let from_domcaps = facts.domcaps.and_then(|d| d.host_model.as_ref()).map(|hm| {
                let model = hm.model.as_deref().and_then(|m| facts.model_features(m));
                hm.guaranteed_features(model).contains("x2apic")
            });
            from_domcaps.unwrap_or(tcg_max_has_it)
        }),
        CpuMode::HostPassthrough | CpuMode::Maximum => written.unwrap_or(tcg_max_has_it),
    }
}

/// The QEMU release and where it came from, for messages: `QEMU 7.2.22 (from SOURCE)`, or why
/// it is unknown.
#[must_use]
pub(crate) fn qemu_words(v: Option<&Sourced<QemuVersion>>) -> String {
    match v {
        Some(v) => format!("QEMU {} (from {})", v.value, v.source),
        None => "the host's QEMU (its version unknown: neither --qemu-version nor a current file of libvirt's QEMU capability cache gives it, so taken as older than 9.0)".to_string(),
    }
}

/// The vCPUs libvirt starts: `current`, or with a `<vcpus>` list up to its highest enabled id.
fn online_vcpus(dom: &Domain<'_>, current: u32, max: u32) -> u32 {
    let Some(list) = child(dom.root(), "vcpus") else {
        return current.min(max);
    };
    enabled_vcpu_ids(list, max).max().map_or(1, |id| id + 1)
}

/// How many vCPUs libvirt starts: `current`, or with a `<vcpus>` list its entries with
/// `enabled='yes'` (libvirt keeps the two equal; a list with holes, `<vcpu id='1'
/// enabled='no'/>` below enabled ones, has fewer online than its highest id + 1).
fn enabled_vcpus(dom: &Domain<'_>, current: u32, max: u32) -> u32 {
    let Some(list) = child(dom.root(), "vcpus") else {
        return current.min(max);
    };
    let on = enabled_vcpu_ids(list, max).count();
    u32::try_from(on).unwrap_or(max).clamp(1, max)
}

/// The first `<cpu>`'s topology, as libvirt reads it (None without one, or an unreadable one,
/// which its own finding reports).
fn topology(dom: &Domain<'_>, facts: &DomainFacts<'_>) -> Option<Topology> {
    let t = dom.cpus().first().and_then(|c| child(*c, "topology"))?;
    Topology::read(t, facts.applies(VersionRule::Clusters)).ok()
}

/// The vCPU rules of x86 TCG, for `<vcpu>` with maximum `max` and `current` online: the APIC
/// IDs ([`check_apic_ids`]) and the hot-plug ([`check_cpu_hotplug`]). Nothing for KVM or
/// another arch.
pub(super) fn check_vcpus(
    dom: &Domain<'_>,
    max: u32,
    current: u32,
    facts: &DomainFacts<'_>,
    out: &mut Vec<Finding>,
) {
    if !facts.tcg.x86_tcg {
        return;
    }
    check_apic_ids(dom, max, current, facts, out);
    let online = enabled_vcpus(dom, current, max);
    // `current='0'` is refused (`vcpu-current`): no guest to hot-plug into. With a `<vcpus>`
    // list only an entry `enabled='no' hotpluggable='yes'` can be hot-plugged.
    let pluggable = child(dom.root(), "vcpus").is_none_or(|list| {
        list.children().any(|e| {
            crate::xml::is_libvirt_element(e, "vcpu")
                && e.attribute("enabled") == Some("no")
                && e.attribute("hotpluggable") == Some("yes")
        })
    });
    if current > 0 && pluggable {
        check_cpu_hotplug(online, max, facts, out);
    }
}

/// The APIC-ID rule of TCG (module docs): `tcg-vcpu-limit` when this QEMU (or an unknown one)
/// cannot run the maximum at all (an error: the start fails), `tcg-x2apic` when it can only with
/// x2APIC in the guest CPU: an error when an online vCPU needs it (the start fails), else a
/// warning (the guest starts, and the hot-plug of that vCPU fails).
fn check_apic_ids(
    dom: &Domain<'_>,
    max: u32,
    current: u32,
    facts: &DomainFacts<'_>,
    out: &mut Vec<Finding>,
) {
    let topo = topology(dom, facts);
    let Some(first) = first_x2apic_vcpu(topo.as_ref(), max) else {
        return;
    };
    let id = topo
        .as_ref()
        .map_or(u64::from(first), |t| apic_id(t, first));
    let shape = topo.map_or_else(
        || "one socket per vCPU".to_string(),
        |t| format!("the topology {}", t.describe()),
    );
    let version = facts.tcg.version.as_ref();
    if !version.is_some_and(|v| v.value.tcg_has_x2apic()) {
        out.push(Finding::error(
            Code::TcgVcpuLimit,
            format!(
                "{} runs no TCG guest whose vCPUs can reach APIC ID 255 (\"current -smp configuration requires kernel irqchip and X2APIC API support\", even for vCPUs not online): with {shape}, vCPU {first} of the maximum {max} gets APIC ID {id} (TCG emulates x2APIC from QEMU 9.0 on)",
                qemu_words(version)
            ),
            format!(
                "lower the maximum to {first} or fewer (a rule with vcpu.max does it), or run the guest under KVM or a QEMU 9.0 or later"
            ),
        ));
        return;
    }
    let cpu = dom.cpus().first().copied();
    let Some(mode) = cpu.map_or(Some(CpuMode::Custom), cpu_mode) else {
        // A mode libvirt does not know: `cpu-mode-invalid` says so.
        return;
    };
    let model = cpu.and_then(|c| child(c, "model")).and_then(model_name);
    let listed = cpu.map(cpu_features).unwrap_or_default();
    if has_x2apic(dom.arch(), mode, model.as_deref(), &listed, facts) {
        return;
    }
    let what = match (mode, &model) {
        (CpuMode::Custom, Some(m)) => format!("model {m}"),
        (CpuMode::Custom, None) => "QEMU's default model".to_string(),
        (m, _) => format!("this {m} CPU"),
    };
    let online = online_vcpus(dom, current, max);
    // Fatal at start when an online vCPU needs x2APIC; otherwise the guest starts and the
    // hot-plug of that vCPU is what fails (QEMU 10.0 aborts the running guest, 11.1 refuses
    // the vCPU): a warning.
    let fatal = online > first;
    let when = if fatal {
        format!("it refuses to start the guest: {online} vCPUs are online")
    } else {
        format!(
            "the {online} online vCPU(s) start, but hot-plugging vCPU {first} fails (QEMU 10.0 aborts the running guest, QEMU 11.1 refuses the vCPU)"
        )
    };
    let mut finding = Finding::error(
        Code::TcgX2apic,
        format!(
            "{} gives a TCG vCPU an APIC ID of 255 or more only with x2APIC in the guest CPU, which {what} lacks (\"APIC ID {id} requires x2APIC feature in CPU\"): with {shape}, vCPU {first} of the maximum {max} gets APIC ID {id}, so {when}",
            qemu_words(version)
        ),
        format!(
            "require x2apic (<feature policy='require' name='x2apic'/>; a rule with vcpu.max adds it), or lower the maximum to {first} or fewer"
        ),
    );
    if !fatal {
        finding.severity = Severity::Warning;
    }
    out.push(finding);
}

/// `tcg-cpu-hotplug`: an x86 TCG guest with room to hot-plug vCPUs (fewer online than the
/// maximum) on a QEMU that never tells the guest of them ([`crate::tcg_facts::TCG_CPU_HOTPLUG_LOST`]:
/// 5.1.0 to 7.2.0). A warning: the guest starts and `virsh setvcpus --live` succeeds, but the
/// guest's CPU count does not change. Said only when the release is known (an unknown QEMU is
/// no evidence of the fault, and most hosts do not have it). `online`: how many vCPUs libvirt
/// starts ([`enabled_vcpus`]; any one below the maximum can be hot-plugged).
fn check_cpu_hotplug(online: u32, max: u32, facts: &DomainFacts<'_>, out: &mut Vec<Finding>) {
    let Some(version) = facts
        .tcg
        .version
        .as_ref()
        .filter(|v| v.value.tcg_loses_cpu_hotplug())
    else {
        return;
    };
    if online >= max {
        return;
    }
    let mut finding = Finding::error(
        Code::TcgCpuHotplug,
        format!(
            "{} does not deliver hot-plugged vCPUs to a TCG guest: `virsh setvcpus --live` up to the maximum {max} succeeds, but the guest keeps its {online} vCPU(s) (under TCG this QEMU refuses the 4-byte write with which the guest's ACPI switches to the modern CPU hotplug interface at I/O port 0xaf00; fixed in QEMU 7.2.1 and 8.0)",
            qemu_words(Some(version))
        ),
        "start the guest with the vCPUs it needs (<vcpu current>), or run it under KVM or a QEMU 7.2.1 or later",
    );
    finding.severity = Severity::Warning;
    out.push(finding);
}

/// `tcg-eim`: an Intel IOMMU with `eim='on'` under TCG on a QEMU before 9.0 (or of an unknown
/// release): QEMU's `vtd_decide_config` (`hw/i386/intel_iommu.c`) refuses extended interrupt
/// mode without KVM's split irqchip, "eim=on requires accel=kvm,kernel-irqchip=split", so the
/// start fails (seen with QEMU 5.2 and 7.2 under libvirt 7.0 and 9.0). QEMU 9.0's TCG x2APIC
/// series ([`crate::tcg_facts::TCG_X2APIC_SINCE`]) asks for the split irqchip only under KVM: QEMU
/// 10.0 and 11.1 start it (libvirt 11.3 and 12.8).
pub(super) fn check_eim(dom: &Domain<'_>, facts: &DomainFacts<'_>, out: &mut Vec<Finding>) {
    if !facts.tcg.x86_tcg || !dom.writes_eim_on() {
        return;
    }
    let version = facts.tcg.version.as_ref();
    if version.is_some_and(|v| v.value.tcg_has_x2apic()) {
        return;
    }
    out.push(Finding::error(
        Code::TcgEim,
        format!(
            "{} refuses an Intel IOMMU with eim='on' under TCG: \"eim=on requires accel=kvm,kernel-irqchip=split\" (the start fails; QEMU emulates extended interrupt mode under TCG from 9.0 on)",
            qemu_words(version)
        ),
        "remove eim='on' (QEMU then decides it: off under TCG), or run the guest under KVM or a QEMU 9.0 or later",
    ));
}

/// The check libvirt makes of `cpu` (of a domain of `virt_type`) when it starts the guest: its
/// `check`, else libvirt's default ([`CpuCheck::default_for`]: `partial` for host-model and for a
/// KVM custom CPU, `none` for a TCG custom CPU; seen with libvirt 9.0 and 11.3). An unknown word
/// is `none` here: libvirt refuses the domain for it at define.
pub(super) fn check_of(cpu: Node<'_, '_>, mode: CpuMode, virt_type: &str) -> CpuCheck {
    match cpu.attribute("check") {
        Some(c) => CpuCheck::parse(c).unwrap_or(CpuCheck::None),
        None => CpuCheck::default_for(mode, virt_type),
    }
}

/// libvirt's CPU checks against TCG at start (module docs), for an x86 TCG guest with a custom
/// model or a host-model CPU.
pub(super) fn check_cpu(
    cpu: Node<'_, '_>,
    mode: CpuMode,
    facts: &DomainFacts<'_>,
    out: &mut Vec<Finding>,
) {
    if !facts.tcg.x86_tcg || !matches!(mode, CpuMode::Custom | CpuMode::HostModel) {
        return;
    }
    let check = check_of(cpu, mode, "qemu");
    if check == CpuCheck::None {
        return;
    }
    let listed = cpu_features(cpu);
    let model = child(cpu, "model").and_then(model_name);
    if mode == CpuMode::Custom && model.is_none() {
        // libvirt compares nothing: "only topology part of CPU def is used".
        return;
    }
    let gives = facts.tcg.host_cpu.as_ref();
    // The policies whose feature the guest must have: `require`, and under `full` `force` too.
    let needed = |p: &Option<FeaturePolicy>| {
        *p == Some(FeaturePolicy::Require)
            || (check == CpuCheck::Full && *p == Some(FeaturePolicy::Force))
    };
    let dropped: BTreeSet<&str> = listed
        .iter()
        .filter(|(_, p)| !needed(p))
        .map(|(f, _)| f.as_str())
        .collect();
    let mut missing: BTreeSet<String> = BTreeSet::new();
    let mut basis = Vec::new();
    // What a part of the comparison needed and no fact gave, in words (`not-compared`).
    let mut unknown = Vec::new();
    if let (Some(m), CpuMode::Custom) = (&model, mode) {
        match model_lacks(m, check, &dropped, facts) {
            Ok(Some((lacking, per))) => {
                missing.extend(lacking);
                basis.push(per);
            }
            Ok(None) => {}
            Err(what) => unknown.push(what),
        }
    }
    if gives.is_none() {
        unknown.extend(features_unjudged(&listed, check));
    }
    if let Some((_, source)) = gives {
        let lacking: Vec<String> = listed
            .iter()
            .filter(|(f, p)| needed(p) && !facts.tcg.check_finds(f, check) && f != "hypervisor")
            .map(|(f, _)| f.clone())
            .collect();
        if !lacking.is_empty() {
            basis.push(format!("the TCG CPU of {source}"));
        }
        missing.extend(lacking);
    }
    let why = if basis.is_empty() {
        String::new()
    } else {
        format!("; per {}", basis.join(" and "))
    };
    if missing.is_empty() && !unknown.is_empty() {
        not_compared(mode, model.as_deref(), check, &listed, &unknown, out);
    }
    if check == CpuCheck::Partial {
        let forbidden: BTreeSet<String> = gives.map_or_else(BTreeSet::new, |(g, _)| {
            listed
                .iter()
                .filter(|(f, p)| *p == Some(FeaturePolicy::Forbid) && g.contains(f))
                .map(|(f, _)| f.clone())
                .collect()
        });
        check_partial(&missing, &forbidden, &why, out);
    } else {
        check_full(mode, model.as_deref(), &listed, &missing, &why, out);
    }
}

/// The features listed beyond the model that libvirt compares with the CPU TCG gives (each
/// `require`, and `force` under `full`; `forbid` under `partial`; not `hypervisor`, which QEMU
/// sets itself), as the missing fact's words when that CPU is not known; None when there are
/// none.
fn features_unjudged(listed: &Listed, check: CpuCheck) -> Option<String> {
    let asked: Vec<&str> = listed
        .iter()
        .filter(|(f, p)| {
            let compared = match p {
                Some(FeaturePolicy::Require) => true,
                Some(FeaturePolicy::Force) => check == CpuCheck::Full,
                Some(FeaturePolicy::Forbid) => check == CpuCheck::Partial,
                _ => false,
            };
            compared && f != "hypervisor"
        })
        .map(|(f, _)| f.as_str())
        .collect();
    (!asked.is_empty()).then(|| {
        format!(
            "the CPU this QEMU's TCG emulates, which the features {} are compared with,",
            asked.join(", ")
        )
    })
}

/// The features of custom model `m` that libvirt's `check` finds TCG lacking, those the guest
/// drops (`dropped`: listed with a policy that does not need them) left out, and what says so;
/// None when it finds none; Err naming the fact missing when nothing can say. The partial check of a libvirt that takes
/// QEMU's word ([`crate::tcg_facts::TcgFacts::usable_decides`]) stops at a usable model and
/// names an unusable one's blockers; otherwise (and under `full`, which compares what QEMU
/// built) the model's features (cpu_map) count one by one against the CPU TCG gives.
fn model_lacks(
    m: &str,
    check: CpuCheck,
    dropped: &BTreeSet<&str>,
    facts: &DomainFacts<'_>,
) -> Result<Option<(BTreeSet<String>, String)>, String> {
    let tcg = facts.tcg.models.get(m);
    let blockers = tcg.and_then(|t| t.blockers.as_ref().map(|b| (b, &t.source)));
    let qemu_word = facts.tcg.usable_decides && check == CpuCheck::Partial;
    let (lacking, per): (BTreeSet<String>, String) =
        match (qemu_word, tcg.is_some_and(|t| t.usable), blockers) {
            (true, true, _) => return Ok(None),
            (true, false, Some((b, source))) => (
                b.iter()
                    .filter(|f| !dropped.contains(f.as_str()))
                    .cloned()
                    .collect(),
                format!("the blockers of {m} in {source}"),
            ),
            _ => {
                let (Some((_, source)), Some(own)) =
                    (facts.tcg.host_cpu.as_ref(), facts.model_features(m))
                else {
                    return Err(format!("what this QEMU's TCG makes of model {m}"));
                };
                let lacking = own
                    .iter()
                    .filter(|f| !facts.tcg.check_finds(f, check) && !dropped.contains(f.as_str()));
                (
                    lacking.cloned().collect(),
                    format!("{m} in libvirt's cpu_map against {source}"),
                )
            }
        };
    Ok((!lacking.is_empty()).then_some((lacking, per)))
}

/// The `not-compared` warning when [`check_cpu`] found nothing to refuse but lacked a TCG fact
/// a part of libvirt's comparison needs (`unknown`: each, in words). Nothing under `full` for
/// a custom CPU that does not name `hypervisor`: refused whatever TCG gives.
fn not_compared(
    mode: CpuMode,
    model: Option<&str>,
    check: CpuCheck,
    listed: &Listed,
    unknown: &[String],
    out: &mut Vec<Finding>,
) {
    let refused_anyway = check == CpuCheck::Full
        && mode == CpuMode::Custom
        && !listed.iter().any(|(f, _)| f == "hypervisor");
    if refused_anyway {
        return;
    }
    out.push(Finding::warning(
        Code::NotCompared,
        format!(
            "not compared: libvirt compares this CPU ({}, check='{}' under TCG) with the CPU this QEMU's TCG emulates when it starts the guest, and refuses it when TCG lacks a feature it requires; {} is not known (no qemu domcapabilities with a host-model CPU, nor a fresh file of libvirt's QEMU capability cache for the emulator)",
            model.map_or_else(|| mode.as_str().to_string(), |m| format!("model {m}")),
            check.as_str(),
            unknown.join(" and ")
        ),
        "give the host's virsh domcapabilities --virttype qemu (--caps, a <hostFacts>, or the daemon's snapshot), or run the tool on the host with its libvirt's QEMU capability cache",
    ));
}

/// `check='partial'`: libvirt's refusal when TCG lacks a feature the guest needs, or has one it
/// forbids.
fn check_partial(
    missing: &BTreeSet<String>,
    forbidden: &BTreeSet<String>,
    why: &str,
    out: &mut Vec<Finding>,
) {
    let join = |v: &BTreeSet<String>| v.iter().cloned().collect::<Vec<_>>().join(", ");
    let reason = match (missing.is_empty(), forbidden.is_empty()) {
        (true, true) => return,
        (false, _) => format!(
            "Host CPU does not provide required features: {}",
            join(missing)
        ),
        (true, false) => format!("Host CPU provides forbidden features: {}", join(forbidden)),
    };
    out.push(Finding::error(
        Code::TcgCpuMissing,
        format!(
            "the CPU is incompatible with host CPU: {reason} (check='partial' under TCG: libvirt compares the guest CPU with the CPU this QEMU's TCG emulates, and refuses the start{why})"
        ),
        "use check='none' (libvirt's default for a custom CPU under TCG), or a CPU this QEMU's TCG emulates (virsh domcapabilities --virttype qemu: usable models), or disable the features it lacks",
    ));
}

/// `check='full'`: what QEMU built must be the CPU written. QEMU adds `hypervisor` to every vCPU;
/// TCG drops what it lacks.
fn check_full(
    mode: CpuMode,
    model: Option<&str>,
    listed: &Listed,
    missing: &BTreeSet<String>,
    why: &str,
    out: &mut Vec<Finding>,
) {
    let hypervisor = listed
        .iter()
        .rev()
        .find(|(f, _)| f == "hypervisor")
        .is_some_and(|(_, p)| p.is_some_and(FeaturePolicy::gives));
    let mut parts = Vec::new();
    if mode == CpuMode::Custom && !hypervisor {
        parts.push("extra features: hypervisor".to_string());
    }
    if !missing.is_empty() {
        parts.push(format!(
            "missing features: {}",
            missing.iter().cloned().collect::<Vec<_>>().join(",")
        ));
    }
    if parts.is_empty() {
        return;
    }
    let model = model.unwrap_or("(none)");
    out.push(Finding::error(
        Code::TcgCheckFull,
        format!(
            "guest CPU doesn't match specification: {} (check='full' under TCG, model {model}: libvirt compares the CPU QEMU built with the one written and refuses the start; QEMU sets the hypervisor bit in every vCPU and its TCG drops what it does not emulate{why})",
            parts.join(", ")
        ),
        "use check='partial' or 'none' (libvirt's default under TCG), or require hypervisor and only features this QEMU's TCG emulates",
    ));
}
