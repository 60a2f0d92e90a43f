//! A KVM guest CPU carrying `arch-capabilities` on an AMD host whose QEMU is older than 10.1:
//! QEMU aborts at start.
//!
//! KVM emulates the `IA32_ARCH_CAPABILITIES` MSR (0x10a) on every vendor and lists
//! `arch-capabilities` among what it gives a guest, so domcapabilities' host-model CPU on an AMD
//! host requires it. QEMU before 10.1 then writes the MSR at vCPU reset, KVM on AMD refuses some
//! of its bits, and QEMU aborts: "error: failed to set MSR 0x10a to 0x69 ... kvm_buf_set_msrs:
//! Assertion `ret == cpu->kvm_msr_buf->nmsrs' failed". Seen on AMD EPYC virtual machines with
//! nested KVM under QEMU 5.2, 7.2 and 10.0 (libvirt 7.0, 9.0, 11.3) for `host-model`,
//! `host-passthrough`, `maximum` and `match='minimum'` (which libvirt fills from the host-model
//! CPU); QEMU 11.1 starts them all (`../shared/corpus/kvm-truth/`, `tests/integration/kvm.rs`).
//! QEMU 10.1 leaves `arch-capabilities` out of a KVM CPU on AMD by default (libvirt 12.5 NEWS).
//! `<feature policy='disable' name='arch-capabilities'/>` in the `<cpu>` starts every one of them
//! on QEMU 5.2, 7.2 and 10.0 (seen).
//!
//! A warning, `kvm-arch-capabilities`: the document is right; the host's QEMU is what fails. It
//! needs three facts, and without any of them nothing is said: the vendor and KVM's
//! `arch-capabilities` (domcapabilities' host-model CPU under KVM) and the QEMU release
//! (`--qemu-version`, or libvirt's QEMU capability cache).

use crate::domain::{Domain, cpu_features, cpu_mode, model_name};
use crate::domain_facts::DomainFacts;
use crate::finding::{Code, Finding};
use crate::host::{Host, Sourced};
use crate::libvirt::arch::is_x86;
use crate::libvirt::cpu::{CpuMatch, CpuMode, FeaturePolicy};
use crate::libvirt::version::{LibvirtVersion, QemuVersion};
use crate::xml::child;
use roxmltree::Node;

/// The first QEMU that leaves `arch-capabilities` out of a KVM guest CPU on an AMD host by
/// default: 10.1.0 (libvirt 12.5 NEWS; module docs).
pub const QEMU_HIDES_ARCH_CAPABILITIES_ON_AMD: QemuVersion = QemuVersion(LibvirtVersion {
    major: 10,
    minor: 1,
    micro: 0,
});

/// The feature, in libvirt's spelling (`x86_features.xml`: CPUID 7.0 EDX bit 29).
const FEATURE: &str = "arch-capabilities";

/// The host facts behind the warning, gathered only when all three say it can happen: an x86
/// KVM guest, domcapabilities whose host-model CPU is AMD's and requires `arch-capabilities`,
/// and a QEMU release before [`QEMU_HIDES_ARCH_CAPABILITIES_ON_AMD`].
#[derive(Debug, Clone)]
pub struct ArchCapsHost {
    /// The host's QEMU release and where it came from.
    pub qemu: Sourced<QemuVersion>,
    /// The domcapabilities file that says the host is AMD and KVM gives `arch-capabilities`.
    pub domcaps: String,
}

/// [`ArchCapsHost`] for `dom` on `host`, or None when a fact is missing or says it cannot happen.
#[must_use]
pub fn gather(dom: &Domain<'_>, host: &Host) -> Option<ArchCapsHost> {
    if dom.virt_type() != "kvm" || !is_x86(dom.arch()) {
        return None;
    }
    let domcaps = host.domcaps_for(dom.arch(), "kvm", dom.machine())?;
    let hm = domcaps.host_model.as_ref()?;
    let gives = hm
        .features
        .iter()
        .any(|(f, p)| f == FEATURE && *p == FeaturePolicy::Require);
    if hm.vendor.as_deref() != Some("AMD") || !gives {
        return None;
    }
    let qemu = host.qemu_version(dom.arch(), dom.emulator().as_deref())?;
    (qemu.value < QEMU_HIDES_ARCH_CAPABILITIES_ON_AMD).then(|| ArchCapsHost {
        qemu,
        domcaps: domcaps.source.clone(),
    })
}

/// Why the guest CPU `cpu` carries `arch-capabilities` (a phrase for the message), or None when
/// it does not: the modes that take what KVM gives (`host-model`, `host-passthrough`,
/// `maximum`), `match='minimum'` (libvirt adds the host-model CPU's features), a model that has
/// it, or a feature that asks for it; never when a `<feature>` disables or forbids it.
fn carries(cpu: Node<'_, '_>, facts: &DomainFacts<'_>) -> Option<&'static str> {
    let features = cpu_features(cpu);
    let named = features.iter().find(|(f, _)| f == FEATURE).map(|(_, p)| *p);
    match named {
        Some(Some(FeaturePolicy::Disable | FeaturePolicy::Forbid)) => return None,
        Some(_) => return Some("its <feature name='arch-capabilities'>"),
        None => {}
    }
    match cpu_mode(cpu)? {
        CpuMode::HostModel => Some("host-model: KVM's host-model CPU requires it"),
        CpuMode::HostPassthrough => Some("host-passthrough: KVM gives it"),
        CpuMode::Maximum => Some("maximum: KVM gives it"),
        CpuMode::Custom => {
            let model = child(cpu, "model").and_then(model_name)?;
            if CpuMatch::parse(cpu.attribute("match").unwrap_or("exact")) == Some(CpuMatch::Minimum)
            {
                return Some(
                    "match='minimum': libvirt adds the features of KVM's host-model CPU, which requires it",
                );
            }
            facts
                .model_features(&model)
                .is_some_and(|f| f.contains(FEATURE))
                .then_some("its model has it")
        }
    }
}

/// The warning `kvm-arch-capabilities` for the first `<cpu>` of `dom` (module docs).
pub(super) fn check(dom: &Domain<'_>, facts: &DomainFacts<'_>, out: &mut Vec<Finding>) {
    let Some(host) = &facts.arch_caps else {
        return;
    };
    let Some(why) = dom.cpus().first().and_then(|c| carries(*c, facts)) else {
        return;
    };
    let v = host.qemu.value;
    out.push(Finding::warning(
        Code::KvmArchCapabilities,
        format!(
            "QEMU {v} cannot start this CPU on this AMD host: it carries arch-capabilities ({why}), and QEMU before {QEMU_HIDES_ARCH_CAPABILITIES_ON_AMD} writes MSR 0x10a, which KVM on AMD refuses, so QEMU aborts at start (\"failed to set MSR 0x10a\"; QEMU {v} per {}, AMD and KVM's arch-capabilities per {})",
            host.qemu.source, host.domcaps
        ),
        format!(
            "add <feature policy='disable' name='arch-capabilities'/> to the <cpu> (starts on QEMU 5.2, 7.2 and 10.0 on AMD), or run QEMU {QEMU_HIDES_ARCH_CAPABILITIES_ON_AMD} or later, which leaves it out on AMD"
        ),
    ));
}
