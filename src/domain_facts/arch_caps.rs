//! What the warning `kvm-arch-capabilities` ([`crate::validate`]; QEMU aborts a KVM guest CPU
//! carrying `arch-capabilities` on an AMD host) needs of the host: that it is AMD, whether KVM's
//! host-model CPU requires the feature, and the QEMU release, asked on first need.

use crate::domain::Domain;
use crate::host::{Host, Sourced};
use crate::libvirt::arch::is_x86;
use crate::libvirt::cpu_def::FeaturePolicy;
use crate::libvirt::version::{LibvirtVersion, QemuVersion};
use std::sync::OnceLock;

/// The first QEMU that leaves `arch-capabilities` out of a KVM guest CPU on an AMD host, for
/// machine types of its own release and later: 10.1.0 (module docs).
pub const QEMU_HIDES_ARCH_CAPABILITIES_ON_AMD: QemuVersion = QemuVersion(LibvirtVersion {
    major: 10,
    minor: 1,
    micro: 0,
});

/// The feature, in libvirt's spelling (`x86_features.xml`: CPUID 7.0 EDX bit 29).
pub(crate) const FEATURE: &str = "arch-capabilities";

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
    /// What says the host is AMD, in words: the domcapabilities file, the capabilities host
    /// CPU, or this machine's CPUID.
    pub domcaps: String,
    /// Whether KVM's host-model CPU requires `arch-capabilities` (QEMU before 10.1): then
    /// `host-model` and `match='minimum'` carry it, with its bits. Asked of domcapabilities
    /// when given, else on first need of the QEMU capability cache's `<hostCPU type='kvm'>`
    /// (the CPU libvirt makes the host-model CPU from); None when neither says.
    host_model: OnceLock<Option<bool>>,
    /// Whether [`ArchCapsHost::host_model_has_it`] is read from the cache (no domcapabilities).
    host_model_from_cache: bool,
    /// Whether the machine type is a versioned one before 10.1: QEMU gives `host-passthrough`
    /// and `maximum` the MSR there whatever its release (`x-arch-cap-always-on` from 10.1 on).
    pub old_machine: bool,
    /// The machine type, for the message.
    pub machine: String,
}

impl ArchCapsHost<'_> {
    /// The host's QEMU release and where it came from, read on first need; None when no source
    /// gives it.
    pub(crate) fn qemu(&self) -> Option<&Sourced<QemuVersion>> {
        self.qemu
            .get_or_init(|| self.host.qemu_version(&self.arch, self.emulator.as_deref()))
            .as_ref()
    }

    /// Whether KVM's host-model CPU requires `arch-capabilities` (field docs); false when no
    /// source says.
    pub(crate) fn host_model_has_it(&self) -> bool {
        self.host_model
            .get_or_init(|| {
                if !self.host_model_from_cache {
                    return None;
                }
                let cpu = self
                    .host
                    .kvm_host_cpu_from_cache(&self.arch, self.emulator.as_deref())?;
                Some(cpu.value.iter().any(|p| p == FEATURE))
            })
            .unwrap_or(false)
    }

    /// Whether QEMU gives `host-passthrough` and `maximum` the MSR: before 10.1, or from 10.1 on
    /// for a machine type before 10.1. None when the release is needed and not known.
    pub(crate) fn host_based_have_it(&self) -> Option<bool> {
        if self.old_machine {
            return Some(true);
        }
        Some(self.qemu()?.value < QEMU_HIDES_ARCH_CAPABILITIES_ON_AMD)
    }
}

/// The release of a versioned x86 machine type (`pc-q35-10.0`, `pc-i440fx-5.2`: (10, 0),
/// (5, 2)); None for an alias (`pc`, `q35`) or another family's name.
pub(crate) fn machine_release(machine: &str) -> Option<(u32, u32)> {
    let version = machine
        .strip_prefix("pc-q35-")
        .or_else(|| machine.strip_prefix("pc-i440fx-"))?;
    let (major, minor) = version.split_once('.')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// [`ArchCapsHost`] for `dom` on `host`, or None when the host is not known to be AMD: per
/// KVM's domcapabilities (their host-model CPU's vendor), else the host's own CPU (a
/// capabilities host CPU given, or this machine's CPUID vendor string, read without decoding
/// it: a host as found). Reads no file.
#[must_use]
pub fn gather<'h>(dom: &Domain<'_>, host: &'h Host) -> Option<ArchCapsHost<'h>> {
    if dom.virt_type() != "kvm" || !is_x86(dom.arch()) {
        return None;
    }
    let given = host
        .domcaps_for(dom.arch(), "kvm", dom.machine())
        .and_then(|d| Some((d, d.host_model.as_ref()?)));
    let (amd_per, host_model) = match given {
        Some((d, hm)) => {
            if hm.vendor.as_deref() != Some("AMD") {
                return None;
            }
            let has_it = hm
                .features
                .iter()
                .any(|(f, p)| f == FEATURE && *p == FeaturePolicy::Require);
            (d.source.clone(), OnceLock::from(Some(has_it)))
        }
        None => (host.own_vendor_is_amd(dom.arch())?, OnceLock::new()),
    };
    Some(ArchCapsHost {
        host,
        arch: dom.arch().to_string(),
        emulator: dom.emulator(),
        qemu: OnceLock::new(),
        domcaps: amd_per,
        host_model_from_cache: given.is_none(),
        host_model,
        // An alias names QEMU's newest machine type, never one before 10.1 from QEMU 10.1 on.
        old_machine: machine_release(dom.machine()).is_some_and(|r| r < (10, 1)),
        machine: dom.machine().to_string(),
    })
}
