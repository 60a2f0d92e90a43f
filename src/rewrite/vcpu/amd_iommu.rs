//! An existing AMD IOMMU above 255 x86 vCPUs ([`crate::amd_iommu`]): kept and completed where
//! the host's libvirt (12.2.0 and later, [`VersionRule::X2apicIommu`]) and QEMU (9.0.0 and
//! later, when its release is known) take it; refused, naming the release that would, where
//! they do not.

use super::VcpuResult;
use super::iommu_driver::switch_on;
use crate::amd_iommu::{EIM_REFUSAL, XTSUP_SINCE, has_xtsup};
use crate::domain_facts::{DomainFacts, VersionRule};
use crate::finding::{Code, Finding};
use roxmltree::Node;

/// `<iommu model='amd'>` (`i`) for more than 255 vCPUs: `<driver intremap='on' xtsup='on'/>`,
/// written out (libvirt 12.2 switches on only what is not written, and `xtsup` only with a QEMU
/// whose capabilities have `amd-iommu.xtsup`; QEMU 10.0 and 11.1 carry the refusal "AMD IOMMU
/// with x2APIC configuration requires xtsup=on"), so the document says what the guest gets on
/// any host that takes it. Returns false, with an error finding, where the host cannot:
/// * a libvirt before 11.5.0 refuses the model itself ([`VersionRule::AmdIommu`]);
/// * a libvirt before 12.2.0, or of an unknown release (judged by libvirt 9.0's rules), asks
///   `eim` of every IOMMU: "more than 255 vCPUs require extended interrupt mode enabled on the
///   iommu device" (`qemuValidateDomainDefCpu`; seen with 11.3 for an AMD IOMMU that 11.3's
///   parser takes no further);
/// * a QEMU before 9.0.0 ([`XTSUP_SINCE`]) has no `xtsup` on `amd-iommu`.
pub(super) fn complete(
    text: &str,
    i: Node<'_, '_>,
    q: char,
    rule: &str,
    facts: &DomainFacts<'_>,
    r: &mut VcpuResult,
) -> bool {
    if let Some(refusal) = refusal(facts) {
        r.notes.finding(
            Finding::error(
                Code::IommuModel,
                refusal,
                "run the guest on libvirt 12.2 or later with QEMU 9.0 or later, replace the IOMMU with <iommu model='intel'>, or set vcpu.iommu = \"never\" (at most 255 vCPUs)",
            )
            .rule(rule),
        );
        return false;
    }
    switch_on(text, i, ("amd", ["intremap", "xtsup"], false), q, rule, r);
    true
}

/// Why the host cannot run more than 255 vCPUs with an AMD IOMMU, in one sentence naming the
/// release that would, or None where it can.
fn refusal(facts: &DomainFacts<'_>) -> Option<String> {
    let host = facts.libvirt_rules();
    if facts.lacks(VersionRule::AmdIommu) {
        return Some(format!(
            "more than 255 vCPUs with <iommu model='amd'> need libvirt 12.2.0 or later (an AMD IOMMU in XTSup mode), and {host} refuses the model itself (\"Invalid value for attribute 'model' in element 'iommu': 'amd'.\"; libvirt 7.0: \"unknown IOMMU model: amd\"; the model came with 11.5.0)"
        ));
    }
    if !facts.applies(VersionRule::X2apicIommu) {
        return Some(format!(
            "more than 255 vCPUs with <iommu model='amd'> need libvirt 12.2.0 or later (an AMD IOMMU in XTSup mode), and {host} refuses them: \"{EIM_REFUSAL}\" (it asks eim of every IOMMU model, and an AMD IOMMU has none)"
        ));
    }
    let qemu = facts.amd_iommu_qemu.as_ref()?;
    (!has_xtsup(qemu.value)).then(|| {
        format!(
            "more than 255 vCPUs with <iommu model='amd'> need QEMU {XTSUP_SINCE} or later (its amd-iommu's xtsup property), and the host has QEMU {} (from {})",
            qemu.value, qemu.source
        )
    })
}
