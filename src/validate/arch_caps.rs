//! A KVM guest CPU carrying `arch-capabilities` on an AMD host: QEMU aborts at start.
//!
//! KVM emulates the `IA32_ARCH_CAPABILITIES` MSR (0x10a) on every vendor and lists
//! `arch-capabilities` among what it gives a guest. QEMU then writes the MSR at vCPU reset, KVM
//! on AMD refuses some of its bits, and QEMU aborts: "error: failed to set MSR 0x10a to 0x69 ...
//! kvm_buf_set_msrs: Assertion `ret == cpu->kvm_msr_buf->nmsrs' failed". QEMU 10.1 stopped
//! exposing it on AMD (d3a24134e3, "target/i386: do not expose ARCH_CAPABILITIES on AMD CPU"),
//! except for machine types before 10.1, which keep it (the compat property
//! `x-arch-cap-always-on`, `pc_compat_10_0`). So, seen on AMD EPYC virtual machines with nested
//! KVM (`../shared/corpus/kvm-truth/`, `tests/integration/kvm.rs`):
//!
//! * QEMU 5.2, 7.2 and 10.0 (libvirt 7.0, 9.0, 11.3): domcapabilities' host-model CPU requires
//!   `arch-capabilities`, and `host-model`, `host-passthrough`, `maximum` and `match='minimum'`
//!   (which libvirt fills from the host-model CPU) abort, whatever the machine type;
//! * QEMU 11.1 (libvirt 12.8): the host-model CPU lacks it, and those start, but for
//!   `host-passthrough` and `maximum` (which take what KVM gives) on a machine type before 10.1
//!   (`pc-q35-5.2`, `pc-q35-10.0`, `pc-i440fx-9.2` abort; `pc-q35-10.1`, `q35` start).
//!
//! * any QEMU: a custom CPU whose model or features carry `arch-capabilities` and one of its
//!   bits (`Cooperlake`, or `mds-no` required beside it), and a `host-passthrough` CPU that asks
//!   for `arch-capabilities`, abort whatever the machine type (QEMU honours what is asked for).
//!
//! QEMU aborts only when the MSR it writes is not zero: `arch-capabilities` alone, with none of
//! its bits, starts (`Westmere` requiring it, on QEMU 5.2, 7.2 and 10.0).
//! `<feature policy='disable' name='arch-capabilities'/>` in the `<cpu>` starts every one of
//! them (seen on QEMU 5.2, 7.2 and 10.0).
//!
//! A warning, `kvm-arch-capabilities`: the document is right; the host's QEMU is what fails. It
//! needs the vendor (domcapabilities' host-model CPU under KVM), the QEMU release
//! (`--qemu-version`, or libvirt's QEMU capability cache) and, from QEMU 10.1 on, the machine
//! type's version; without any of them nothing is said.

use crate::cpu::ARCH_CAPABILITIES_BITS;
use crate::domain::{Domain, cpu_features, cpu_mode, model_name};
use crate::domain_facts::DomainFacts;
use crate::domain_facts::arch_caps::{
    ArchCapsHost, FEATURE, QEMU_HIDES_ARCH_CAPABILITIES_ON_AMD, machine_release,
};
use crate::finding::{Code, Finding};
use crate::libvirt::cpu_def::{CpuMatch, CpuMode, FeaturePolicy};
use crate::xml::child;
use roxmltree::Node;

/// Whether `name` is required by `features` (the `<feature>` list: no policy, `require`,
/// `force` or `optional`) or by the model's `model_features`, and not disabled or forbidden.
fn has(
    name: &str,
    features: &[(String, Option<FeaturePolicy>)],
    model_features: Option<&std::collections::BTreeSet<String>>,
) -> bool {
    match features.iter().find(|(f, _)| f == name).map(|(_, p)| *p) {
        Some(Some(FeaturePolicy::Disable | FeaturePolicy::Forbid)) => false,
        Some(_) => true,
        None => model_features.is_some_and(|m| m.contains(name)),
    }
}

/// Why the guest CPU `cpu` makes QEMU write a non-zero MSR 0x10a on `host` (a phrase for the
/// message), or None: `host-passthrough` and `maximum` where QEMU gives them the MSR (or the
/// CPU asks for `arch-capabilities`); `host-model` and `match='minimum'` where KVM's host-model
/// CPU requires it; a custom CPU whose model or features carry `arch-capabilities` and one of
/// its bits ([`ARCH_CAPABILITIES_BITS`]), on any QEMU. Never when a `<feature>` disables or
/// forbids `arch-capabilities`.
fn carries(
    cpu: Node<'_, '_>,
    host: &ArchCapsHost,
    facts: &DomainFacts<'_>,
) -> Option<&'static str> {
    let features = cpu_features(cpu);
    let named = features.iter().find(|(f, _)| f == FEATURE).map(|(_, p)| *p);
    if matches!(
        named,
        Some(Some(FeaturePolicy::Disable | FeaturePolicy::Forbid))
    ) {
        return None;
    }
    let explicit = named.is_some();
    match cpu_mode(cpu)? {
        CpuMode::HostPassthrough | CpuMode::Maximum
            if explicit || host.host_based_have_it() == Some(true) =>
        {
            Some("it takes what KVM gives, arch-capabilities with its bits")
        }
        CpuMode::HostModel if host.host_model_has_it() => {
            Some("host-model: KVM's host-model CPU requires it")
        }
        CpuMode::Custom => {
            let model = child(cpu, "model").and_then(model_name);
            let minimum = CpuMatch::parse(cpu.attribute("match").unwrap_or("exact"))
                == Some(CpuMatch::Minimum);
            if model.is_some() && minimum && host.host_model_has_it() {
                return Some(
                    "match='minimum': libvirt adds the features of KVM's host-model CPU, which requires it",
                );
            }
            let model_features = model.as_deref().and_then(|m| facts.model_features(m));
            let bits = ARCH_CAPABILITIES_BITS
                .iter()
                .any(|b| has(b, &features, model_features));
            (has(FEATURE, &features, model_features) && bits)
                .then_some("its model or features carry it with some of its bits")
        }
        _ => None,
    }
}

/// The warning `kvm-arch-capabilities` for the first `<cpu>` of `dom` (module docs).
pub(super) fn check(dom: &Domain<'_>, facts: &DomainFacts<'_>, out: &mut Vec<Finding>) {
    let Some(host) = &facts.arch_caps else {
        return;
    };
    let Some(why) = dom.cpus().first().and_then(|c| carries(*c, host, facts)) else {
        return;
    };
    // The release the message names (and the fix depends on): without it, nothing is said.
    let Some(qemu) = host.qemu() else {
        return;
    };
    let v = qemu.value;
    let hides = QEMU_HIDES_ARCH_CAPABILITIES_ON_AMD;
    let when = if v < hides {
        format!("QEMU before {hides} writes MSR 0x10a for it")
    } else if machine_release(&host.machine).is_some_and(|r| r < (10, 1)) {
        format!(
            "QEMU keeps it for machine type {} (before 10.1: x-arch-cap-always-on) and writes MSR 0x10a",
            host.machine
        )
    } else {
        "QEMU writes MSR 0x10a for a CPU that asks for it".to_string()
    };
    out.push(Finding::warning(
        Code::KvmArchCapabilities,
        format!(
            "QEMU {v} cannot start this CPU on this AMD host: it carries arch-capabilities ({why}), {when}, which KVM on AMD refuses, so QEMU aborts at start (\"failed to set MSR 0x10a\"; QEMU {v} per {}, AMD per {})",
            qemu.source, host.domcaps
        ),
        format!(
            "add <feature policy='disable' name='arch-capabilities'/> to the <cpu> (starts on QEMU 5.2, 7.2 and 10.0 on AMD); from QEMU {hides} on, a machine type of 10.1 or later leaves it out of host-passthrough and maximum"
        ),
    ));
}
