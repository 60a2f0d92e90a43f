//! What more than 255 x86 vCPUs need of the IOMMU and the I/O APIC, as libvirt judges it at
//! define after filling in what it adds itself: `qemuValidateDomainDefCpu`
//! (`src/qemu/qemu_validate.c`) for the vCPUs, `qemuValidateDomainDeviceDefIOMMU` for the
//! device, `qemuDomainIOMMUDefPostParse` and `qemuDomainDefEnableDefaultFeatures`
//! (`src/qemu/qemu_postparse.c`) for what libvirt adds (10.10.0 and later,
//! [`VersionRule::AutoIommu`]; an AMD IOMMU's `xtsup` from 12.2.0, [`VersionRule::X2apicIommu`]).

use crate::amd_iommu::{EIM_REFUSAL, X2APIC_REFUSAL};
use crate::domain::Domain;
use crate::domain_facts::{DomainFacts, VersionRule};
use crate::finding::{Code, Finding};
use crate::libvirt::arch::is_x86;
use crate::topology::X86_XAPIC_LIMIT;
use crate::vcpu_limits::is_q35;
use crate::xml::{child, is_libvirt_element};

/// `<devices><iommu>` (the first: libvirt's `def->iommus[0]`) and `<features><ioapic>` as
/// libvirt will have them after define: as written, and from libvirt 10.10.0 with what it fills
/// in for more than 255 x86 vCPUs — an Intel IOMMU where there is none; on an Intel IOMMU
/// `intremap` and `eim` where not written; from 12.2.0 on an AMD IOMMU `intremap` and `xtsup`
/// where not written (`xtsup` only with a QEMU that has it, when its release is known); a split
/// I/O APIC where none is written and interrupt remapping or the vCPUs need one (seen with
/// libvirt 11.3 and 12.8, `tests/libvirt/ROOT-NOTES.md`).
pub(super) struct Iommu {
    /// Whether there is an IOMMU (written or added).
    pub(super) present: bool,
    /// Its `model`.
    pub(super) model: Option<String>,
    pub(super) intremap: Option<bool>,
    pub(super) eim: Option<bool>,
    pub(super) xtsup: Option<bool>,
    /// `<ioapic driver>`, when written or added.
    pub(super) ioapic: Option<String>,
}

impl Iommu {
    /// Whether the IOMMU is of `model`.
    pub(super) fn is(&self, model: &str) -> bool {
        self.model.as_deref() == Some(model)
    }

    pub(super) fn as_written(dom: &Domain<'_>) -> Iommu {
        let iommu = child(dom.root(), "devices")
            .and_then(|d| d.children().find(|c| is_libvirt_element(*c, "iommu")));
        let driver = iommu.and_then(|i| child(i, "driver"));
        let switch = |a: &str| driver.and_then(|d| d.attribute(a)).map(|v| v == "on");
        Iommu {
            present: iommu.is_some(),
            model: iommu.and_then(|i| i.attribute("model")).map(str::to_string),
            intremap: switch("intremap"),
            eim: switch("eim"),
            xtsup: switch("xtsup"),
            ioapic: child(dom.root(), "features")
                .and_then(|f| child(f, "ioapic"))
                .and_then(|i| i.attribute("driver"))
                .map(str::to_string),
        }
    }

    pub(super) fn as_libvirt_fills_in(
        dom: &Domain<'_>,
        max: u32,
        facts: &DomainFacts<'_>,
    ) -> Iommu {
        let mut i = Iommu::as_written(dom);
        if !facts.applies(VersionRule::AutoIommu) {
            return i;
        }
        // Only for the vCPUs that need x2APIC: below that, `<driver eim='on'/>` without intremap
        // is still refused ("IOMMU eim requires interrupt remapping to be enabled", 11.3).
        let many = is_x86(dom.arch()) && max > X86_XAPIC_LIMIT;
        if many {
            if !i.present {
                (i.present, i.model) = (true, Some("intel".into()));
            }
            if i.is("intel") {
                i.intremap.get_or_insert(true);
                i.eim.get_or_insert(true);
            } else if i.is("amd") && facts.applies(VersionRule::X2apicIommu) {
                i.intremap.get_or_insert(true);
                // libvirt asks its QEMU capability cache (`amd-iommu.xtsup`).
                let qemu_lacks = facts
                    .amd_iommu_qemu
                    .as_ref()
                    .is_some_and(|q| !crate::amd_iommu::has_xtsup(q.value));
                if !qemu_lacks {
                    i.xtsup.get_or_insert(true);
                }
            }
        }
        if i.ioapic.is_none() && (i.intremap == Some(true) || many) {
            i.ioapic = Some("qemu".into());
        }
        i
    }
}

/// Above 255 x86 vCPUs on q35: from libvirt 12.2 a split I/O APIC, an Intel IOMMU with `eim` or
/// an AMD one with `xtsup` ([`X2APIC_REFUSAL`]); before, an IOMMU with `eim` ([`EIM_REFUSAL`]),
/// which an AMD IOMMU never has.
pub(super) fn check_many_vcpus(
    dom: &Domain<'_>,
    max: u32,
    facts: &DomainFacts<'_>,
    out: &mut Vec<Finding>,
) {
    let iommu = Iommu::as_libvirt_fills_in(dom, max, facts);
    // libvirt's parser refuses a model it does not know before (`super::iommu`).
    if iommu.is("amd") && facts.lacks(VersionRule::AmdIommu) {
        return;
    }
    let eim = iommu.is("intel") && iommu.eim == Some(true);
    if facts.applies(VersionRule::X2apicIommu) {
        let xtsup = iommu.is("amd") && iommu.xtsup == Some(true);
        if !(eim || xtsup || iommu.ioapic.as_deref() == Some("qemu")) {
            out.push(Finding::error(
                Code::IommuEim,
                X2APIC_REFUSAL,
                "add <features><ioapic driver='qemu'/> and leave the IOMMU's eim (Intel) or xtsup (AMD) for libvirt to switch on, or keep the maximum at 255",
            ));
        }
        return;
    }
    if eim {
        return;
    }
    if iommu.is("amd") {
        out.push(Finding::error(
            Code::IommuEim,
            format!("{EIM_REFUSAL} (an AMD IOMMU has no eim: {} asks it of every model; more than 255 vCPUs with an AMD IOMMU in XTSup mode need libvirt 12.2.0 or later)", facts.libvirt_rules()),
            "run the guest on libvirt 12.2 or later, replace the IOMMU with <iommu model='intel'><driver intremap='on' eim='on'/></iommu>, or keep the maximum at 255",
        ));
        return;
    }
    out.push(Finding::error(
        Code::IommuEim,
        EIM_REFUSAL,
        "add <iommu model='intel'><driver intremap='on' eim='on'/></iommu> and <features><ioapic driver='qemu'/></features> (a rule with vcpu.iommu = \"auto\" or vcpu.max does), or keep the maximum at 255",
    ));
}

/// An Intel or AMD IOMMU needs q35; Intel's `eim` needs `intremap`; `intremap` needs the split
/// I/O APIC.
pub(super) fn check_device(
    dom: &Domain<'_>,
    max: u32,
    facts: &DomainFacts<'_>,
    out: &mut Vec<Finding>,
) {
    let written = Iommu::as_written(dom);
    // From 10.10 the IOMMU libvirt adds above 255 vCPUs is checked like a written one: a
    // written `<ioapic driver='kvm'/>` is then refused ("IOMMU interrupt remapping requires
    // split I/O APIC", seen with libvirt 11.3 and 12.8 on virt-install's `--features
    // ioapic.driver=kvm` with 300 vCPUs).
    let added = facts.applies(VersionRule::AutoIommu)
        && !written.present
        && is_x86(dom.arch())
        && max > X86_XAPIC_LIMIT;
    // A model the host's libvirt does not parse is refused before (`super::iommu`).
    let amd = written.is("amd") && !facts.lacks(VersionRule::AmdIommu);
    if !(added || written.is("intel") || amd) {
        return;
    }
    if written.present
        && is_x86(dom.arch())
        && !is_q35(dom.machine())
        && !facts.canonical_machine.as_deref().is_some_and(is_q35)
    {
        let (model, vendor) = if amd {
            ("amd", "AMD")
        } else {
            ("intel", "Intel")
        };
        out.push(Finding::error(
            Code::IommuMachine,
            format!("IOMMU device: '{model}' is only supported with Q35 machines"),
            format!("use a q35 machine type or remove the {vendor} IOMMU"),
        ));
    }
    let iommu = Iommu::as_libvirt_fills_in(dom, max, facts);
    if iommu.is("intel") && iommu.eim == Some(true) && iommu.intremap != Some(true) {
        out.push(Finding::error(
            Code::IommuIntremap,
            "IOMMU eim requires interrupt remapping to be enabled",
            "set <driver intremap='on'>",
        ));
    }
    if iommu.intremap == Some(true) && iommu.ioapic.as_deref() != Some("qemu") {
        out.push(Finding::error(
            Code::IoapicSplit,
            "IOMMU interrupt remapping requires split I/O APIC (ioapic driver='qemu')",
            "add <features><ioapic driver='qemu'/></features>",
        ));
    }
}

#[cfg(test)]
mod tests;
