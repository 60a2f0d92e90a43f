//! libvirt's architecture names (`virArch`, `src/util/virarch.c`): the names it writes in XML,
//! and the families the tool's rules depend on.
//!
//! A domain's arch stays the string it names (a message quotes it as written); [`Arch`] says
//! which family it is of, once, instead of comparing strings in every rule.

/// Every architecture name libvirt knows (`virArchData`, libvirt 9.0 and 11.3): a host `<cpu>`
/// naming another is refused ("Unknown architecture %s").
pub const KNOWN: [&str; 37] = [
    "alpha",
    "armv6l",
    "armv7l",
    "armv7b",
    "aarch64",
    "cris",
    "i686",
    "ia64",
    "lm32",
    "loongarch64",
    "m68k",
    "microblaze",
    "microblazeel",
    "mips",
    "mipsel",
    "mips64",
    "mips64el",
    "openrisc",
    "parisc",
    "parisc64",
    "ppc",
    "ppcle",
    "ppc64",
    "ppc64le",
    "ppcemb",
    "riscv32",
    "riscv64",
    "s390",
    "s390x",
    "sh4",
    "sh4eb",
    "sparc",
    "sparc64",
    "unicore32",
    "x86_64",
    "xtensa",
    "xtensaeb",
];

/// The architectures whose rules the tool knows, by libvirt's name; every other name is
/// [`Arch::Other`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    /// `x86_64`.
    X86_64,
    /// `i686` (32-bit x86).
    I686,
    /// `aarch64`.
    Aarch64,
    /// `armv7l` (32-bit Arm).
    Armv7l,
    /// `armv6l`.
    Armv6l,
    /// `ppc64` (big endian).
    Ppc64,
    /// `ppc64le`.
    Ppc64le,
    /// `s390x`.
    S390x,
    /// Any other name (or none).
    Other,
}

impl Arch {
    /// The architecture libvirt's name `name` stands for.
    #[must_use]
    pub fn of(name: &str) -> Arch {
        match name {
            "x86_64" => Arch::X86_64,
            "i686" => Arch::I686,
            "aarch64" => Arch::Aarch64,
            "armv7l" => Arch::Armv7l,
            "armv6l" => Arch::Armv6l,
            "ppc64" => Arch::Ppc64,
            "ppc64le" => Arch::Ppc64le,
            "s390x" => Arch::S390x,
            _ => Arch::Other,
        }
    }

    /// Whether libvirt's x86 CPU driver handles it (`x86_64`, `i686`: one cpu_map, CPUID
    /// data, custom models).
    #[must_use]
    pub fn is_x86(self) -> bool {
        matches!(self, Arch::X86_64 | Arch::I686)
    }

    /// Whether it is Arm (`aarch64`, `armv7l`, `armv6l`): no `host-model` CPU in libvirt.
    #[must_use]
    pub fn is_arm(self) -> bool {
        matches!(self, Arch::Aarch64 | Arch::Armv7l | Arch::Armv6l)
    }
}

/// Whether `name` is an x86 architecture libvirt's x86 CPU driver handles (`x86_64`, `i686`).
#[must_use]
pub fn is_x86(name: &str) -> bool {
    Arch::of(name).is_x86()
}

/// Whether `name` is an architecture libvirt knows (`virArchData`: `x86_64`, `aarch64`,
/// `s390x`...).
#[must_use]
pub fn is_known(name: &str) -> bool {
    KNOWN.contains(&name)
}

/// The arch of the machine the tool runs on, in libvirt's spelling (`x86_64`, `aarch64`,
/// `s390x`, `ppc64le`, `i686`).
#[must_use]
pub fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86" => "i686",
        "powerpc64" if cfg!(target_endian = "little") => "ppc64le",
        "powerpc64" => "ppc64",
        "arm" => "armv7l",
        other => other,
    }
}

/// Whether two arches are one family for virtualization (an i686 guest runs natively on an
/// x86_64 host, under KVM too).
#[must_use]
pub fn same_family(guest: &str, host: &str) -> bool {
    let (g, h) = (Arch::of(guest), Arch::of(host));
    (g.is_x86() && h.is_x86())
        || (matches!(g, Arch::Aarch64 | Arch::Armv7l) && matches!(h, Arch::Aarch64 | Arch::Armv7l))
        || guest == host
}

/// Whether a host CPU of arch `host_cpu` (`virsh capabilities`' `<host><cpu><arch>`) is the one
/// libvirt compares a KVM guest of arch `guest` with: the same arch, or both x86 (an i686
/// guest on an x86_64 host is compared with its x86_64 CPU: `virCPUCompare` takes the host's
/// arch, `qemuProcessUpdateGuestCPU`).
#[must_use]
pub fn host_cpu_serves(guest: &str, host_cpu: Option<&str>) -> bool {
    host_cpu.is_some_and(|h| h == guest || (Arch::of(h).is_x86() && Arch::of(guest).is_x86()))
}

/// The arch QEMU names its system emulator after (`qemu-system-ARCH`), as libvirt maps it
/// (`virQEMUCapsArchToString`): `i386` for i686, `arm` for armv6l and armv7l, `ppc64` for
/// ppc64le, the arch itself otherwise.
#[must_use]
pub fn qemu_arch(arch: &str) -> &str {
    match Arch::of(arch) {
        Arch::I686 => "i386",
        Arch::Armv6l | Arch::Armv7l => "arm",
        Arch::Ppc64le => "ppc64",
        _ => arch,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families() {
        assert!(is_x86("x86_64") && is_x86("i686") && !is_x86("aarch64") && !is_x86(""));
        assert!(Arch::of("armv7l").is_arm() && !Arch::of("s390x").is_arm());
        assert!(same_family("i686", "x86_64") && same_family("armv7l", "aarch64"));
        assert!(!same_family("aarch64", "x86_64") && same_family("s390x", "s390x"));
        assert!(is_known("loongarch64") && !is_known("x86-64"));
        assert_eq!(qemu_arch("i686"), "i386");
        assert_eq!(qemu_arch("armv7l"), "arm");
        assert_eq!(qemu_arch("ppc64le"), "ppc64");
        assert_eq!(qemu_arch("x86_64"), "x86_64");
    }
}
