//! The x86 CPUID features KVM never gives a guest, though a physical CPU lists them: what a host
//! known only by its physical CPU (`virsh capabilities`, a bare host `<cpu>`) has that no guest
//! of it can be given. `virsh domcapabilities`' `host-model` never lists them (it is what KVM and
//! QEMU can give), so a baseline over hosts with domcapabilities never holds them.

use crate::libvirt::cpu_map::x86::X86Map;

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

/// Which of [`KVM_NEVER_GIVES`] [`subtract_kvm_never`] disables, besides taking them out of the
/// features a CPU lists. Its two users differ on purpose, though the CPU data is the same either
/// way (a feature the model lacks is not in its data, and those listed are taken out): only one
/// of the two CPUs is written where an operator reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NeverDisabled {
    /// Those the CPU's model has, in the cpu_map's order: for a guest CPU written into the
    /// domain XML (the cluster baseline,
    /// [`crate::cpu::baseline::leave_out_kvm_never`]), where a
    /// `<feature policy='disable'>` of a feature the model lacks would be an edit that does
    /// nothing.
    OfTheModel,
    /// Every one the cpu_map defines, in [`KVM_NEVER_GIVES`]' order, whatever the model: for a
    /// host CPU that is only compared as data, never written (the most KVM can give of a
    /// physical CPU, [`crate::cluster::hosts::ClusterHost::kvm_of_physical`]), which so says
    /// of itself that KVM gives none of them, without a look at its model.
    EveryDefined,
}

/// A CPU less the features KVM never gives a guest: those of [`KVM_NEVER_GIVES`] in `listed`
/// (its `<feature>` list, any policy, or its `require` list; `name` gives an entry's libvirt
/// name) are taken out, and the ones to add as `<feature policy='disable'>` are returned
/// (`which`, of the model `model` of `map`). A name `map` does not define is never returned:
/// libvirt, and the tool's compare, would refuse it.
pub fn subtract_kvm_never<'m, T>(
    map: &'m X86Map,
    model: Option<&str>,
    listed: &mut Vec<T>,
    name: impl Fn(&T) -> &str,
    which: NeverDisabled,
) -> Vec<&'m str> {
    listed.retain(|f| !kvm_never_gives(name(f)));
    match which {
        NeverDisabled::OfTheModel => model
            .and_then(|m| map.model(m))
            .map(|m| map.decode_features(&m.data))
            .unwrap_or_default()
            .into_iter()
            .filter(|f| kvm_never_gives(f))
            .collect(),
        NeverDisabled::EveryDefined => KVM_NEVER_GIVES
            .into_iter()
            .filter(|f| map.feature(f).is_some())
            .collect(),
    }
}

/// The features of the `IA32_ARCH_CAPABILITIES` MSR (0x10a) (libvirt's `x86_features.xml`, `<msr
/// index='0x0000010a'>`, as libvirt 12.8 lists them). QEMU aborts only when the MSR it writes is
/// not zero: a CPU carrying `arch-capabilities` with none of these bits starts (seen: `Westmere`
/// requiring `arch-capabilities` alone, on QEMU 5.2, 7.2 and 10.0 on AMD).
pub const ARCH_CAPABILITIES_BITS: [&str; 19] = [
    "rdctl-no",
    "ibrs-all",
    "rsba",
    "skip-l1dfl-vmentry",
    "ssb-no",
    "mds-no",
    "pschange-mc-no",
    "tsx-ctrl",
    "taa-no",
    "sbdr-ssdp-no",
    "fbsdp-no",
    "psdp-no",
    "fb-clear",
    "bhi-no",
    "pbrsb-no",
    "gds-no",
    "rfds-no",
    "rfds-clear",
    "its-no",
];

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

    /// Both ways take every never-given feature out of the list, any policy; `OfTheModel`
    /// returns only those the model has (core2duo: `monitor`), `EveryDefined` every one the map
    /// defines (the bookworm cpu_map names all of them).
    #[test]
    fn subtract_takes_out_and_returns_what_to_disable() {
        let map = X86Map::load(&crate::testdata::cpu_map()).unwrap();
        let listed = || vec!["monitor", "vmx", "ht", "avx"];
        let subtract = |model, which| {
            let mut list = listed();
            let disable = subtract_kvm_never(&map, model, &mut list, |f| f, which);
            assert_eq!(list, ["vmx", "avx"], "{which:?}");
            disable
        };
        assert_eq!(
            subtract(Some("core2duo"), NeverDisabled::OfTheModel),
            ["monitor"]
        );
        assert_eq!(
            subtract(Some("core2duo"), NeverDisabled::EveryDefined),
            KVM_NEVER_GIVES
        );
        // No model, one the map does not know, one with none of them: nothing to disable.
        for model in [None, Some("no-such-model"), Some("Nehalem")] {
            assert!(
                subtract(model, NeverDisabled::OfTheModel).is_empty(),
                "{model:?}"
            );
        }
    }
}
