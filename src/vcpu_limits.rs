//! Machine-type vCPU limits that QEMU itself defines, for when no host file says.
//!
//! The limit belongs to the *versioned* machine type (QEMU sets `MachineClass::max_cpus` per
//! version in `hw/i386/pc_q35.c`, `hw/i386/pc_piix.c`, `hw/arm/virt.c`,
//! `hw/s390x/s390-virtio-ccw.c`). This table is the last resort of
//! [`crate::host::Host::machine_limit`]; it is said so wherever it is used.

use crate::libvirt::arch::is_x86;

/// The most vCPUs any QEMU machine type takes: 4096 (QEMU's largest `MachineClass::max_cpus`:
/// `pc-q35-9.0` and later in `hw/i386/pc_q35.c`, `pseries`' `SPAPR_IRQ_NR_IPIS` of 0x1000 in
/// `include/hw/ppc/spapr_irq.h`; libvirt's own `QEMU_GUEST_VCPU_MAX_ID` is 4096 too). A limit or
/// a maximum above it cannot be a QEMU guest's, so the rewrite refuses it rather than writing a
/// `<vcpus>` entry per vCPU of a number a file made up.
pub const QEMU_MAX_VCPUS: u32 = 4096;

/// The CPUs a GICv2 serves: QEMU's `GIC_NCPU`, 8 (`include/hw/intc/arm_gic_common.h`); its
/// `virt` machine refuses more with that GIC at start (`hw/arm/virt.c`, `machvirt_init`:
/// "Number of SMP CPUs requested (9) exceeds max CPUs supported by machine 'mach-virt' (8)").
pub const GICV2_MAX_CPUS: u32 = 8;

/// The vCPU limit the interrupt controller sets below the machine type's: an aarch64 `virt`
/// guest under TCG (`type='qemu'`) whose `<features><gic>` names no version, or `2`, runs on
/// GICv2, so [`GICV2_MAX_CPUS`]. libvirt gives such a guest GICv2 at define (its stored form says
/// `<gic version='2'/>`: seen on libvirt 7.0, 9.0, 11.3 and 12.8, each refusing 9 vCPUs at start
/// with QEMU's sentence above and starting them with `<gic version='3'/>`). None otherwise (KVM
/// takes the host's GIC; GICv3 takes the machine type's limit).
#[must_use]
pub fn gic_limit(
    arch: &str,
    virt_type: &str,
    machine: &str,
    gic_version: Option<&str>,
) -> Option<BuiltinLimit> {
    let virt = machine == "virt" || machine.starts_with("virt-");
    (arch == "aarch64" && virt_type == "qemu" && virt && matches!(gic_version, None | Some("2")))
        .then_some(BuiltinLimit {
            max_cpus: GICV2_MAX_CPUS,
            rule: "GICv2, which libvirt gives a TCG virt guest without <gic version='3'/>: QEMU's GIC_NCPU, \"exceeds max CPUs supported by machine 'mach-virt' (8)\"",
        })
}

/// A limit from the built-in table, with the rule it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuiltinLimit {
    /// Maximum vCPUs.
    pub max_cpus: u32,
    /// Which pattern matched, for messages ("pc-q35-2.8 … 8.0: 288").
    pub rule: &'static str,
}

/// Parse "MAJOR.MINOR" (a trailing ".0" or more parts are ignored).
fn version(v: &str) -> Option<(u32, u32)> {
    let mut it = v.split('.');
    let major = it.next()?.parse().ok()?;
    let minor = it.next().map_or(Some(0), |m| m.parse().ok())?;
    Some((major, minor))
}

/// A versioned machine type's family and version: `pc-q35-11.1` → (`pc-q35`, (11, 1)),
/// `pc-i440fx-5.2` → (`pc-i440fx`, (5, 2)), `virt-9.0` → (`virt`, (9, 0)); the family is the
/// name up to its last `-` followed by a `MAJOR.MINOR` version (QEMU's naming of versioned
/// types, `hw/i386/pc_q35.c`'s `DEFINE_Q35_MACHINE`). None for an alias (`pc`, `q35`) or a name
/// without a version (`isapc`, `microvm`).
#[must_use]
pub fn split_versioned(machine: &str) -> Option<(&str, (u32, u32))> {
    let (family, v) = machine.rsplit_once('-')?;
    if !v.contains('.') || family.is_empty() {
        return None;
    }
    version(v).map(|v| (family, v))
}

/// Which versions of a machine-type family a row of [`TABLE`] covers.
#[derive(Clone, Copy)]
enum Versions {
    /// Any name with the prefix, versioned or not.
    Any,
    /// A parsable version up to MAJOR.MINOR inclusive.
    Through(u32, u32),
    /// Any parsable version.
    All,
}

/// One row: guest arches, machine-type name prefix, versions, limit, and the rule for messages.
struct Row(
    &'static [&'static str],
    &'static str,
    Versions,
    u32,
    &'static str,
);

const X86: &[&str] = &["x86_64", "i686"];

/// QEMU's limits, first matching row wins (rows of one prefix in version order; RHEL's before
/// upstream's, whose prefix they share).
const TABLE: &[Row] = &[
    Row(
        X86,
        "pc-i440fx-rhel",
        Versions::Any,
        240,
        "pc-i440fx-rhel*: 240",
    ),
    Row(X86, "pc-i440fx-", Versions::All, 255, "pc-i440fx-*: 255"),
    Row(
        X86,
        "pc-q35-rhel",
        Versions::Through(8, u32::MAX),
        384,
        "pc-q35-rhel7/8.*: 384",
    ),
    Row(
        X86,
        "pc-q35-rhel",
        Versions::Through(9, u32::MAX),
        710,
        "pc-q35-rhel9.*: 710",
    ),
    Row(
        X86,
        "pc-q35-rhel",
        Versions::All,
        4096,
        "pc-q35-rhel10.*: 4096",
    ),
    Row(
        X86,
        "pc-q35-",
        Versions::Through(2, 7),
        255,
        "pc-q35-2.7 and older: 255",
    ),
    Row(
        X86,
        "pc-q35-",
        Versions::Through(8, 0),
        288,
        "pc-q35-2.8 to 8.0: 288",
    ),
    Row(
        X86,
        "pc-q35-",
        Versions::Through(8, u32::MAX),
        1024,
        "pc-q35-8.1 and 8.2: 1024",
    ),
    Row(
        X86,
        "pc-q35-",
        Versions::All,
        4096,
        "pc-q35-9.0 and later: 4096",
    ),
    // pc-0.11 … pc-1.3: the old names of pc-i440fx.
    Row(X86, "pc-", Versions::All, 255, "pc-* (i440fx): 255"),
    Row(
        &["aarch64"],
        "virt-",
        Versions::Through(2, 12),
        255,
        "virt-2.12 and older: 255",
    ),
    Row(
        &["aarch64"],
        "virt-",
        Versions::All,
        512,
        "virt-3.0 and later: 512",
    ),
];

/// The built-in vCPU limit of a versioned machine type, or None when the name matches no known
/// version pattern (an alias such as `pc`/`q35`/`virt` included: its version depends on the QEMU
/// installed).
///
/// Table (QEMU's `MachineClass::max_cpus` of each versioned type): `pc-i440fx-*` 255, RHEL
/// `pc-i440fx-rhel*` 240;
/// `pc-q35-2.7` and older 255, `pc-q35-2.8` … `8.0` 288, `8.1`/`8.2` 1024, `9.0` and later 4096;
/// RHEL 9 `pc-q35-rhel9.*` 710, RHEL 10 `pc-q35-rhel10.*` 4096, older RHEL q35 (`rhel7`/`rhel8`)
/// 384 (RHEL 8 downstream; not reproduced here: a capabilities file overrides it); aarch64
/// `virt-2.12` and older 255, newer 512; `s390-ccw-virtio-*` 248.
#[must_use]
pub fn builtin_limit(arch: &str, machine: &str) -> Option<BuiltinLimit> {
    if arch == "s390x" && (machine == "s390-ccw-virtio" || machine.starts_with("s390-ccw-virtio-"))
    {
        return Some(BuiltinLimit {
            max_cpus: 248,
            rule: "s390-ccw-virtio: 248",
        });
    }
    TABLE
        .iter()
        .filter(|Row(arches, ..)| arches.contains(&arch))
        .find(|Row(_, prefix, versions, ..)| {
            let Some(rest) = machine.strip_prefix(prefix) else {
                return false;
            };
            match (versions, version(rest)) {
                (Versions::Any, _) => true,
                (Versions::All, v) => v.is_some(),
                (Versions::Through(major, minor), v) => v.is_some_and(|v| v <= (*major, *minor)),
            }
        })
        .map(|Row(.., max_cpus, rule)| BuiltinLimit {
            max_cpus: *max_cpus,
            rule,
        })
}

/// A vCPU count every machine type of this family allows, whatever its version (alias or not):
/// 240 for x86 `pc*`/`q35`/`pc-q35-*` (RHEL's i440fx is the lowest, 240), 255 for aarch64 `virt*`,
/// 248 for s390x `s390-ccw-virtio*`. A domain at or below it needs no machine-limit lookup, which
/// spares the hook from reading libvirt's QEMU capability cache on every guest start.
#[must_use]
pub fn family_floor(arch: &str, machine: &str) -> Option<u32> {
    match arch {
        _ if is_x86(arch)
            && (machine == "pc" || machine == "q35" || machine.starts_with("pc-")) =>
        {
            Some(240)
        }
        "aarch64" if machine == "virt" || machine.starts_with("virt-") => Some(255),
        "s390x" if machine.starts_with("s390-ccw-virtio") => Some(248),
        _ => None,
    }
}

/// Whether a machine type is a q35 (ICH9) one, the only x86 type that allows more than 255 vCPUs
/// (libvirt: "more than 255 vCPUs are only supported on q35-based machine types").
#[must_use]
pub fn is_q35(machine: &str) -> bool {
    machine == "q35" || machine.starts_with("pc-q35-")
}

/// KVM's vCPU limit from the kernel: `ioctl(/dev/kvm, KVM_CHECK_EXTENSION, KVM_CAP_MAX_VCPUS)`,
/// falling back to `KVM_CAP_NR_VCPUS` (Linux `Documentation/virt/kvm/api.rst`, 4.4). None when
/// `/dev/kvm` cannot be opened (no KVM, or no permission).
#[must_use]
pub fn kvm_max_vcpus() -> Option<u32> {
    const KVM_CAP_NR_VCPUS: usize = 9;
    const KVM_CAP_MAX_VCPUS: usize = 66;
    let f = std::fs::File::open("/dev/kvm").ok()?;
    let check = |cap: usize| -> Option<u32> {
        // SAFETY: KVM_CHECK_EXTENSION takes the capability as an integer argument, passes no
        // memory and answers with the ioctl's return value, which is what `CheckExtension`
        // declares; the descriptor is /dev/kvm's, open for the call.
        let r = unsafe { rustix::ioctl::ioctl(&f, CheckExtension(cap)) }.ok()?;
        u32::try_from(r).ok().filter(|n| *n > 0)
    };
    check(KVM_CAP_MAX_VCPUS).or_else(|| check(KVM_CAP_NR_VCPUS))
}

/// `KVM_CHECK_EXTENSION` (`_IO(KVMIO = 0xAE, 0x03)`) for a capability: an integer in, the
/// answer as the ioctl's return value (rustix's `IntegerSetter` drops that value).
struct CheckExtension(usize);

// SAFETY: the opcode is KVM_CHECK_EXTENSION's, which reads no userspace memory: the argument is
// the capability number itself (not a pointer), nothing is written (IS_MUTATING false), and the
// output is the call's return value.
unsafe impl rustix::ioctl::Ioctl for CheckExtension {
    type Output = rustix::ioctl::IoctlOutput;

    const IS_MUTATING: bool = false;

    fn opcode(&self) -> rustix::ioctl::Opcode {
        rustix::ioctl::opcode::none(0xAE, 0x03)
    }

    fn as_ptr(&mut self) -> *mut std::ffi::c_void {
        // The capability travels as the ioctl's integer argument (its bits as a pointer value).
        std::ptr::without_provenance_mut(self.0)
    }

    unsafe fn output_from_ptr(
        out: rustix::ioctl::IoctlOutput,
        _: *mut std::ffi::c_void,
    ) -> rustix::io::Result<Self::Output> {
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versioned_types() {
        let l = |a, m| builtin_limit(a, m).map(|l| l.max_cpus);
        assert_eq!(l("x86_64", "pc-i440fx-7.2"), Some(255));
        assert_eq!(l("x86_64", "pc-i440fx-rhel7.6.0"), Some(240));
        assert_eq!(l("x86_64", "pc-q35-2.7"), Some(255));
        assert_eq!(l("x86_64", "pc-q35-2.8"), Some(288));
        assert_eq!(l("x86_64", "pc-q35-7.2"), Some(288));
        assert_eq!(l("x86_64", "pc-q35-8.0"), Some(288));
        assert_eq!(l("x86_64", "pc-q35-8.1"), Some(1024));
        assert_eq!(l("x86_64", "pc-q35-8.2"), Some(1024));
        assert_eq!(l("x86_64", "pc-q35-9.0"), Some(4096));
        assert_eq!(l("x86_64", "pc-q35-10.1"), Some(4096));
        assert_eq!(l("x86_64", "pc-q35-rhel9.4.0"), Some(710));
        assert_eq!(l("x86_64", "pc-q35-rhel10.0.0"), Some(4096));
        assert_eq!(l("aarch64", "virt-2.12"), Some(255));
        assert_eq!(l("aarch64", "virt-7.2"), Some(512));
        assert_eq!(l("s390x", "s390-ccw-virtio-7.2"), Some(248));
        for alias in ["pc", "q35", "virt", "pc-q35-x", "isapc"] {
            assert_eq!(l("x86_64", alias), None, "{alias}");
        }
    }
}
