//! The x86 CPUID features KVM never gives a guest, though a physical CPU lists them: what a host
//! known only by its physical CPU (`virsh capabilities`, a bare host `<cpu>`) has that no guest
//! of it can be given. `virsh domcapabilities`' `host-model` never lists them (it is what KVM and
//! QEMU can give), so a baseline over hosts with domcapabilities never holds them.

/// The x86 features KVM never reports in `KVM_GET_SUPPORTED_CPUID`, in libvirt's cpu_map names
/// (`x86_features.xml`), in CPUID order (leaf 1 ECX, then EDX).
///
/// Source: Linux `arch/x86/kvm/cpuid.c`, `kvm_set_cpu_caps()`, which writes the bits of CPUID
/// leaf 1 KVM never sets as zeros:
///
/// * ECX: `0 /* DTES64 */` (`dtes64`, bit 2), `0 /* MONITOR */` (`monitor`, bit 3),
///   `0 /* DS-CPL, VMX, SMX, EST */` (`ds_cpl` bit 4, `smx` bit 6, `est` bit 7; `vmx` bit 5 is
///   left out, see below), `0 /* TM2 */` (`tm2`, bit 8), `0 /* CNXTID */` (`cid`, bit 10),
///   `0 /* xTPR Update */` (`xtpr`, bit 14), `0 /* Reserved, DCA */` (`dca`, bit 18);
/// * EDX: `0 /* PSN */` (`pn`, bit 18), `0 /* Reserved, DS, ACPI */` (`ds` bit 21, `acpi`
///   bit 22), `0 /* HTT, TM, Reserved, PBE */` (`ht` bit 28, `tm` bit 29, `pbe` bit 31);
///
/// and of leaf 0x80000001 ECX (AMD): `0 /* ExtApicSpace */` (`extapic`, bit 3), `0 /* IBS */`
/// (`ibs`, bit 10), `0 /* SKINIT, WDT, LWP */` (`skinit` bit 12, `wdt` bit 13, `lwp` bit 15),
/// and the bits the mask does not name at all, NodeId (`nodeid_msr`, bit 19) and the northbridge
/// performance counters (`perfctr_nb`, bit 24; both names from libvirt 10.x's cpu_map on).
///
/// libvirt calls a guest CPU requiring one of them incompatible with the CPU QEMU can give under
/// KVM (`virsh hypervisor-cpu-compare`: "Host CPU does not provide required features"; tried on
/// libvirt 9.0 / QEMU 7.2 and 11.3 / 10.0 for every name here) and refuses to start it ("the CPU
/// is incompatible with host CPU", tried with `ds`; `ht` is the exception, below), while
/// `virsh cpu-baseline` of physical CPUs keeps them.
pub const KVM_NEVER_GIVES: [&str; 22] = [
    "dtes64",
    "monitor",
    "ds_cpl",
    "smx",
    "est",
    "tm2",
    "cid",
    "xtpr",
    "dca",
    "pn",
    "ds",
    "acpi",
    // HTT: QEMU sets it itself in the guest's CPUID from the topology (more than one logical
    // CPU per package, `cpu_x86_cpuid` leaf 1), whatever the CPU model says, so leaving it out
    // of a guest CPU costs the guest nothing. libvirt 9.0 starts a KVM guest requiring it
    // (tried, 1 and 2 vCPUs), but `hypervisor-cpu-compare` calls it incompatible, and so would
    // the tool's own `compare` and the hook's check on migrate against a host's domcapabilities.
    "ht",
    "tm",
    "pbe", // leaf 0x80000001 ECX (AMD)
    "extapic",
    "ibs",
    "skinit",
    "wdt",
    "lwp",
    "nodeid_msr",
    "perfctr_nb",
];
// Not here: `vmx` (ECX bit 5, also a zero in that list) because nested KVM gives it (`nested=1`,
// the host-model of such a host lists it), which a physical CPU cannot tell; `pdcm` because KVM
// reports it (QEMU clears it when the guest has no PMU, so the guest's `<pmu>` decides).

/// Whether KVM never gives a guest the x86 feature `name` (libvirt's name): one of
/// [`KVM_NEVER_GIVES`].
#[must_use]
pub fn kvm_never_gives(name: &str) -> bool {
    KVM_NEVER_GIVES.contains(&name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_is_libvirts_and_nested_vmx_is_kept() {
        // Named by libvirt 10.x's cpu_map on, not by 9.0's (the built-in table).
        let newer = ["nodeid_msr", "perfctr_nb"];
        for f in KVM_NEVER_GIVES.into_iter().filter(|f| !newer.contains(f)) {
            assert!(
                crate::cpu::is_known_x86_feature(f),
                "{f} is not libvirt's name"
            );
            assert_eq!(crate::cpu::normalize_feature(f).as_deref(), Some(f));
        }
        assert!(kvm_never_gives("ds") && kvm_never_gives("ht") && kvm_never_gives("pbe"));
        assert!(!kvm_never_gives("vmx") && !kvm_never_gives("pdcm") && !kvm_never_gives("ss"));
        // Linux's spelling is not libvirt's: callers hold libvirt names.
        assert!(!kvm_never_gives("ds-cpl"));
    }
}
