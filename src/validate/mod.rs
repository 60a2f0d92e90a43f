//! The checks libvirt and QEMU will make, run on the rewritten domain.
//!
//! Each check mirrors a rule of libvirt 9.0 / QEMU 7.2 and quotes the error text libvirt gives,
//! so an operator can match a finding to what `virsh define` or `virsh start` would have said;
//! where a later libvirt changed the rule, the host's version decides
//! ([`crate::domain_facts::VersionRule`]: checked against libvirt 11.3 / QEMU 10.0 too).
//! `cpu` judges the `<cpu>` element and the psABI level, `vcpu` the vCPU counts, topology,
//! machine and KVM limits, what more than 255 vCPUs need of the IOMMU, `<vcpus>` and NUMA cells,
//! `iommu` the IOMMU's model and driver attributes, `kvm` libvirt's start-time comparison of a
//! KVM custom CPU with the host's, `tcg` what QEMU's TCG refuses at
//! start (APIC IDs that need x2APIC, the guest CPU against what TCG emulates). Checks never change the document and
//! read host facts from [`DomainFacts`] only.

pub mod arch_caps;
mod cpu_element;
pub mod hazard;
mod invtsc;
mod iommu;
pub mod kvm;
mod os_floor;
pub use os_floor::{OsAnswer, answer as os_answer, bounded_rule, floor_rule, is_floor_finding};
pub(crate) mod tcg;
mod vcpu;
mod x2apic_iommu;

use crate::domain::Domain;
use crate::domain_facts::DomainFacts;
use crate::finding::{Code, Finding};
use crate::policy::Plan;

/// Run every check on `dom` (the document as it will be written), with `plan` for the level and
/// `facts` for the host.
///
/// Returns findings in a fixed order: several `<cpu>`, vCPU checks, then the `<cpu>` element's
/// mode, features, model and level.
#[must_use]
pub fn validate(dom: &Domain<'_>, plan: &Plan, facts: &DomainFacts<'_>) -> Vec<Finding> {
    validate_as(dom, plan, facts, false)
}

/// [`validate`], of a guest judged where it runs when `running`: `dom` is its live XML
/// ([`Domain::is_live`]: `virsh dumpxml` of a running guest, its status file) and no start or
/// migration is to come. libvirt made its start checks, and the `check='full'` it wrote records
/// what QEMU gave: that CPU compared with itself at a start that will not happen would refuse a
/// guest that runs, so `kvm-check-full` and `tcg-check-full` are left out, and the level is
/// judged as KVM gave it. A document the rewrite changed is a start to come, never `running`;
/// an incoming guest (the hook at `migrate`) neither: the destination checks it.
#[must_use]
pub fn validate_as(
    dom: &Domain<'_>,
    plan: &Plan,
    facts: &DomainFacts<'_>,
    running: bool,
) -> Vec<Finding> {
    let mut out = Vec::new();
    if !dom.in_scope() {
        return out;
    }
    let cpus = dom.cpus();
    if cpus.len() > 1 {
        out.push(Finding::error(
            Code::CpuMultiple,
            format!("{} <cpu> elements: libvirt reads mode, model and features from the first only and silently ignores the rest (virt-xml-validate: \"Extra element cpu in interleave\")", cpus.len()),
            "merge them into one <cpu> (virt-cpu-policy rewrite does)",
        ));
    }
    if let Some(offer) = &facts.arch_unsupported {
        out.push(arch_unsupported(dom, offer));
    }
    if let Some(emulator) = &facts.machine_unsupported {
        out.push(Finding::error(
            Code::MachineUnsupported,
            format!(
                "Emulator '{emulator}' does not support machine type '{}' (libvirt refuses the domain at define; per {})",
                dom.machine(),
                facts.machine_support_source
            ),
            format!("use a machine type `{emulator} -machine help` lists"),
        ));
    }
    if let Some(d) = &facts.machine_deprecated {
        let qemu = d
            .qemu
            .as_deref()
            .map_or_else(|| "the host's QEMU".to_string(), |v| format!("QEMU {v}"));
        out.push(Finding::warning(
            Code::MachineDeprecated,
            format!(
                "machine type '{}' is deprecated by {qemu} (per {}): a later QEMU removes it, and libvirt then refuses the domain at define (QEMU 11.1 has no type older than 5.2)",
                d.machine, d.source
            ),
            format!(
                "move the guest to {} (the newest of its family) at a planned restart",
                d.newest
            ),
        ));
    }
    vcpu::check(dom, facts, &mut out);
    iommu::check(dom, facts, &mut out);
    cpu_element::check(dom, cpus.first().copied(), plan, facts, running, &mut out);
    arch_caps::check(dom, facts, &mut out);
    invtsc::check(dom, facts, &mut out);
    if running {
        out.retain(|f| !matches!(f.code, Code::KvmCheckFull | Code::TcgCheckFull));
    }
    out
}

/// `arch-unsupported`: the host runs no guest of `dom`'s arch and virt type (`offer` says what
/// it runs and libvirt's words).
#[must_use]
pub fn arch_unsupported(dom: &Domain<'_>, offer: &crate::host::ArchOffer) -> Finding {
    let (arch, vt) = (dom.arch(), dom.virt_type());
    Finding::error(
        Code::ArchUnsupported,
        format!(
            "the host runs no {arch} {vt} guests ({}): libvirt refuses the guest (\"{}\")",
            offer.offered, offer.refusal
        ),
        "run the guest on a host of its arch (a guest's arch never changes; under TCG, type='qemu', an emulated arch may be offered)",
    )
}
