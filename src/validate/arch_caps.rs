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

use crate::domain::{Domain, cpu_features, cpu_mode, model_name};
use crate::domain_facts::DomainFacts;
use crate::finding::{Code, Finding};
use crate::host::{Host, Sourced};
use crate::libvirt::arch::is_x86;
use crate::libvirt::cpu::{CpuMatch, CpuMode, FeaturePolicy};
use crate::libvirt::version::{LibvirtVersion, QemuVersion};
use crate::xml::child;
use roxmltree::Node;
use std::sync::OnceLock;

/// The first QEMU that leaves `arch-capabilities` out of a KVM guest CPU on an AMD host, for
/// machine types of its own release and later: 10.1.0 (module docs).
pub const QEMU_HIDES_ARCH_CAPABILITIES_ON_AMD: QemuVersion = QemuVersion(LibvirtVersion {
    major: 10,
    minor: 1,
    micro: 0,
});

/// The feature, in libvirt's spelling (`x86_features.xml`: CPUID 7.0 EDX bit 29).
const FEATURE: &str = "arch-capabilities";

pub use crate::cpu::ARCH_CAPABILITIES_BITS;

/// The host facts behind the warning, gathered for an x86 KVM guest when domcapabilities' KVM
/// host-model CPU is AMD's. The QEMU release is read from the host ([`Host::qemu_version`]: the
/// QEMU capability cache, for the hook at every guest start) only for a CPU that may carry
/// `arch-capabilities`, on first need.
#[derive(Debug, Clone)]
pub struct ArchCapsHost<'h> {
    /// The host, asked for its QEMU release.
    host: &'h Host,
    /// The guest's arch and `<emulator>`, for that question.
    arch: String,
    emulator: Option<String>,
    /// The QEMU release, once asked.
    qemu: OnceLock<Option<Sourced<QemuVersion>>>,
    /// The domcapabilities file that says the host is AMD (and what KVM gives).
    pub domcaps: String,
    /// Whether KVM's host-model CPU requires `arch-capabilities` (QEMU before 10.1): then
    /// `host-model` and `match='minimum'` carry it, with its bits.
    pub host_model_has_it: bool,
    /// Whether the machine type is a versioned one before 10.1: QEMU gives `host-passthrough`
    /// and `maximum` the MSR there whatever its release (`x-arch-cap-always-on` from 10.1 on).
    pub old_machine: bool,
    /// The machine type, for the message.
    pub machine: String,
}

impl ArchCapsHost<'_> {
    /// The host's QEMU release and where it came from, read on first need; None when no source
    /// gives it.
    fn qemu(&self) -> Option<&Sourced<QemuVersion>> {
        self.qemu
            .get_or_init(|| self.host.qemu_version(&self.arch, self.emulator.as_deref()))
            .as_ref()
    }

    /// Whether QEMU gives `host-passthrough` and `maximum` the MSR: before 10.1, or from 10.1 on
    /// for a machine type before 10.1. None when the release is needed and not known.
    fn host_based_have_it(&self) -> Option<bool> {
        if self.old_machine {
            return Some(true);
        }
        Some(self.qemu()?.value < QEMU_HIDES_ARCH_CAPABILITIES_ON_AMD)
    }
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

/// [`ArchCapsHost`] for `dom` on `host`, or None when the host is not known to be AMD. Reads
/// nothing but the domcapabilities already loaded.
#[must_use]
pub fn gather<'h>(dom: &Domain<'_>, host: &'h Host) -> Option<ArchCapsHost<'h>> {
    if dom.virt_type() != "kvm" || !is_x86(dom.arch()) {
        return None;
    }
    let domcaps = host.domcaps_for(dom.arch(), "kvm", dom.machine())?;
    let hm = domcaps.host_model.as_ref()?;
    if hm.vendor.as_deref() != Some("AMD") {
        return None;
    }
    let host_model_has_it = hm
        .features
        .iter()
        .any(|(f, p)| f == FEATURE && *p == FeaturePolicy::Require);
    Some(ArchCapsHost {
        host,
        arch: dom.arch().to_string(),
        emulator: dom.emulator(),
        qemu: OnceLock::new(),
        domcaps: domcaps.source.clone(),
        host_model_has_it,
        // An alias names QEMU's newest machine type, never one before 10.1 from QEMU 10.1 on.
        old_machine: machine_release(dom.machine()).is_some_and(|r| r < (10, 1)),
        machine: dom.machine().to_string(),
    })
}

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
        CpuMode::HostModel if host.host_model_has_it => {
            Some("host-model: KVM's host-model CPU requires it")
        }
        CpuMode::Custom => {
            let model = child(cpu, "model").and_then(model_name);
            let minimum = CpuMatch::parse(cpu.attribute("match").unwrap_or("exact"))
                == Some(CpuMatch::Minimum);
            if model.is_some() && minimum && host.host_model_has_it {
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
