//! Findings: what the tool has to say about a domain, as data.
//!
//! A finding is not a string: it carries a stable code ([`Code`]: `cpu-feature-duplicate`...), a
//! severity, the sentence for the operator, the fix, and the policy rule involved, so the command
//! line, the JSON output and (later) the hook render the same facts their own way.

use serde::Serialize;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing; the result is still usable (exit codes unchanged).
    Warning,
    /// libvirt or QEMU would refuse the result, or the policy cannot be met (exit 1).
    Error,
}

/// A finding's stable code: which of libvirt's or the policy's rules it is about, written
/// kebab-case in every output (text, JSON, the journal's `CODE`, the hook's refusal line). A code
/// never changes meaning; README.md and `docs/` describe each (a test checks that every one is
/// documented).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    strum::EnumIter,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum Code {
    /// `arch-unsupported`: The destination's capabilities offer no guest of this arch and virt
    /// type ("could not find capabilities for arch=... domaintype=...").
    ArchUnsupported,
    /// `cluster-feature`: A feature the policy requires that not every host of the cluster has
    /// (`cpu.model = "baseline"`).
    ClusterFeature,
    /// `cluster-level`: A `cpu.min_level` above what every host of the cluster reaches (`cpu.model
    /// = "baseline"`).
    ClusterLevel,
    /// `cpu-attribute-invalid`: A `<cpu match>`, `<cpu check>` or `<model fallback>` value libvirt
    /// does not know (libvirt refuses the definition: "Invalid value for attribute 'match' in
    /// element 'cpu': 'X'.", "Invalid fallback attribute").
    CpuAttributeInvalid,
    /// `cpu-cache-mode`: `<cache mode='passthrough'>` outside host-passthrough and maximum (libvirt
    /// refuses it).
    CpuCacheMode,
    /// `cpu-feature-arch`: An x86 feature in a rule that reaches a guest of another arch.
    CpuFeatureArch,
    /// `cpu-feature-duplicate`: A feature listed twice in one `<cpu>` ("CPU feature 'x' specified
    /// more than once").
    CpuFeatureDuplicate,
    /// `cpu-feature-invalid`: A `<feature>` without a name, or of a policy libvirt does not know.
    CpuFeatureInvalid,
    /// `cpu-feature-missing`: The hook at `started`: the running guest's CPU (libvirt's live
    /// XML, what QEMU gave) lacks a feature the policy requires (`cpu.require`); libvirt lists
    /// what QEMU could not give as `policy='disable'`.
    CpuFeatureMissing,
    /// `cpu-feature-unknown`: A feature libvirt's cpu_map does not define.
    CpuFeatureUnknown,
    /// `cpu-features-without-model`: Features in a custom `<cpu>` without a model ("Non-empty
    /// feature list specified without CPU model").
    CpuFeaturesWithoutModel,
    /// `cpu-incompatible`: This host cannot run the guest's CPU (libvirt's `x86Compute`): the
    /// hook on migrate or restore, and a KVM custom CPU under `check='partial'` that libvirt
    /// refuses at start ("the CPU is incompatible with host CPU: ...").
    CpuIncompatible,
    /// `cpu-invtsc`: a guest CPU requiring `invtsc` where the vCPU QEMU builds has none (TCG;
    /// KVM whose host-model CPU lacks it): "host doesn't support invariant TSC".
    CpuInvtsc,
    /// `cpu-level`: The guest CPU does not reach the policy's psABI level.
    CpuLevel,
    /// `cpu-map-unreadable`: A cpu_map model file could not be read; the built-in table answered.
    CpuMapUnreadable,
    /// `cpu-match-host-model`: `<cpu match>` under host-model, where it means nothing.
    CpuMatchHostModel,
    /// `cpu-migratable-mode`: `migratable` outside host-passthrough and maximum (libvirt refuses
    /// it).
    CpuMigratableMode,
    /// `cpu-mode-invalid`: A `<cpu mode>` libvirt does not know.
    CpuModeInvalid,
    /// `cpu-mode-unsupported`: A CPU mode libvirt does not offer this guest's arch and virt type.
    CpuModeUnsupported,
    /// `cpu-model-arch`: An x86 model in a rule that reaches a guest of another arch.
    CpuModelArch,
    /// `cpu-model-default`: A custom `<cpu>` without a model: QEMU's default model, x86-64-v1 only.
    CpuModelDefault,
    /// `cpu-model-unknown`: A model libvirt's cpu_map does not define.
    CpuModelUnknown,
    /// `cpu-model-unusable`: A custom model domcapabilities list `usable='no'` on this host.
    CpuModelUnusable,
    /// `cpu-multiple`: More than one top-level `<cpu>` (libvirt reads the first only).
    CpuMultiple,
    /// `cpu-numa-conflict`: Two different `<numa>` elements in separate `<cpu>` elements.
    CpuNumaConflict,
    /// `cpu-vendor-without-model`: A `<vendor>` without a model ("CPU vendor specified without CPU
    /// model").
    CpuVendorWithoutModel,
    /// `gic-vcpu-limit`: more vCPUs than an aarch64 TCG `virt` guest's GICv2 serves (8), at
    /// start: "Number of SMP CPUs requested (N) exceeds max CPUs supported by machine 'mach-virt'
    /// (8)".
    GicVcpuLimit,
    /// `host-cpus-unknown`: `vcpu.max = "host"` while the host's CPU count is unknown.
    HostCpusUnknown,
    /// `host-level`: This host's host-model CPU does not reach the policy's level (KVM will not
    /// provide it), or this QEMU's TCG does not emulate what the level needs of a custom CPU
    /// (QEMU drops it at start under `check='none'`).
    HostLevel,
    /// `internal`: The rewritten document does not parse: a bug of the tool.
    Internal,
    /// `ioapic-split`: Interrupt remapping without a split I/O APIC.
    IoapicSplit,
    /// `iommu-acpi`: A virtio IOMMU in an x86 guest without ACPI: "IOMMU device: 'virtio'
    /// requires ACPI".
    IommuAcpi,
    /// `iommu-driver`: `<driver>` attributes the IOMMU's model does not take (Intel's on a virtio
    /// IOMMU).
    IommuDriver,
    /// `iommu-eim`: More than 255 x86 vCPUs without an IOMMU in extended interrupt mode.
    IommuEim,
    /// `iommu-intremap`: `eim` without interrupt remapping.
    IommuIntremap,
    /// `iommu-machine`: An Intel IOMMU on a machine type other than q35.
    IommuMachine,
    /// `iommu-model`: An IOMMU model the host's libvirt does not know (virtio before 8.3), or
    /// more than 255 vCPUs need eim and the domain's IOMMU model cannot do it.
    IommuModel,
    /// `iommu-no-devices`: More than 255 vCPUs need an IOMMU, and the domain has no `<devices>`.
    IommuNoDevices,
    /// `not-compared`: a check libvirt makes (the comparison of a KVM custom CPU with the host's
    /// own CPU at start) needed a fact the tool does not have, named in the message: nothing is
    /// claimed either way, and the verdict is `not-compared` unless something else decides it.
    NotCompared,
    /// `kvm-arch-capabilities`: a KVM guest CPU that carries `arch-capabilities` on an AMD host
    /// whose QEMU is older than 10.1: QEMU writes MSR 0x10a, KVM refuses it on AMD, and QEMU
    /// aborts at start ("failed to set MSR 0x10a"). A warning: the fact behind it is QEMU's, not
    /// libvirt's.
    KvmArchCapabilities,
    /// `kvm-check-full`: `check='full'` under KVM with a named model (`match` exact or strict)
    /// that QEMU's KVM builds otherwise (it adds `hypervisor` to every vCPU, drops what KVM
    /// cannot give): "guest CPU doesn't match specification".
    KvmCheckFull,
    /// `kvm-vcpu-limit`: More vCPUs than KVM allows.
    KvmVcpuLimit,
    /// `level-arch`: `cpu.min_level` for a guest that is not x86_64.
    LevelArch,
    /// `machine-deprecated`: The judged host's QEMU marks the machine type deprecated
    /// (capabilities' `deprecated='yes'`): a later QEMU removes it.
    MachineDeprecated,
    /// `machine-unknown`: `vcpu.max` needs the machine type's limit, and no source knows it.
    MachineUnknown,
    /// `machine-unsupported`: The emulator does not support the machine type (libvirt refuses it at
    /// define).
    MachineUnsupported,
    /// `machine-vcpu-limit`: More vCPUs than the machine type allows.
    MachineVcpuLimit,
    /// `memory-hotplug-numa`: `<maxMemory>` without a NUMA cell (before libvirt 9.6).
    MemoryHotplugNuma,
    /// `numa-cell-empty`: A new vCPU maximum would leave a NUMA cell without vCPUs.
    NumaCellEmpty,
    /// `numa-coverage`: NUMA cells do not cover every vCPU.
    NumaCoverage,
    /// `numa-invalid`: A NUMA cell's `cpus` is not a cpuset.
    NumaInvalid,
    /// `numa-overlap`: Two NUMA cells share a vCPU.
    NumaOverlap,
    /// `numa-vcpus`: A NUMA cell names a vCPU past the maximum.
    NumaVcpus,
    /// `os-floor`: the guest's CPU is below what its OS needs to boot (the OS its domain names:
    /// libosinfo's id, CloudStack's guest OS name; the floors of `src/cpu/os_floors.toml`, each
    /// from the vendor's document).
    OsFloor,
    /// `passthrough-group`: The fleet: a running `host-passthrough` guest would leave its
    /// migration group (the hosts of the same CPU as its source host), or its source host or a
    /// host's CPU is not known ([`crate::destination::group`]).
    PassthroughGroup,
    /// `policy-conflict`: The policy requires and disables the same feature, or disables one its
    /// level needs.
    PolicyConflict,
    /// `stack-hazard`: The fleet: a guest's start or live migration that a known hazard of the
    /// libvirt/QEMU stack breaks, by the two hosts' releases and the guest's shape (an entry of
    /// `src/hazards.toml`: [`crate::hazards`]), named with the entry's symptom, fix and source.
    StackHazard,
    /// `tcg-check-full`: `check='full'` under TCG with a CPU QEMU's TCG builds otherwise (QEMU
    /// adds `hypervisor`, TCG drops what it lacks): "guest CPU doesn't match specification".
    TcgCheckFull,
    /// `tcg-cpu-missing`: `check='partial'` under TCG with features this QEMU's TCG lacks (or
    /// has, for `forbid`): "the CPU is incompatible with host CPU".
    TcgCpuMissing,
    /// `tcg-cpu-hotplug` (a warning): an x86 TCG guest with room to hot-plug vCPUs on QEMU 5.1.0
    /// to 7.2.0, which never tells the guest of them ([`crate::tcg_facts::TCG_CPU_HOTPLUG_LOST`]).
    TcgCpuHotplug,
    /// `tcg-eim`: an Intel IOMMU with `eim='on'` under TCG on a QEMU before 9.0: "eim=on
    /// requires accel=kvm,kernel-irqchip=split".
    TcgEim,
    /// `tcg-vcpu-limit`: x86 TCG vCPUs reaching APIC ID 255 on a QEMU before 9.0 (or of an
    /// unknown release): "current -smp configuration requires kernel irqchip and X2APIC API
    /// support".
    TcgVcpuLimit,
    /// `tcg-x2apic`: x86 TCG vCPUs reaching APIC ID 255 on QEMU 9.0 or later without x2APIC in
    /// the guest CPU ("APIC ID 255 requires x2APIC feature in CPU"), or a policy that takes
    /// x2apic away from a maximum that needs it.
    TcgX2apic,
    /// `topology-clusters`: `<topology clusters>` on x86: ignored before libvirt 10.1, refused by
    /// QEMU after.
    TopologyClusters,
    /// `topology-invalid`: A `<topology>` libvirt refuses (a missing or non-positive attribute).
    TopologyInvalid,
    /// `topology-mismatch`: The topology's product is not the vCPU maximum.
    TopologyMismatch,
    /// `vcpu-clamped`: The vCPU maximum asked for was lowered to what the host can run.
    VcpuClamped,
    /// `vcpu-current`: The current vCPU count is 0 or above the maximum.
    VcpuCurrent,
    /// `vcpu-invalid`: `<vcpu>` is not a positive count.
    VcpuInvalid,
    /// `vcpu-missing`: `vcpu.max` for a domain without `<vcpu>`.
    VcpuMissing,
    /// `vcpus-dropped`: `<vcpus>` dropped: it could not stay consistent after a new maximum.
    VcpusDropped,
    /// `vcpus-invalid`: A `<vcpus>` entry libvirt refuses.
    VcpusInvalid,
    /// `vcpus-order`: Online vCPUs that cannot be unplugged are not listed first.
    VcpusOrder,
    /// `x86-vcpu-q35`: More than 255 x86 vCPUs on a machine type other than q35.
    X86VcpuQ35,
}

impl Code {
    /// Every code, in alphabetical order of its name.
    pub fn all() -> impl Iterator<Item = Code> {
        let mut all: Vec<Code> = <Code as strum::IntoEnumIterator>::iter().collect();
        all.sort_by_key(|c| c.as_str());
        all.into_iter()
    }

    /// The code as written in every output (`cpu-level`): the variant's name in kebab-case,
    /// as serde writes it (a test holds the two equal).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Whether the finding is the policy's rather than one of libvirt's rules: never a reason a
    /// host cannot run a guest, but `os-floor` at a start (`crate::destination`'s
    /// `Judgement::blocking`). `os-floor` is the policy's because libvirt starts such a guest
    /// and the guest's own kernel stops: the hook's `on_violation` decides, as for the
    /// policy's level. Every code is listed: a new one is placed here by the compiler.
    #[must_use]
    pub fn is_policy(self) -> bool {
        match self {
            Code::CpuLevel
            | Code::OsFloor
            | Code::PolicyConflict
            | Code::LevelArch
            | Code::CpuMultiple
            | Code::ClusterLevel
            | Code::ClusterFeature
            | Code::CpuFeatureMissing => true,
            Code::CpuAttributeInvalid
            | Code::CpuCacheMode
            | Code::CpuFeatureArch
            | Code::CpuFeatureDuplicate
            | Code::CpuFeatureInvalid
            | Code::CpuFeatureUnknown
            | Code::CpuFeaturesWithoutModel
            | Code::CpuIncompatible
            | Code::CpuInvtsc
            | Code::CpuMapUnreadable
            | Code::CpuMatchHostModel
            | Code::CpuMigratableMode
            | Code::CpuModeInvalid
            | Code::CpuModeUnsupported
            | Code::CpuModelArch
            | Code::CpuModelDefault
            | Code::CpuModelUnknown
            | Code::CpuModelUnusable
            | Code::CpuNumaConflict
            | Code::CpuVendorWithoutModel
            | Code::GicVcpuLimit
            | Code::HostCpusUnknown
            | Code::HostLevel
            | Code::Internal
            | Code::IoapicSplit
            | Code::IommuAcpi
            | Code::IommuDriver
            | Code::IommuEim
            | Code::IommuIntremap
            | Code::IommuMachine
            | Code::IommuModel
            | Code::IommuNoDevices
            | Code::KvmArchCapabilities
            | Code::KvmCheckFull
            | Code::KvmVcpuLimit
            | Code::MachineDeprecated
            | Code::MachineUnknown
            | Code::MachineUnsupported
            | Code::MachineVcpuLimit
            | Code::MemoryHotplugNuma
            | Code::NotCompared
            | Code::NumaCellEmpty
            | Code::NumaCoverage
            | Code::NumaInvalid
            | Code::NumaOverlap
            | Code::NumaVcpus
            | Code::PassthroughGroup
            | Code::ArchUnsupported
            | Code::StackHazard
            | Code::TcgCheckFull
            | Code::TcgCpuHotplug
            | Code::TcgEim
            | Code::TcgCpuMissing
            | Code::TcgVcpuLimit
            | Code::TcgX2apic
            | Code::TopologyClusters
            | Code::TopologyInvalid
            | Code::TopologyMismatch
            | Code::VcpuClamped
            | Code::VcpuCurrent
            | Code::VcpuInvalid
            | Code::VcpuMissing
            | Code::VcpusDropped
            | Code::VcpusInvalid
            | Code::VcpusOrder
            | Code::X86VcpuQ35 => false,
        }
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One finding about a domain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// What it is about ([`Code`]: `cpu-level`, `cpu-mode-unsupported`...).
    pub code: Code,
    /// Error or warning.
    pub severity: Severity,
    /// One sentence: what is wrong (quoting libvirt's own error text where it has one).
    pub message: String,
    /// What to do about it.
    pub fix: String,
    /// The policy rule involved, if any.
    pub rule: Option<String>,
}

impl Finding {
    /// An error finding.
    #[must_use]
    pub fn error(code: Code, message: impl Into<String>, fix: impl Into<String>) -> Self {
        Finding {
            code,
            severity: Severity::Error,
            message: message.into(),
            fix: fix.into(),
            rule: None,
        }
    }

    /// A warning finding.
    #[must_use]
    pub fn warning(code: Code, message: impl Into<String>, fix: impl Into<String>) -> Self {
        Finding {
            severity: Severity::Warning,
            ..Finding::error(code, message, fix)
        }
    }

    /// The same finding, attributed to a policy rule.
    #[must_use]
    pub fn rule(mut self, rule: impl Into<String>) -> Self {
        self.rule = Some(rule.into());
        self
    }
}

impl Severity {
    /// `warning` or `error`, as every report writes it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sev = self.severity.as_str();
        write!(f, "{sev}[{}]: {}", self.code, self.message)?;
        if let Some(r) = &self.rule {
            write!(f, " (rule '{r}')")?;
        }
        if !self.fix.is_empty() {
            write!(f, "; fix: {}", self.fix)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The inline code spans (`` `...` ``) of Markdown `text`, white space folded, fenced blocks
    /// left out.
    fn code_spans(text: &str) -> std::collections::HashSet<String> {
        let mut prose = String::new();
        let mut fenced = false;
        for line in text.lines() {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
            } else if !fenced {
                prose.push_str(line);
                prose.push(' ');
            }
        }
        prose
            .split('`')
            .skip(1)
            .step_by(2)
            .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect()
    }

    #[test]
    fn codes_are_written_as_serialised() {
        for code in Code::all() {
            assert_eq!(
                serde_json::to_value(code).unwrap(),
                serde_json::json!(code.as_str())
            );
            assert_eq!(code.to_string(), code.as_str());
            assert_eq!(code.as_str().parse::<Code>(), Ok(code));
        }
        let all: Vec<Code> = Code::all().collect();
        assert!(all.windows(2).all(|w| w[0].as_str() < w[1].as_str()));
    }

    /// The names as they were written by hand before they followed from the enum (the journal's
    /// `CODE` and every JSON report carry them: none may change).
    #[test]
    fn no_code_changed_its_name() {
        let names: Vec<&str> = Code::all().map(Code::as_str).collect();
        for old in OLD_NAMES.split_whitespace() {
            assert!(names.contains(&old), "{old} is no longer a code: {names:?}");
        }
    }

    const OLD_NAMES: &str = "cluster-feature cluster-level cpu-attribute-invalid cpu-cache-mode cpu-feature-arch cpu-feature-duplicate cpu-feature-invalid cpu-feature-unknown cpu-features-without-model cpu-incompatible cpu-invtsc cpu-level cpu-map-unreadable cpu-match-host-model cpu-migratable-mode cpu-mode-invalid cpu-mode-unsupported cpu-model-arch cpu-model-default cpu-model-unknown cpu-model-unusable cpu-multiple cpu-numa-conflict cpu-vendor-without-model gic-vcpu-limit host-cpus-unknown host-level internal ioapic-split iommu-acpi iommu-driver iommu-eim iommu-intremap iommu-machine iommu-model iommu-no-devices kvm-arch-capabilities kvm-check-full kvm-vcpu-limit level-arch machine-deprecated machine-unknown machine-unsupported machine-vcpu-limit memory-hotplug-numa not-compared numa-cell-empty numa-coverage numa-invalid numa-overlap numa-vcpus os-floor passthrough-group arch-unsupported policy-conflict stack-hazard tcg-check-full tcg-cpu-hotplug tcg-eim tcg-cpu-missing tcg-vcpu-limit tcg-x2apic topology-clusters topology-invalid topology-mismatch vcpu-clamped vcpu-current vcpu-invalid vcpu-missing vcpus-dropped vcpus-invalid vcpus-order x86-vcpu-q35";

    /// Every code an operator can meet is described where the reference is: README.md, or a page
    /// of docs/ (each as `` `code` ``, or as the rule it is refused under, `` `libvirt: code` ``).
    #[test]
    fn every_code_is_documented() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut pages = vec![root.join("README.md")];
        if let Ok(dir) = std::fs::read_dir(root.join("docs")) {
            pages.extend(
                dir.filter_map(Result::ok)
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|x| x == "md")),
            );
        }
        let mut spans = std::collections::HashSet::new();
        for page in &pages {
            let text = std::fs::read_to_string(page).unwrap();
            spans.extend(code_spans(&text));
        }
        let missing: Vec<&str> = Code::all()
            .map(Code::as_str)
            .filter(|c| !spans.contains(*c) && !spans.contains(&format!("libvirt: {c}")))
            .collect();
        assert!(
            missing.is_empty(),
            "finding codes described nowhere in {pages:?}: {missing:?}"
        );
    }
}
