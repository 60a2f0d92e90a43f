//! What libvirt checks when it starts a KVM guest (`<domain type='kvm'>`) whose CPU is custom:
//! with `check='partial'` (written, or libvirt's default for a KVM custom CPU) it compares the
//! guest CPU with the host's own CPU and refuses the start when they disagree.
//!
//! The host CPU libvirt compares with is not what KVM gives a guest (domcapabilities' host-model
//! CPU, the models' `usable`): it is the host's CPUID as `virsh capabilities` shows it, with the
//! features QEMU's KVM host CPU adds (`x2apic`, `hypervisor`...; libvirt's "full" host CPU,
//! `virQEMUCapsInitHostCPUModel`). Seen on a host whose KVM lacks `pni` and `popcnt` (its CPUID
//! has them), with libvirt 9.0, 11.3 and 12.8 (`tests/integration/kvm.rs`):
//!
//! * `<model>Nehalem</model>` (`usable='no'`: `pni`, `popcnt`), `check='partial'`, `match` exact
//!   or minimum, `fallback` allow or forbid, or `<feature policy='require' name='popcnt'/>`:
//!   **starts**, and the live XML disables `pni`, `ssse3`, `sse4.1`, `sse4.2`, `popcnt` (QEMU
//!   drops what KVM cannot give: `cpu-model-unusable`, a warning);
//! * a feature the CPUID lacks (`svm` on an Intel host; libvirt's `qemu64` lists it), required
//!   by the model or a `<feature policy='require'>`, `match` exact or minimum: "the CPU is
//!   incompatible with host CPU: Host CPU does not provide required features: svm";
//! * `<feature policy='forbid' name='lm'/>`: "the CPU is incompatible with host CPU: Host CPU
//!   provides forbidden feature 'lm'";
//! * `check='none'`: nothing compared, the guest starts (a required `svm` silently dropped);
//! * `check='full'`, `match='exact'`: libvirt compares the CPU QEMU built with the one written
//!   and refuses the start, "guest CPU doesn't match specification: extra features:
//!   vme,x2apic,hypervisor, missing features: pni,ssse3,sse4.1,sse4.2,popcnt" (`Nehalem`),
//!   "extra features: apic,x2apic,hypervisor" (`pentium`, `usable='yes'`): QEMU's KVM sets the
//!   `hypervisor` bit in every vCPU and drops what KVM cannot give (`kvm-check-full`, an error
//!   when the CPU written lacks `hypervisor` or names features KVM's host-model CPU lacks; the
//!   other extra features depend on the model and are not predicted); a CPU that names
//!   `hypervisor` at all is not refused for it (`disable`: QEMU leaves the bit off; `optional`:
//!   libvirt makes it `require`; both start, seen with libvirt 9.0). Under `check='full'` the
//!   comparison with the host's own CPU comes first, as under `partial` (a forbidden `lm`: the
//!   same "provides forbidden feature" words); with `match='minimum'` only that comparison
//!   refuses (`Nehalem` starts; a required `svm` is refused, libvirt then saying "guest CPU
//!   doesn't match specification: missing features: svm").
//!
//! libvirt 11.3's cpu_map marks its older models `<check partial='compat'/>`; a model without
//! it (the versioned aliases such as `Icelake-Server-v2`, `Denverton`) is compared by libvirt
//! 11.3 and 12.8 with what KVM gives (domcapabilities' host-model CPU), not with the host's own
//! CPU ([`crate::libvirt::cpu_map::x86::X86Map::partial_check_against_kvm`]). Seen on a host whose own CPU is
//! `Icelake-Server-v2`: that model is refused, "Host CPU does not provide required features:
//! pni, pclmuldq, ssse3, ... xgetbv1" (every feature of it KVM lacks, listed in QEMU's order, not
//! the cpu_map's), while `Icelake-Server-noTSX` (`compat`, the same features) starts
//! (`tests/integration/kvm.rs`, `producers_kvm_against_virsh_create`). libvirt 9.0's cpu_map has
//! no such mark: every model is compared with the host's own CPU.
//!
//! The comparison is `virt-cpu-policy compare`'s ([`crate::cpu::compare`], libvirt's
//! `x86Compute`) against [`crate::cluster::hosts::ClusterHost::started_kvm_compare`]; it needs the host's capabilities
//! (its CPU) and libvirt's cpu_map (its CPUID data): without either nothing is said.

use crate::cluster::hosts::compare;
use crate::cpu::compare::{Comparison, Compatibility, GuestCpu};
use crate::domain::{Domain, cpu_mode};
use crate::domain_facts::kvm_start::{KvmStartHost, Loaded};
use crate::domain_facts::{DomainFacts, VersionRule};
use crate::finding::{Code, Finding};
use crate::guest_cpu::guest_cpu_of;
use crate::libvirt::arch::is_x86;
use crate::libvirt::cpu_def::{CpuCheck, CpuMatch, CpuMode, FeaturePolicy};
use crate::xml::child;
use roxmltree::Node;
use std::collections::BTreeSet;
use std::path::Path;

/// Whether `guest` is a model KVM's domcapabilities list `usable='yes'` with no vendor and no
/// feature required or forbidden beyond it: KVM gives all of it, so neither check can refuse it
/// for features (the host's own CPU has what KVM gives), and nothing needs loading.
fn plain_usable(start: &KvmStartHost<'_>, guest: &GuestCpu) -> bool {
    let usable = guest
        .cpu
        .model
        .as_deref()
        .and_then(|m| start.domcaps?.model_usable(m));
    usable == Some(true)
        && guest.cpu.vendor.is_none()
        && guest
            .cpu
            .features
            .iter()
            .all(|(_, p)| !matches!(p, FeaturePolicy::Require | FeaturePolicy::Forbid))
}

/// Whether the comparison at start can be answered without libvirt's cpu_map as CPUID data
/// (loading it costs the hook about 2-4 ms, at every start of such a guest): no vendor and no
/// forbidden feature, and every feature the guest CPU is guaranteed to have (its model's, from
/// the model's cpu_map file, with its listed ones: the policy's rewrite writes such a CPU) is
/// one KVM's host-model CPU is guaranteed to have (its model's and the ones it requires); with
/// a model whose features are not known, a model domcapabilities marks usable under KVM and
/// required features among those. The host-model CPU's features are the host's CPUID plus what
/// QEMU's KVM adds, the CPU libvirt compares with ([`crate::cluster::hosts::ClusterHost::started_kvm_compare`] adds the
/// host-model's required features), so the comparison passes.
fn given_by_kvm(start: &KvmStartHost<'_>, guest: &GuestCpu, facts: &DomainFacts<'_>) -> bool {
    let Some(hm) = start.domcaps.and_then(|d| d.host_model.as_ref()) else {
        return false;
    };
    let forbids = guest
        .cpu
        .features
        .iter()
        .any(|(_, p)| *p == FeaturePolicy::Forbid);
    if guest.cpu.vendor.is_some() || forbids {
        return false;
    }
    let given = hm.guaranteed_features(hm.model.as_deref().and_then(|m| facts.model_features(m)));
    let model = guest.cpu.model.as_deref();
    if let Some(features) = model.and_then(|m| facts.model_features(m)) {
        let listed: Vec<(String, Option<FeaturePolicy>)> = guest
            .cpu
            .features
            .iter()
            .map(|(f, p)| (f.clone(), Some(*p)))
            .collect();
        return crate::libvirt::cpu_def::guaranteed_features(Some(features), &listed)
            .is_subset(&given);
    }
    let usable = model.and_then(|m| start.domcaps?.model_usable(m));
    usable == Some(true)
        && guest
            .cpu
            .features
            .iter()
            .all(|(f, p)| *p != FeaturePolicy::Require || given.contains(f))
}

/// libvirt's start-time checks of a KVM custom CPU (module docs): under `check='partial'`
/// `cpu-incompatible`, under `check='full'` `kvm-check-full`, errors in libvirt's words, when it
/// refuses. Returns whether it did.
pub(super) fn check(
    dom: &Domain<'_>,
    cpu: Node<'_, '_>,
    facts: &DomainFacts<'_>,
    out: &mut Vec<Finding>,
) -> bool {
    let mode = cpu_mode(cpu);
    if dom.virt_type() != "kvm" {
        return false;
    }
    if mode == Some(CpuMode::HostModel) {
        return check_host_model(dom, cpu, facts, out);
    }
    if mode != Some(CpuMode::Custom) {
        return false;
    }
    if child(cpu, "model").is_none() {
        // libvirt compares nothing: "only topology part of CPU def is used".
        return false;
    }
    let check = super::tcg::check_of(cpu, CpuMode::Custom, "kvm");
    if check == CpuCheck::None {
        return false;
    }
    // A model or feature libvirt's cpu_map does not know is refused at define
    // (`cpu-model-unknown`, `cpu-feature-unknown` say so): nothing is compared at start. The
    // built-in table's word is not libvirt's (a newer libvirt may know the name, the finding is
    // a warning): judged on, and without libvirt's cpu_map the comparison is not made, as for
    // any CPU (`not-compared`).
    let unknown_model = child(cpu, "model")
        .and_then(crate::domain::model_name)
        .is_some_and(|m| facts.model_features(&m).is_none());
    let unknown_feature = crate::domain::cpu_features(cpu)
        .iter()
        .any(|(f, _)| !facts.feature_known(f))
        || misspelled(cpu);
    if (unknown_model || unknown_feature) && !facts.cpu_map_is_builtin() {
        return false;
    }
    let path = Path::new("the domain XML");
    // A CPU libvirt refuses to read: the `<cpu>` checks say why.
    let Ok(guest) = guest_cpu_of(dom, path) else {
        return false;
    };
    if !is_x86(dom.arch()) {
        return false;
    }
    let Some(start) = &facts.kvm_start else {
        // Under check='full' the `hypervisor` bit QEMU's KVM adds is refused whatever the host:
        // that needs no fact.
        if check == CpuCheck::Full && check_full(None, &guest, facts, out) {
            return true;
        }
        let why = facts
            .kvm_start_missing
            .as_deref()
            .unwrap_or("the host's CPU is not known");
        out.push(not_compared(&guest, check, why));
        return false;
    };
    // libvirt compares the guest CPU with the host's under `check='partial'` and `'full'` alike
    // before QEMU starts (`qemuProcessUpdateGuestCPU`: "the CPU is incompatible with host
    // CPU"); under `'full'` it then compares the CPU QEMU built (`qemuProcessVerifyCPU`).
    if !given_by_kvm(start, &guest, facts) {
        match compare_at_start(
            start,
            &guest,
            check,
            forbidden_lookup(start, &guest, facts),
            out,
        ) {
            Compared::Refused => return true,
            Compared::Passed => {}
            Compared::Not(why) => out.push(not_compared(&guest, check, &why)),
        }
    }
    check == CpuCheck::Full && check_full(Some(start), &guest, facts, out)
}

/// libvirt's comparison at start of a KVM `host-model` CPU under `check='partial'` (its default
/// for the mode) with the host's own CPU, as of a custom one (`qemuProcessUpdateGuestCPU`
/// compares any CPU but `host-passthrough` and `maximum` when its check is partial): the CPU is
/// its `<feature>`s, so only one it requires or forbids can be refused (seen with libvirt 9.0:
/// "the CPU is incompatible with host CPU: Host CPU does not provide required features: vmx",
/// "Host CPU provides forbidden feature 'avx512f'"). Returns whether libvirt refuses it.
fn check_host_model(
    dom: &Domain<'_>,
    cpu: Node<'_, '_>,
    facts: &DomainFacts<'_>,
    out: &mut Vec<Finding>,
) -> bool {
    if super::tcg::check_of(cpu, CpuMode::HostModel, "kvm") != CpuCheck::Partial
        || !is_x86(dom.arch())
    {
        return false;
    }
    let Ok(mut read) =
        crate::libvirt::cpu_def::CpuDef::read_as(cpu, crate::libvirt::cpu_def::CpuType::Guest)
    else {
        return false;
    };
    read.features
        .retain(|(_, p)| matches!(p, FeaturePolicy::Require | FeaturePolicy::Forbid));
    // A feature libvirt does not know is refused at define (`cpu-feature-unknown`).
    let unknown = read.features.iter().any(|(f, _)| !facts.feature_known(f));
    if read.features.is_empty() || unknown || misspelled(cpu) {
        return false;
    }
    let guest = GuestCpu {
        name: dom.name(),
        matching: CpuMatch::Exact,
        cpu: crate::libvirt::cpu_def::CpuDef {
            mode: None,
            model: None,
            vendor: None,
            ..read
        },
    };
    let why = match &facts.kvm_start {
        None => facts
            .kvm_start_missing
            .clone()
            .unwrap_or_else(|| "the host's CPU is not known".into()),
        Some(start) => match compare_as_libvirt(start, &guest) {
            Ok((c, _)) if c.verdict != Compatibility::Incompatible => return false,
            Ok((c, source)) => {
                let listed = forbidden_lookup(start, &guest, facts);
                return matches!(
                    refusal(&guest, CpuCheck::Partial, c, &source, listed, out),
                    Compared::Refused
                );
            }
            Err(why) => why,
        },
    };
    out.push(not_compared(&guest, CpuCheck::Partial, &why));
    false
}

/// Whether a `<feature>` of `cpu` is another spelling of a feature libvirt knows (`sse3`,
/// `SSE4.2`): libvirt refuses it at define (`cpu-feature-unknown` says so), nothing is compared.
fn misspelled(cpu: Node<'_, '_>) -> bool {
    cpu.children()
        .filter(|c| crate::xml::is_libvirt_element(*c, "feature"))
        .filter_map(|f| f.attribute("name"))
        .any(|name| crate::cpu::libvirt_spelling_of(name).is_some())
}

/// What [`compare_at_start`] came to.
enum Compared {
    /// libvirt refuses the start: the finding is out.
    Refused,
    /// The comparison passes (or is not libvirt's to make).
    Passed,
    /// Not made: the fact it needs, as a phrase.
    Not(String),
}

/// The guest CPU's model in a message: "model NAME", or "host-model" for a CPU without one
/// ([`check_host_model`]).
fn model_words(guest: &GuestCpu) -> String {
    guest
        .cpu
        .model
        .as_deref()
        .map_or_else(|| "host-model".to_string(), |m| format!("model {m}"))
}

/// The `not-compared` finding for `guest` under `check`: `why` names the missing fact.
fn not_compared(guest: &GuestCpu, check: CpuCheck, why: &str) -> Finding {
    let model = model_words(guest);
    not_compared_finding(format!(
        "not compared: libvirt compares this CPU ({model}, check='{}' under KVM) with the host's own CPU when it starts the guest, and refuses it when the host lacks a feature it requires; {why}",
        check.as_str()
    ))
}

/// The `not-compared` finding of `message`, with the facts that settle it as the fix.
fn not_compared_finding(message: String) -> Finding {
    Finding::warning(
        Code::NotCompared,
        message,
        "give the host's virsh capabilities and virsh domcapabilities (--caps, a <hostFacts>, or the daemon's snapshot), or run the tool on the host with its libvirt's cpu_map (/usr/share/libvirt/cpu_map)",
    )
}

/// libvirt's comparison at start of the guest CPU with the host's own CPU (module docs), under
/// `check` (`partial` or `full`): `cpu-incompatible` in libvirt's words when it refuses.
fn compare_at_start(
    start: &KvmStartHost<'_>,
    guest: &GuestCpu,
    check: CpuCheck,
    listed: Option<&BTreeSet<String>>,
    out: &mut Vec<Finding>,
) -> Compared {
    if plain_usable(start, guest) {
        return Compared::Passed;
    }
    let (c, source) = match compare_as_libvirt(start, guest) {
        Ok(compared) => compared,
        Err(why) => return Compared::Not(why),
    };
    if c.verdict != Compatibility::Incompatible {
        return Compared::Passed;
    }
    refusal(guest, check, c, &source, listed, out)
}

/// `guest` compared as libvirt compares it at start, and the CPU it is compared with, in a
/// message's words: the host's own CPU, or for a model its cpu_map does not mark `<check
/// partial='compat'/>` what KVM gives (libvirt 11.3 and later, module docs). Err: why the
/// comparison cannot be made (the cpu_map unread, the CPU to compare with not known).
fn compare_as_libvirt(
    start: &KvmStartHost<'_>,
    guest: &GuestCpu,
) -> Result<(Comparison, String), String> {
    let Some((map, loaded)) = start.loaded() else {
        return Err(format!(
            "libvirt's cpu_map could not be read as CPUID data ({})",
            start.host.x86_map().err().unwrap_or_default()
        ));
    };
    let via_kvm = guest
        .cpu
        .model
        .as_deref()
        .is_some_and(|m| map.partial_check_against_kvm(m));
    let against = if via_kvm {
        loaded.host_model.as_ref().map(|(h, s)| {
            (
                h,
                format!(
                    "what KVM gives (the host-model CPU of {s}), not this host's own CPU, for a model its cpu_map does not mark <check partial='compat'/>"
                ),
            )
        })
    } else {
        loaded
            .full
            .as_ref()
            .map(|(h, s)| (h, format!("this host's own CPU ({s})")))
    };
    let Some((host, source)) = against else {
        return Err(if via_kvm {
            "what KVM gives, which libvirt compares this model with, is not known (no kvm domcapabilities with a host-model CPU)".to_string()
        } else {
            format!(
                "the host's own CPU is not known: {}",
                start
                    .host
                    .host_cpu_unknown()
                    .unwrap_or("no capabilities host CPU of the guest's arch that names a model")
            )
        });
    };
    match compare(map, host, guest, Path::new("the domain XML")) {
        Ok(c) => Ok((c, source)),
        Err(e) => Err(format!("the comparison could not be made ({e})")),
    }
}

/// The features libvirt's "full" host CPU lists by name, where libvirt 9.0 and later look a
/// forbidden feature up before comparing ([`VersionRule::ForbiddenFeatureLookup`]; an unknown
/// version is judged as 9.0): None for an older libvirt, or when the host's own CPU is not known.
fn forbidden_lookup<'a>(
    start: &'a KvmStartHost<'_>,
    guest: &GuestCpu,
    facts: &DomainFacts<'_>,
) -> Option<&'a BTreeSet<String>> {
    // Decoded only for a guest that forbids a feature: a fleet judges many classes of hosts.
    let forbids = guest
        .cpu
        .features
        .iter()
        .any(|(_, p)| *p == FeaturePolicy::Forbid);
    if !forbids || facts.lacks(VersionRule::ForbiddenFeatureLookup) {
        return None;
    }
    let (map, loaded) = start.loaded()?;
    loaded.full_listed(map)
}

/// libvirt's refusal at start of `guest`, which comparison `c` with `source` (the CPU compared
/// with, in words) found incompatible: `cpu-incompatible`, naming the first forbidden feature
/// the "full" host CPU lists (`listed`, [`forbidden_lookup`]), else in the comparison's words. Under `check='full'` a CPU that only lacks features
/// is refused in the words of the check of the CPU QEMU built (`kvm-check-full`): here for
/// `match='minimum'`; for exact and strict [`check_full`] says it, and this passes.
fn refusal(
    guest: &GuestCpu,
    check: CpuCheck,
    c: Comparison,
    source: &str,
    listed: Option<&BTreeSet<String>>,
    out: &mut Vec<Finding>,
) -> Compared {
    // libvirt 9.0 and later look each forbidden feature up, in the guest's order, in the list
    // of its "full" host CPU first (`listed`: `virCPUCheckForbiddenFeatures`, "Host CPU provides
    // forbidden feature 'lm'"); one the host CPU has only through its model is left to the
    // comparison, whose words list every forbidden feature the host has (`c.message`: "Host CPU
    // provides forbidden features: avx512f"), as libvirt 7.0's always do.
    let forbidden = guest.cpu.features.iter().find(|(f, p)| {
        *p == FeaturePolicy::Forbid
            && c.forbidden.contains(f)
            && listed.is_some_and(|l| l.contains(f))
    });
    let model = model_words(guest);
    if forbidden.is_none() && check == CpuCheck::Full {
        // Under check='full' libvirt refuses a CPU the host lacks features of with the words
        // of its check of the CPU QEMU built (seen with libvirt 9.0 and 11.3: "guest CPU
        // doesn't match specification: missing features: svm" for match='minimum'; the
        // corpus's Skylake-Client-IBRS with match='exact' likewise): `kvm-check-full`, here for
        // match='minimum', by check_full for exact and strict.
        if guest.matching != CpuMatch::Minimum {
            return Compared::Passed;
        }
        out.push(Finding::error(
            Code::KvmCheckFull,
            format!(
                "guest CPU doesn't match specification: missing features: {} (check='full' under KVM, {model}, match='minimum': libvirt compares the CPU QEMU built with the one written and refuses the start; {source} lacks them)",
                c.missing.join(",")
            ),
            "require only features this host's CPU has (virsh capabilities), choose a model it provides, or run the guest on a host that has them",
        ));
        return Compared::Refused;
    }
    let reason = match forbidden {
        Some((f, _)) => format!("Host CPU provides forbidden feature '{f}'"),
        None => c.message.unwrap_or_else(|| "incompatible".into()),
    };
    out.push(Finding::error(
        Code::CpuIncompatible,
        format!(
            "the CPU is incompatible with host CPU: {reason} ({model}, check='{}' under KVM: libvirt compares the guest CPU with {source} and refuses the start)",
            check.as_str()
        ),
        if forbidden.is_some() {
            "remove the forbid policy of a feature this host's CPU has, or run the guest on a host without it"
        } else {
            "require only features this host's CPU has (virsh capabilities), choose a model it provides, or run the guest on a host that has them"
        },
    ));
    Compared::Refused
}

/// `check='full'` under KVM, `match` exact or strict (module docs): the CPU QEMU's KVM builds
/// has `hypervisor` unless the CPU written names it, and lacks what KVM's host-model CPU
/// (domcapabilities) lacks: `kvm-check-full` when either is so. With `match='minimum'` this part
/// finds nothing (seen):
/// libvirt updates such a CPU to what the host gives. Without the host's facts (`start` None)
/// only the `hypervisor` bit is judged: it needs none.
fn check_full(
    start: Option<&KvmStartHost<'_>>,
    guest: &GuestCpu,
    facts: &DomainFacts<'_>,
    out: &mut Vec<Finding>,
) -> bool {
    if guest.matching == CpuMatch::Minimum {
        return false;
    }
    // What QEMU's KVM adds to every vCPU (hypervisor, x2apic) and the CPU does not name.
    let extras = kvm_extras(guest, facts);
    let extra = !extras.is_empty();
    let path = Path::new("the domain XML");
    let loaded = start
        .filter(|s| !plain_usable(s, guest))
        .and_then(|s| s.loaded());
    let (missing, per) = match loaded {
        Some((
            map,
            Loaded {
                host_model: Some((host, source)),
                ..
            },
        )) => match compare(map, host, guest, path) {
            Ok(c) if !c.missing.is_empty() => (c.missing, format!("; missing per {source}")),
            _ => (Vec::new(), String::new()),
        },
        // What KVM gives is not known: whether QEMU drops a feature of the CPU is not either.
        Some(_) if !extra => {
            let model = guest.cpu.model.as_deref().unwrap_or("?");
            out.push(not_compared_finding(format!(
                "not compared: libvirt compares the CPU QEMU built (model {model}, check='full' under KVM) with the one written when it starts the guest, and refuses it when QEMU's KVM dropped a feature it requires; what KVM gives is not known (no kvm domcapabilities with a host-model CPU, nor QEMU's KVM host CPU in a fresh QEMU capability cache of this machine)"
            )));
            return false;
        }
        _ => (Vec::new(), String::new()),
    };
    if !extra && missing.is_empty() {
        return false;
    }
    let mut parts = Vec::new();
    if extra {
        parts.push(format!("extra features: {}", extras.join(",")));
    }
    if !missing.is_empty() {
        parts.push(format!("missing features: {}", missing.join(",")));
    }
    let model = guest.cpu.model.as_deref().unwrap_or("?");
    out.push(Finding::error(
        Code::KvmCheckFull,
        format!(
            "guest CPU doesn't match specification: {} (check='full' under KVM, model {model}: libvirt compares the CPU QEMU built with the one written and refuses the start; QEMU's KVM sets the hypervisor and x2apic bits in every vCPU, may add others, and drops what KVM cannot give{per})",
            parts.join(", ")
        ),
        "use check='partial' (libvirt's default under KVM) or match='minimum', or write the CPU as the started guest's live XML shows it",
    ));
    true
}

/// The features QEMU's KVM adds to every vCPU that the CPU written lacks, which libvirt's
/// `check='full'` names extra, in CPUID order as libvirt lists them:
///
/// * `x2apic`, which QEMU's KVM turns on in a model without it (`kvm_default_props` of QEMU's
///   target/i386/kvm/kvm-cpu.c: "x2apic" "on"; seen: "extra features: apic,x2apic" for
///   pentium3, "vme,x2apic" for kvm64), when the model's features are known and the CPU does
///   not name it;
/// * `hypervisor`, which QEMU's KVM sets unless the CPU disables it, and libvirt expects when
///   the CPU names it at all (`optional` becomes `require`; seen with libvirt 9.0): extra only
///   when the CPU does not name it (a `forbid` is refused by the comparison before).
fn kvm_extras(guest: &GuestCpu, facts: &DomainFacts<'_>) -> Vec<&'static str> {
    let named = |name: &str| guest.cpu.features.iter().any(|(f, _)| f == name);
    let model_has = |name: &str| {
        guest
            .cpu
            .model
            .as_deref()
            .and_then(|m| facts.model_features(m))
            .map(|f| f.contains(name))
    };
    [
        (
            "x2apic",
            !named("x2apic") && model_has("x2apic") == Some(false),
        ),
        ("hypervisor", !named("hypervisor")),
    ]
    .into_iter()
    .filter_map(|(f, extra)| extra.then_some(f))
    .collect()
}

#[cfg(test)]
mod tests;
