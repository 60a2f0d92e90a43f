//! What an AMD IOMMU (`<iommu model='amd'>`, QEMU's `amd-iommu`) needs to carry more than 255
//! x86 vCPUs, and which QEMU gives it.
//!
//! An x86 vCPU with an APIC ID above 255 is reached by interrupts only in x2APIC mode, which an
//! emulated IOMMU's interrupt remapping must support: Intel's in extended interrupt mode (`eim`),
//! AMD's with the 128-bit IRTE format QEMU's `xtsup` property turns on ("Interrupt remapping
//! table supports x2apic mode ... Required to support routing interrupts to vCPUs with APIC IDs
//! larger than 0xff", QEMU's `-device amd-iommu` documentation). libvirt takes the model from
//! 11.5.0 ([`crate::domain_facts::VersionRule::AmdIommu`]) and lets it carry more than 255
//! vCPUs from 12.2.0 ([`crate::domain_facts::VersionRule::X2apicIommu`]).

use crate::domain::Domain;
use crate::host::{Host, Sourced};
use crate::libvirt::version::{LibvirtVersion, QemuVersion};
use crate::xml::{child, is_libvirt_element};

/// libvirt 12.2's refusal of more than 255 x86 vCPUs ([`crate::domain_facts::VersionRule::X2apicIommu`],
/// `qemuValidateDomainDefCpu`; seen with 12.8).
pub const X2APIC_REFUSAL: &str = "more than 255 vCPUs require either IOAPIC in QEMU or an iommu device with EIM or XTSup mode enabled";

/// libvirt's refusal of more than 255 vCPUs before 12.2, whatever the IOMMU's model (seen with
/// 7.0, 9.0 and 11.3).
pub const EIM_REFUSAL: &str =
    "more than 255 vCPUs require extended interrupt mode enabled on the iommu device";

/// The first QEMU whose `amd-iommu` has the `xtsup` property: 9.0.0 (Bui Quang Minh's series
/// "Support x2APIC mode with TCG accelerator", merged for 9.0, whose patch "amd_iommu: report
/// x2APIC support to the operating system" adds `DEFINE_PROP_BOOL("xtsup", AMDVIState, xtsup,
/// false)` to `hw/i386/amd_iommu.c`). Seen: Debian 12's QEMU 7.2 has no `xtsup` (nor libvirt's
/// capability flag `amd-iommu.xtsup`); Debian 13's 10.0 and forky's 11.1 have it, and 11.1's
/// capability cache lists `amd-iommu.xtsup`, without which libvirt 12.2 and later do not switch
/// `xtsup` on (`qemuDomainIOMMUDefPostParse`, `QEMU_CAPS_AMD_IOMMU_XTSUP`).
pub const XTSUP_SINCE: QemuVersion = QemuVersion(LibvirtVersion {
    major: 9,
    minor: 0,
    micro: 0,
});

/// The `<driver>` attributes libvirt refuses on an AMD IOMMU at define: "iommu model 'amd'
/// doesn't support some additional attributes" (`virDomainIOMMUDefValidate`,
/// `src/conf/domain_validate.c`; each refused alone with libvirt 12.8, which defines `intremap`,
/// `xtsup`, `passthrough` and `iotlb` on it).
pub const AMD_REFUSED: [&str; 4] = ["caching_mode", "eim", "aw_bits", "dma_translation"];

/// Whether the domain's first `<devices><iommu>` is an AMD one (libvirt reads the first only
/// for what more than 255 vCPUs need).
#[must_use]
pub fn has_amd_iommu(dom: &Domain<'_>) -> bool {
    child(dom.root(), "devices")
        .and_then(|d| d.children().find(|c| is_libvirt_element(*c, "iommu")))
        .is_some_and(|i| i.attribute("model") == Some("amd"))
}

/// The QEMU release an AMD IOMMU's `xtsup` depends on ([`XTSUP_SINCE`]): asked of `host` only
/// when the domain has an AMD IOMMU and `many` (its vCPUs, now or by a rule, can pass 255);
/// None otherwise or when no source says (then nothing is judged of the QEMU).
#[must_use]
pub fn qemu_release(dom: &Domain<'_>, host: &Host, many: bool) -> Option<Sourced<QemuVersion>> {
    if !many || !has_amd_iommu(dom) {
        return None;
    }
    host.qemu_version(dom.arch(), dom.emulator().as_deref())
}

/// Whether `qemu` has `amd-iommu.xtsup` ([`XTSUP_SINCE`]).
#[must_use]
pub fn has_xtsup(qemu: QemuVersion) -> bool {
    qemu >= XTSUP_SINCE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xtsup_came_with_qemu_9_0() {
        let v = |major, minor| {
            QemuVersion(LibvirtVersion {
                major,
                minor,
                micro: 0,
            })
        };
        assert!(!has_xtsup(v(7, 2)));
        assert!(!has_xtsup(v(8, 2)));
        assert!(has_xtsup(v(9, 0)));
        assert!(has_xtsup(v(10, 0)));
    }
}
