//! `<devices><iommu>` as libvirt's parser and `virDomainIOMMUDefValidate`
//! (`src/conf/domain_validate.c`) judge it at define, whatever the vCPU count: a model the host's
//! libvirt knows, and on a virtio or AMD IOMMU none of the `<driver>` attributes that are Intel's.
//! (What more than 255 vCPUs need of the IOMMU is judged with the vCPUs, in `vcpu`.)

use crate::domain::Domain;
use crate::domain_facts::{DomainFacts, VersionRule};
use crate::finding::{Code, Finding};
use crate::xml::{child, is_libvirt_element};

/// The `<driver>` attributes libvirt refuses on a virtio IOMMU (`virDomainIOMMUDefValidate`;
/// each refused alone on libvirt 9.0, 11.3 and 12.8), but `aw_bits`, which
/// [`VersionRule::VirtioIommuAwBits`] lets through from 12.1.0. Attributes a libvirt does not
/// parse (9.0 has no `dma_translation`) are ignored by it, and are not listed here.
const VIRTIO_REFUSED: [&str; 4] = ["intremap", "caching_mode", "eim", "iotlb"];

/// Every `<iommu>` of the domain: its model known to the host's libvirt, its driver attributes
/// ones the model takes.
pub(super) fn check(dom: &Domain<'_>, facts: &DomainFacts<'_>, out: &mut Vec<Finding>) {
    let Some(devices) = child(dom.root(), "devices") else {
        return;
    };
    for iommu in devices
        .children()
        .filter(|c| is_libvirt_element(*c, "iommu"))
    {
        if iommu.attribute("model") == Some("amd") {
            check_amd(iommu, facts, out);
            continue;
        }
        if iommu.attribute("model") != Some("virtio") {
            continue;
        }
        if facts.lacks(VersionRule::VirtioIommu) {
            out.push(Finding::error(
                Code::IommuModel,
                format!(
                    "unknown IOMMU model: virtio (libvirt's parser, at define; the model came with libvirt 8.3.0, and the host has {})",
                    facts.libvirt_rules()
                ),
                "use <iommu model='intel'> (q35) or <iommu model='smmuv3'> (Arm virt), or run the guest on libvirt 8.3 or later",
            ));
            // libvirt stops at the parser: nothing else of the element is judged.
            continue;
        }
        check_virtio_acpi(dom, out);
        check_virtio_driver(iommu, facts, out);
    }
}

/// A virtio IOMMU of an x86 guest without ACPI: libvirt refuses it at define, "IOMMU device:
/// 'virtio' requires ACPI" (`qemuValidateDomainDeviceDefIOMMU`; seen with libvirt 9.0, 11.3 and
/// 12.8 for a q35 guest without `<features><acpi/>`; an Intel IOMMU is defined without it).
fn check_virtio_acpi(dom: &Domain<'_>, out: &mut Vec<Finding>) {
    if !crate::libvirt::arch::is_x86(dom.arch()) {
        return;
    }
    let acpi = child(dom.root(), "features")
        .and_then(|f| child(f, "acpi"))
        .is_some_and(|a| a.attribute("state") != Some("off"));
    if acpi {
        return;
    }
    out.push(Finding::error(
        Code::IommuAcpi,
        "IOMMU device: 'virtio' requires ACPI (libvirt refuses the domain at define: the guest has no <features><acpi/>)",
        "add <acpi/> to <features> (the virtio IOMMU is described to the guest through ACPI's VIOT table)",
    ));
}

/// A virtio IOMMU's `<driver>`: Intel's attributes are refused ("iommu model 'virtio' doesn't
/// support additional attributes"; from 12.1, which takes `aw_bits`, "... doesn't support some
/// additional attributes").
fn check_virtio_driver(
    iommu: roxmltree::Node<'_, '_>,
    facts: &DomainFacts<'_>,
    out: &mut Vec<Finding>,
) {
    let Some(driver) = child(iommu, "driver") else {
        return;
    };
    let aw_bits_taken = facts.applies(VersionRule::VirtioIommuAwBits);
    let refused: Vec<&str> = VIRTIO_REFUSED
        .iter()
        .copied()
        .chain((!aw_bits_taken).then_some("aw_bits"))
        .filter(|a| driver.attribute(*a).is_some())
        .collect();
    if refused.is_empty() {
        return;
    }
    let some = if aw_bits_taken { "some " } else { "" };
    out.push(Finding::error(
        Code::IommuDriver,
        format!(
            "iommu model 'virtio' doesn't support {some}additional attributes (its <driver> sets {}; {})",
            refused.join(", "),
            facts.libvirt_rules()
        ),
        format!("remove {} from the virtio IOMMU's <driver>", refused.join(", ")),
    ));
}

/// An AMD IOMMU: a model libvirt's parser knows from 11.5.0 ([`VersionRule::AmdIommu`]; its
/// words before depend on the release: 7.0's parser names the model, 9.0's and 11.3's the
/// attribute, and 8.x, not seen, is judged as 7.0), and none of Intel's `<driver>` attributes
/// that `virDomainIOMMUDefValidate` refuses on it ([`crate::amd_iommu::AMD_REFUSED`]).
fn check_amd(iommu: roxmltree::Node<'_, '_>, facts: &DomainFacts<'_>, out: &mut Vec<Finding>) {
    if facts.lacks(VersionRule::AmdIommu) {
        let old = facts.libvirt.as_ref().is_some_and(|v| v.value.major < 9);
        let words = if old {
            "unknown IOMMU model: amd"
        } else {
            "Invalid value for attribute 'model' in element 'iommu': 'amd'."
        };
        out.push(Finding::error(
            Code::IommuModel,
            format!(
                "{words} (libvirt's parser, at define; the model came with libvirt 11.5.0, and the host has {})",
                facts.libvirt_rules()
            ),
            "use <iommu model='intel'> (q35), or run the guest on libvirt 11.5 or later (12.2 or later for more than 255 vCPUs)",
        ));
        return;
    }
    let Some(driver) = child(iommu, "driver") else {
        return;
    };
    let refused: Vec<&str> = crate::amd_iommu::AMD_REFUSED
        .into_iter()
        .filter(|a| driver.attribute(*a).is_some())
        .collect();
    if refused.is_empty() {
        return;
    }
    out.push(Finding::error(
        Code::IommuDriver,
        format!(
            "iommu model 'amd' doesn't support some additional attributes (its <driver> sets {}; {})",
            refused.join(", "),
            facts.libvirt_rules()
        ),
        format!("remove {} from the AMD IOMMU's <driver>", refused.join(", ")),
    ));
}
