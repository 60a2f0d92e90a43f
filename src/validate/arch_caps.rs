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
//! `<feature policy='disable' name='arch-capabilities'/>` in the `<cpu>` starts every one of
//! them (seen on QEMU 5.2, 7.2 and 10.0).
//!
//! A warning, `kvm-arch-capabilities`: the document is right; the host's QEMU is what fails. It
//! needs the vendor (domcapabilities' host-model CPU under KVM), the QEMU release
//! (`--qemu-version`, or libvirt's QEMU capability cache) and, from QEMU 10.1 on, the machine
//! type's version; without any of them nothing is said.

use crate::domain::{Domain, cpu_features, cpu_mode, model_name};
use crate::domain_facts::DomainFacts;
use crate::finding::{Code, Finding};
use crate::host::{Host, Sourced};
use crate::libvirt::arch::is_x86;
use crate::libvirt::cpu::{CpuMatch, CpuMode, FeaturePolicy};
use crate::libvirt::version::{LibvirtVersion, QemuVersion};
use crate::xml::child;
use roxmltree::Node;

/// The first QEMU that leaves `arch-capabilities` out of a KVM guest CPU on an AMD host, for
/// machine types of its own release and later: 10.1.0 (module docs).
pub const QEMU_HIDES_ARCH_CAPABILITIES_ON_AMD: QemuVersion = QemuVersion(LibvirtVersion {
    major: 10,
    minor: 1,
    micro: 0,
});

/// The feature, in libvirt's spelling (`x86_features.xml`: CPUID 7.0 EDX bit 29).
const FEATURE: &str = "arch-capabilities";

/// Which guest CPUs carry `arch-capabilities` on the host ([`gather`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carriers {
    /// QEMU before 10.1: every CPU that has it, by its mode, model or features, KVM's
    /// host-model CPU requiring it.
    Every,
    /// QEMU 10.1 and later on a machine type before 10.1: the CPUs that take what KVM gives,
    /// `host-passthrough` and `maximum`, besides a `<feature>` that asks for it.
    HostBased,
}

/// The host facts behind the warning, gathered only when they say it can happen: an x86 KVM
/// guest, domcapabilities whose host-model CPU is AMD's, and a QEMU release before
/// [`QEMU_HIDES_ARCH_CAPABILITIES_ON_AMD`] (with a host-model CPU requiring
/// `arch-capabilities`), or from it on with a machine type before 10.1.
#[derive(Debug, Clone)]
pub struct ArchCapsHost {
    /// The host's QEMU release and where it came from.
    pub qemu: Sourced<QemuVersion>,
    /// The domcapabilities file that says the host is AMD (and what KVM gives).
    pub domcaps: String,
    /// Which CPUs carry it.
    pub carriers: Carriers,
    /// The machine type, for the message.
    pub machine: String,
}

/// The release of a versioned x86 machine type (`pc-q35-10.0`, `pc-i440fx-5.2`: (10, 0),
/// (5, 2)); None for an alias (`pc`, `q35`) or another family's name.
fn machine_release(machine: &str) -> Option<(u32, u32)> {
    let version = machine
        .strip_prefix("pc-q35-")
        .or_else(|| machine.strip_prefix("pc-i440fx-"))?;
    let (major, minor) = version.split_once('.')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// [`ArchCapsHost`] for `dom` on `host`, or None when a fact is missing or says it cannot happen.
#[must_use]
pub fn gather(dom: &Domain<'_>, host: &Host) -> Option<ArchCapsHost> {
    if dom.virt_type() != "kvm" || !is_x86(dom.arch()) {
        return None;
    }
    let domcaps = host.domcaps_for(dom.arch(), "kvm", dom.machine())?;
    let hm = domcaps.host_model.as_ref()?;
    if hm.vendor.as_deref() != Some("AMD") {
        return None;
    }
    let qemu = host.qemu_version(dom.arch(), dom.emulator().as_deref())?;
    let carriers = if qemu.value < QEMU_HIDES_ARCH_CAPABILITIES_ON_AMD {
        let gives = hm
            .features
            .iter()
            .any(|(f, p)| f == FEATURE && *p == FeaturePolicy::Require);
        gives.then_some(Carriers::Every)?
    } else {
        // An alias names QEMU's newest machine type, never one before 10.1 here.
        let old = machine_release(dom.machine()).is_some_and(|r| r < (10, 1));
        old.then_some(Carriers::HostBased)?
    };
    Some(ArchCapsHost {
        qemu,
        domcaps: domcaps.source.clone(),
        carriers,
        machine: dom.machine().to_string(),
    })
}

/// Why the guest CPU `cpu` carries `arch-capabilities` on a host of `carriers` (a phrase for
/// the message), or None when it does not: a `<feature>` that asks for it; the modes that take
/// what KVM gives (`host-passthrough`, `maximum`); with [`Carriers::Every`] also `host-model`,
/// `match='minimum'` (libvirt adds the host-model CPU's features) and a model that has it; never
/// when a `<feature>` disables or forbids it.
fn carries(cpu: Node<'_, '_>, carriers: Carriers, facts: &DomainFacts<'_>) -> Option<&'static str> {
    let features = cpu_features(cpu);
    let named = features.iter().find(|(f, _)| f == FEATURE).map(|(_, p)| *p);
    match named {
        Some(Some(FeaturePolicy::Disable | FeaturePolicy::Forbid)) => return None,
        Some(_) => return Some("its <feature name='arch-capabilities'>"),
        None => {}
    }
    match (cpu_mode(cpu)?, carriers) {
        (CpuMode::HostPassthrough, _) => Some("host-passthrough: KVM gives it"),
        (CpuMode::Maximum, _) => Some("maximum: KVM gives it"),
        (_, Carriers::HostBased) => None,
        (CpuMode::HostModel, Carriers::Every) => {
            Some("host-model: KVM's host-model CPU requires it")
        }
        (CpuMode::Custom, Carriers::Every) => {
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
    let Some(why) = dom
        .cpus()
        .first()
        .and_then(|c| carries(*c, host.carriers, facts))
    else {
        return;
    };
    let v = host.qemu.value;
    let hides = QEMU_HIDES_ARCH_CAPABILITIES_ON_AMD;
    let (because, fix) = match host.carriers {
        Carriers::Every => (
            format!("QEMU before {hides} writes MSR 0x10a"),
            format!(
                "add <feature policy='disable' name='arch-capabilities'/> to the <cpu> (starts on QEMU 5.2, 7.2 and 10.0 on AMD), or run QEMU {hides} or later, which leaves it out on AMD"
            ),
        ),
        Carriers::HostBased => (
            format!(
                "QEMU keeps it for machine type {} (before 10.1: x-arch-cap-always-on) and writes MSR 0x10a",
                host.machine
            ),
            "add <feature policy='disable' name='arch-capabilities'/> to the <cpu>, or move the guest to a machine type of 10.1 or later at a planned restart".to_string(),
        ),
    };
    out.push(Finding::warning(
        Code::KvmArchCapabilities,
        format!(
            "QEMU {v} cannot start this CPU on this AMD host: it carries arch-capabilities ({why}), {because}, which KVM on AMD refuses, so QEMU aborts at start (\"failed to set MSR 0x10a\"; QEMU {v} per {}, AMD per {})",
            host.qemu.source, host.domcaps
        ),
        fix,
    ));
}
