//! Which `<cpu mode>` libvirt offers a guest: by guest arch, virt type and host arch.
//!
//! The source of truth is domcapabilities (`<cpu><mode name='...' supported='yes|no'>`, per
//! emulator, arch, machine type and virt type); [`crate::domain_facts::DomainFacts`] uses it when a
//! host file gives it and this built-in table otherwise. The table was checked cell by cell against
//! libvirt 9.0 / QEMU 7.2 on an x86_64 host (define and start under TCG for every arch it emulates,
//! and domcapabilities; `tests/integration/libvirt.rs`), and against libvirt 11.3 / QEMU 10.0:
//!
//! | guest | `kvm` | `qemu` (TCG) |
//! |---|---|---|
//! | x86_64, i686 | all four | all but `host-passthrough`; `host-model` only on an x86 host |
//! | aarch64, armv7l | `host-passthrough`, `maximum`, `custom` | `maximum`, `custom` |
//!
//! `host-passthrough` never exists under TCG (libvirt: "CPU mode 'host-passthrough' for ... qemu
//! domain on ... host is not supported by hypervisor"), and `host-model` never on Arm (libvirt
//! has no host-model CPU for it). KVM runs only guests of the host's own arch, so for `kvm` the
//! host is taken to be the guest's arch: the answer holds on the host that will run it, wherever
//! the tool runs. Other arches (s390x, ppc64) are not in the table: no finding is made for them.

use crate::libvirt::arch::{Arch, same_family};
use crate::libvirt::cpu_def::CpuMode;

/// The four CPU modes, in the order the tool lists them ([`CpuMode::ALL`]).
pub const MODES: [CpuMode; 4] = CpuMode::ALL;

/// The host arch libvirt names in its refusal: the host's own for TCG, the guest's for KVM
/// (KVM runs native guests only).
#[must_use]
pub fn host_arch_for<'a>(guest_arch: &'a str, virt_type: &str, host_arch: &'a str) -> &'a str {
    if virt_type == "kvm" {
        guest_arch
    } else {
        host_arch
    }
}

/// Whether libvirt offers `mode` to a `guest_arch` guest of `virt_type` (`kvm`, `qemu`) on a
/// `host_arch` host, per the table above; None when the table does not say.
#[must_use]
pub fn builtin_supported(
    mode: CpuMode,
    guest_arch: &str,
    virt_type: &str,
    host_arch: &str,
) -> Option<bool> {
    let arch = Arch::of(guest_arch);
    let (x86, arm) = (arch.is_x86(), matches!(arch, Arch::Aarch64 | Arch::Armv7l));
    let tcg = virt_type == "qemu";
    if !matches!(virt_type, "kvm" | "qemu") {
        return None;
    }
    match mode {
        CpuMode::HostPassthrough if tcg => Some(false),
        CpuMode::HostPassthrough | CpuMode::Maximum | CpuMode::Custom if x86 || arm => Some(true),
        CpuMode::HostModel if arm => Some(false),
        CpuMode::HostModel if x86 => Some(!tcg || same_family(guest_arch, host_arch)),
        _ => None,
    }
}

/// The mode to use instead of an unsupported one, in order of preference: the nearest that keeps
/// what the operator asked for (a host-based CPU rather than a named model).
#[must_use]
pub fn fallbacks(mode: CpuMode) -> &'static [CpuMode] {
    match mode {
        CpuMode::HostModel => &[CpuMode::HostPassthrough, CpuMode::Maximum],
        CpuMode::HostPassthrough => &[CpuMode::Maximum, CpuMode::HostModel],
        CpuMode::Maximum => &[CpuMode::HostPassthrough, CpuMode::HostModel],
        CpuMode::Custom => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table() {
        let s = |m: &str, g, t, h| builtin_supported(CpuMode::parse(m).unwrap(), g, t, h);
        for m in MODES {
            assert_eq!(s(m.as_str(), "x86_64", "kvm", "x86_64"), Some(true), "{m}");
        }
        assert_eq!(
            s("host-passthrough", "x86_64", "qemu", "x86_64"),
            Some(false)
        );
        assert_eq!(s("host-model", "x86_64", "qemu", "x86_64"), Some(true));
        assert_eq!(s("host-model", "x86_64", "qemu", "aarch64"), Some(false));
        assert_eq!(s("host-model", "aarch64", "kvm", "x86_64"), Some(false));
        assert_eq!(
            s("host-passthrough", "aarch64", "kvm", "x86_64"),
            Some(true)
        );
        assert_eq!(s("host-model", "aarch64", "qemu", "x86_64"), Some(false));
        assert_eq!(s("maximum", "aarch64", "qemu", "x86_64"), Some(true));
        assert_eq!(s("host-model", "s390x", "kvm", "s390x"), None);
        assert_eq!(
            s("host-passthrough", "s390x", "qemu", "x86_64"),
            Some(false)
        );
        assert_eq!(s("maximum", "x86_64", "xen", "x86_64"), None);
    }
}
