//! A guest CPU that requires `invtsc` where the vCPU QEMU builds has none: libvirt refuses the
//! start, "host doesn't support invariant TSC".
//!
//! Once QEMU has built the vCPUs, libvirt checks that a guest CPU requiring `invtsc` got it
//! (`qemuProcessVerifyCPUFeatures` in `src/qemu/qemu_process.c`: `virCPUCheckFeature(def->cpu,
//! "invtsc")`, then the feature in the CPU QEMU reports, else `VIR_ERR_CONFIG_UNSUPPORTED` "host
//! doesn't support invariant TSC"), whatever `check` says. QEMU's TCG never emulates an
//! invariant TSC (CPUID 0x80000007 EDX bit 8), so under TCG such a guest never starts: seen on an
//! AMD host whose own CPUID has `invtsc`, with libvirt 9.0 under `check='partial'` and `'none'`
//! alike. Under KVM the vCPU has it where KVM gives it: domcapabilities' host-model CPU requires
//! `invtsc` then (an AMD EPYC host's KVM does; without the fact nothing is said).
//!
//! The error is `cpu-invtsc`.

use crate::domain::{Domain, cpu_features};
use crate::domain_facts::DomainFacts;
use crate::finding::{Code, Finding};
use crate::libvirt::arch::is_x86;
use crate::libvirt::cpu_def::FeaturePolicy;

/// The feature, in libvirt's spelling (`x86_features.xml`: CPUID 0x80000007 EDX bit 8).
const FEATURE: &str = "invtsc";

/// `cpu-invtsc` for the first `<cpu>` of `dom`, of any mode (a `maximum` or `host-model` CPU
/// asking for it too), when it requires `invtsc` (`require` or `force`) and the vCPU QEMU builds
/// has none (module docs).
pub(super) fn check(dom: &Domain<'_>, facts: &DomainFacts<'_>, out: &mut Vec<Finding>) {
    if !is_x86(dom.arch()) {
        return;
    }
    let Some(cpu) = dom.cpus().first().copied() else {
        return;
    };
    let required = cpu_features(cpu).iter().any(|(f, p)| {
        f == FEATURE
            && matches!(
                p,
                None | Some(FeaturePolicy::Require | FeaturePolicy::Force)
            )
    });
    if !required {
        return;
    }
    let why = match dom.virt_type() {
        "qemu" => "QEMU's TCG never emulates an invariant TSC".to_string(),
        "kvm" => {
            let Some(dc) = facts.domcaps.filter(|d| d.virt_type == "kvm") else {
                return;
            };
            let Some(hm) = &dc.host_model else { return };
            let gives = hm
                .features
                .iter()
                .any(|(f, p)| f == FEATURE && *p == FeaturePolicy::Require);
            if gives {
                return;
            }
            format!(
                "KVM's host-model CPU does not require it ({}): this host's KVM gives no invariant TSC",
                dc.source
            )
        }
        _ => return,
    };
    out.push(Finding::error(
        Code::CpuInvtsc,
        format!(
            "host doesn't support invariant TSC: the CPU requires invtsc and {why}, so libvirt refuses the start once QEMU built the vCPUs (qemuProcessVerifyCPUFeatures), whatever check says"
        ),
        "remove <feature policy='require' name='invtsc'/> (a cluster CPU for migration leaves it out: it is migratable='no'), or run the guest under KVM on a host whose KVM gives it",
    ));
}
