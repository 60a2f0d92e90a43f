//! What the tool knows of x86 guest CPUs besides libvirt's documents: the x86-64 psABI levels
//! ([`Level`]), libvirt's spelling of feature names ([`normalize_feature`]) and QEMU's default
//! model; the features KVM never gives a guest ([`KVM_NEVER_GIVES`]); and libvirt's x86 CPU
//! algorithms on CPUID data (libvirt's `src/cpu/cpu_x86.c`): the baseline of several CPUs
//! ([`baseline`]) and the comparison of a guest CPU with a host's ([`compare`]). The CPU models'
//! contents are libvirt's cpu_map ([`crate::libvirt::cpu_map`]).

pub mod baseline;
pub mod compare;
mod error;
mod features;
mod kvm;
mod level;

pub use error::CpuError;
pub use features::{
    is_known_x86_feature, libvirt_spelling_of, normalize_feature, x86_feature_spellings,
};
pub use kvm::{
    ARCH_CAPABILITIES_BITS, KVM_NEVER_GIVES, NeverDisabled, kvm_never_gives, subtract_kvm_never,
};
pub use level::Level;

/// The QEMU default CPU model libvirt uses when a domain names none, by guest arch (QEMU
/// `target/i386/cpu.h`: `qemu64` for x86_64, `qemu32` for i686).
#[must_use]
pub fn default_model(arch: &str) -> Option<&'static str> {
    match arch {
        "x86_64" => Some("qemu64"),
        "i686" => Some("qemu32"),
        _ => None,
    }
}
