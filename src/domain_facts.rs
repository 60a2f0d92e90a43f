//! The host facts one domain needs, gathered once, before anything is decided.
//!
//! [`crate::host::Host`] knows where facts come from (files, libvirt's caches, the kernel) and
//! reads them lazily. [`DomainFacts::gather`] asks it, for one domain and its plan, every question
//! the rewrite and the validator will have: the features of each CPU model the result can name,
//! which feature names libvirt does not know, the domcapabilities that describe the domain, the
//! machine type's vCPU limit, KVM's limit, the host's CPU count. Planning, editing and validation
//! then read this value and never call `Host`, so a rule is a function of (domain, plan, facts).
//!
//! What is gathered is what can be asked: the models of the result are the domain's own, the
//! policy's and the arch's default ([`crate::cpu::default_model`]); its features are the domain's,
//! the policy's and the psABI levels' (all known to libvirt). Costly facts are gathered only when a
//! rule can need them: the machine-type limit (libvirt's QEMU capability cache, a few hundred
//! KiB) only
//! for a vCPU maximum above what every machine type of the family allows or a `vcpu.max` rule,
//! KVM's limit only for KVM guests above 240 vCPUs or with `vcpu.max`, the QEMU release and its
//! TCG's CPU only for x86 TCG guests that can need them ([`TcgFacts::gather`]).

pub mod arch_caps;
pub mod kvm_start;

use crate::cpu::default_model;
use crate::domain::{Domain, cpu_features};
use crate::host::{DeprecatedMachine, Host, MachineLimit, Sourced};
use crate::libvirt::arch::is_x86;
use crate::libvirt::cpu_def::{CpuMode, FeaturePolicy, guaranteed_features};
use crate::libvirt::domcaps::DomCaps;
use crate::libvirt::version::LibvirtVersion;
use crate::policy::{Plan, VcpuMax};
use crate::tcg_facts::TcgFacts;
use crate::topology::read_vcpu;
use crate::vcpu_limits::family_floor;
use crate::xml::{child, text_of};
use std::collections::{BTreeMap, BTreeSet};

/// Every host fact the rewrite and the validator of one domain use.
#[derive(Debug, Clone)]
pub struct DomainFacts<'h> {
    /// Model name → its features (libvirt spellings), None for a model cpu_map does not define.
    models: BTreeMap<String, Option<BTreeSet<String>>>,
    /// Feature names (libvirt spelling) from the domain and the policy that libvirt does not know.
    unknown_features: BTreeSet<String>,
    /// Where model features came from: a cpu_map directory or "built-in".
    pub cpu_map_source: String,
    /// Problems met reading cpu_map model files (each answered from the built-in table).
    pub cpu_map_problems: Vec<String>,
    /// The domcapabilities for the domain's arch, virt type and machine type, when given.
    pub domcaps: Option<&'h DomCaps>,
    /// The machine type's vCPU limit, when a rule can need it and a source knows it.
    pub machine_limit: Option<MachineLimit>,
    /// KVM's vCPU limit, when a rule can need it and the kernel (or an override) says.
    pub kvm_limit: Option<Sourced<u32>>,
    /// The host's online CPU count, when `vcpu.max = "host"` needs it.
    pub host_cpus: Option<Sourced<u32>>,
    /// The versioned machine type the domain's alias stands for, when a host file says.
    pub canonical_machine: Option<String>,
    /// The emulator whose (fresh) QEMU capability cache does not list the domain's machine type
    /// ([`Host::machine_unsupported`]).
    pub machine_unsupported: Option<String>,
    /// Why the host runs no guest of the domain's arch and virt type
    /// ([`Host::arch_unsupported`]), when so.
    pub arch_unsupported: Option<crate::host::ArchOffer>,
    /// Where [`DomainFacts::machine_unsupported`] was judged from: the judged host's
    /// capabilities file, or libvirt's QEMU capability cache.
    pub machine_support_source: String,
    /// The domain's machine type when the judged host's capabilities mark it deprecated
    /// ([`Host::machine_deprecated`]).
    pub machine_deprecated: Option<DeprecatedMachine>,
    /// The host's libvirt version, when a version rule can matter and a source says
    /// ([`Host::libvirt_version`]); unknown, libvirt 9.0's rules apply.
    pub libvirt: Option<Sourced<LibvirtVersion>>,
    /// What the host's QEMU gives an x86 TCG guest ([`TcgFacts`]): its release, when the vCPUs
    /// can need x2APIC, and the TCG's word on the models, when libvirt compares the guest CPU
    /// with it.
    pub tcg: TcgFacts,
    /// The QEMU release an AMD IOMMU's `xtsup` depends on ([`crate::amd_iommu::qemu_release`]):
    /// looked up only for a domain with `<iommu model='amd'>` whose vCPUs can pass 255.
    pub amd_iommu_qemu: Option<Sourced<crate::libvirt::version::QemuVersion>>,
    /// This host's releases as the table of known hazards asks them for a guest started here
    /// ([`crate::hazards`]): its libvirt, and its QEMU only when an entry such a guest may meet
    /// with that libvirt depends on it ([`crate::hazards::needs_qemu`]).
    pub hazard_releases: crate::hazards::Releases,
    /// The host CPU libvirt compares an x86 KVM custom CPU with at start, under
    /// `check='partial'` ([`crate::validate::kvm`]), when the host's capabilities and cpu_map
    /// give it.
    pub kvm_start: Option<kvm_start::KvmStartHost<'h>>,
    /// Why [`DomainFacts::kvm_start`] is None for an x86 KVM domain with a model
    /// ([`kvm_start::missing`]), for the `not-compared` finding.
    pub kvm_start_missing: Option<String>,
    /// An AMD host whose QEMU aborts a KVM CPU carrying `arch-capabilities`
    /// ([`crate::validate::arch_caps`]), when its facts say so.
    pub arch_caps: Option<arch_caps::ArchCapsHost<'h>>,
    /// The CPU models the emulator offers an Arm guest with a custom model when no
    /// domcapabilities are given ([`Host::qemu_cpu_models`]: the QEMU capability cache).
    pub arm_models: Option<Sourced<Vec<String>>>,
    /// The domain's arch, virt type, and the arch of the host that runs it
    /// ([`crate::libvirt::arch::host_arch`]), for the CPU modes libvirt offers.
    arch: String,
    pub(crate) virt_type: String,
    host_arch: &'static str,
}

/// Every vCPU count a machine type of any family allows is at least 240 (RHEL i440fx) and every
/// [`DomainFacts::hazard_releases`] of `dom` started on `host`.
fn hazard_releases(dom: &Domain<'_>, host: &Host) -> crate::hazards::Releases {
    let libvirt = host.libvirt_version().map(|v| v.value);
    let qemu = crate::hazards::needs_qemu(&dom.hazard_shape(false), libvirt)
        .then(|| host.qemu_version(dom.arch(), dom.emulator().as_deref()))
        .flatten()
        .map(|v| v.value);
    crate::hazards::Releases { libvirt, qemu }
}

/// KVM since Linux 4.x allows at least 240 vCPUs on the arches libvirt's QEMU driver runs: below
/// that neither limit is looked up.
pub const KVM_FLOOR: u32 = 240;

impl<'h> DomainFacts<'h> {
    /// Gathers from `host` the facts `dom` under `plan` needs.
    #[must_use]
    pub fn gather(dom: &Domain<'_>, plan: &Plan, host: &'h Host) -> DomainFacts<'h> {
        let (arch, vt, machine) = (dom.arch(), dom.virt_type(), dom.machine());
        let domcaps = host.domcaps_for(arch, vt, machine);
        let mut models = BTreeMap::new();
        for name in model_names(dom, plan, domcaps) {
            let features = host.model_features(&name);
            models.insert(name, features);
        }
        let unknown_features = feature_names(dom, plan)
            .into_iter()
            .filter(|f| !host.feature_known(f))
            .collect();
        let max = child(dom.root(), "vcpu")
            .and_then(|v| read_vcpu(v).ok())
            .map_or(1, |c| c.max);
        let planned_max = plan.vcpu_max.is_some();
        let machine_limit = (planned_max || family_floor(arch, machine).is_none_or(|f| max > f))
            .then(|| host.machine_limit(arch, vt, machine, dom.emulator().as_deref()))
            .flatten();
        let machine_limit = with_gic_limit(dom, machine_limit);
        let kvm_limit = (vt == "kvm" && (planned_max || max > KVM_FLOOR))
            .then(|| host.kvm_limit().cloned())
            .flatten();
        let libvirt = needs_version(dom, plan, max)
            .then(|| host.libvirt_version().cloned())
            .flatten();
        let host_cpus = plan
            .vcpu_max
            .as_ref()
            .is_some_and(|m| m.value == VcpuMax::Host)
            .then(|| host.cpus().cloned())
            .flatten();
        let kvm_start = kvm_start::gather(dom, host);
        let hazard_releases = hazard_releases(dom, host);
        DomainFacts {
            hazard_releases,
            models,
            unknown_features,
            cpu_map_source: host.cpu_map_source(),
            cpu_map_problems: host.cpu_map_problems(),
            domcaps,
            machine_limit,
            kvm_limit,
            host_cpus,
            canonical_machine: host.canonical_machine(arch, machine),
            machine_unsupported: host.machine_unsupported(
                arch,
                vt,
                machine,
                dom.emulator().as_deref(),
            ),
            arch_unsupported: host.arch_unsupported(arch, vt),
            machine_support_source: host.machine_support_source(),
            machine_deprecated: host.machine_deprecated(
                arch,
                vt,
                machine,
                dom.emulator().as_deref(),
            ),
            libvirt,
            tcg: TcgFacts::gather(dom, plan, host, domcaps),
            amd_iommu_qemu: crate::amd_iommu::qemu_release(
                dom,
                host,
                planned_max || plan.iommu.is_some() || max > crate::topology::X86_XAPIC_LIMIT,
            ),
            kvm_start_missing: (kvm_start.is_none() && vt == "kvm" && is_x86(arch))
                .then(|| kvm_start::missing(dom, host))
                .flatten(),
            kvm_start,
            arch_caps: arch_caps::gather(dom, host),
            arm_models: arm_models(dom, plan, host, domcaps),
            arch: arch.to_string(),
            virt_type: vt.to_string(),
            host_arch: crate::libvirt::arch::host_arch(),
        }
    }

    /// Whether libvirt offers the CPU `mode` to this domain: domcapabilities' `<mode
    /// supported='yes'>` when a file gives them for its arch and virt type, else the built-in
    /// table ([`crate::modes::builtin_supported`]); None when neither says.
    #[must_use]
    pub fn mode_supported(&self, mode: CpuMode) -> Option<bool> {
        // libvirt 7.0 refuses the mode at define whatever its domcapabilities say: they do not
        // list `maximum` at all (seen: Debian 11's 7.0.0, "Invalid mode attribute 'maximum'").
        if mode == CpuMode::Maximum && self.lacks(VersionRule::MaximumMode) {
            return Some(false);
        }
        match self.domcaps {
            Some(d) => Some(d.supports(mode)),
            None => {
                crate::modes::builtin_supported(mode, &self.arch, &self.virt_type, self.host_arch)
            }
        }
    }

    /// Where [`DomainFacts::mode_supported`] answers from: a domcapabilities file or the built-in
    /// table.
    #[must_use]
    pub fn modes_source(&self) -> String {
        self.domcaps.map_or_else(
            || "the built-in table of CPU modes".to_string(),
            |d| d.source.clone(),
        )
    }

    /// libvirt's refusal of `mode` for this domain ("CPU mode 'host-model' for aarch64 qemu domain
    /// on x86_64 host is not supported by hypervisor", `src/qemu/qemu_validate.c`).
    #[must_use]
    pub fn mode_refusal(&self, mode: CpuMode) -> String {
        if mode == CpuMode::Maximum && self.lacks(VersionRule::MaximumMode) {
            // libvirt 7.0's virCPUDefParseXML does not know the mode (seen: Debian 11's 7.0.0).
            return "Invalid mode attribute 'maximum'".to_string();
        }
        let host = crate::modes::host_arch_for(&self.arch, &self.virt_type, self.host_arch);
        format!(
            "CPU mode '{mode}' for {} {} domain on {host} host is not supported by hypervisor",
            self.arch, self.virt_type
        )
    }

    /// Whether the host's libvirt has the behaviour `rule` (its version is at least the release
    /// that brought it). An unknown version means libvirt 9.0's rules (the built-in cpu_map's).
    #[must_use]
    pub fn applies(&self, rule: VersionRule) -> bool {
        self.libvirt
            .as_ref()
            .is_some_and(|v| v.value >= rule.since())
    }

    /// Whether the host's libvirt is known to predate `rule` (its version is known and below the
    /// release that brought it). Rules about what an old libvirt lacks use this, so that an
    /// unknown version (libvirt 9.0's rules) is not judged as older than 9.0.
    #[must_use]
    pub fn lacks(&self, rule: VersionRule) -> bool {
        self.libvirt.is_some() && !self.applies(rule)
    }

    /// Which libvirt's rules are used, for messages: `libvirt 11.3.0 (from SOURCE)`, or
    /// `libvirt 9.0's rules (the host's libvirt version is unknown)`.
    #[must_use]
    pub fn libvirt_rules(&self) -> String {
        match &self.libvirt {
            Some(v) => format!("libvirt {} (from {})", v.value, v.source),
            None => "libvirt 9.0's rules (the host's libvirt version is unknown)".to_string(),
        }
    }

    /// The features of `model` (libvirt spellings), or None when cpu_map does not define it.
    ///
    /// Only models [`DomainFacts::gather`] saw can be asked: the domain's, the policy's, the arch's
    /// default and the host-model CPU's.
    #[must_use]
    pub fn model_features(&self, model: &str) -> Option<&BTreeSet<String>> {
        debug_assert!(
            self.models.contains_key(model),
            "model '{model}' was not gathered"
        );
        self.models.get(model).and_then(Option::as_ref)
    }

    /// A custom CPU's model (QEMU's `qemu64` when it names none) and the features libvirt
    /// guarantees it: the model's as the cpu_map defines it, with the ones `explicit` requires
    /// and without those it disables. None for a model the cpu_map lacks (its own finding says
    /// so).
    #[must_use]
    pub fn custom_cpu_features(
        &self,
        cpu: Option<roxmltree::Node<'_, '_>>,
        explicit: &[(String, Option<FeaturePolicy>)],
    ) -> Option<(String, BTreeSet<String>)> {
        let model = cpu
            .and_then(|c| crate::xml::child(c, "model"))
            .and_then(crate::domain::model_name)
            .unwrap_or_else(|| "qemu64".to_string());
        let feats = guaranteed_features(Some(self.model_features(&model)?), explicit);
        Some((model, feats))
    }

    /// The features the host's host-model CPU gives, minus those the domain switches off, and
    /// where it came from: domcapabilities', else for a KVM guest of a host as found QEMU's
    /// KVM host CPU of the capability cache decoded as libvirt decodes it into that CPU
    /// ([`kvm_start::KvmStartHost`]: loads the cpu_map as CPUID data), for a TCG guest the CPU
    /// TCG gives ([`TcgFacts::host_cpu`]). None when none says.
    ///
    /// `derived` false asks domcapabilities only: what a warning needs, which is not worth
    /// the hook's loading this machine's cpu_map as CPUID data (about 3 ms at a guest start).
    #[must_use]
    pub fn host_model_features(
        &self,
        explicit: &[(String, Option<FeaturePolicy>)],
        derived: bool,
    ) -> Option<(BTreeSet<String>, String)> {
        let (mut feats, source) = match self.domcaps.and_then(|d| Some((d.host_model.as_ref()?, d)))
        {
            Some((hm, d)) => (
                hm.guaranteed_features(hm.model.as_deref().and_then(|m| self.model_features(m))),
                d.source.clone(),
            ),
            None if !derived => return None,
            // Under TCG: the CPU it gives, from the capability cache (`<hostCPU type='tcg'>`).
            None if self.virt_type == "qemu" => self.tcg.host_cpu.clone()?,
            None => {
                let start = self.kvm_start.as_ref()?;
                let (_, loaded) = start.loaded()?;
                let (host, source) = loaded.host_model.as_ref()?;
                let hm = host.cpu.as_ref()?;
                // The decoded model is none the domain names: read from the host's cpu_map.
                let model = hm
                    .model
                    .as_deref()
                    .and_then(|m| start.host.model_features(m));
                (hm.guaranteed_features(model.as_ref()), source.clone())
            }
        };
        for (name, _) in explicit
            .iter()
            .filter(|(_, p)| !p.is_some_and(FeaturePolicy::gives))
        {
            feats.remove(name);
        }
        Some((feats, source))
    }

    /// Whether the model tables are the built-in copy of libvirt 9.0's (no cpu_map directory on
    /// this machine): then a name they lack may still be one the guest's libvirt knows.
    #[must_use]
    pub fn cpu_map_is_builtin(&self) -> bool {
        self.cpu_map_source == "built-in"
    }

    /// Whether libvirt knows the x86 feature `name` (libvirt spelling). Only the domain's and the
    /// policy's feature names are looked up; the psABI levels' are libvirt 9.0's own.
    #[must_use]
    pub fn feature_known(&self, name: &str) -> bool {
        !self.unknown_features.contains(name)
    }
}

/// Behaviours of libvirt that changed between releases, each with the release that changed it
/// (libvirt's NEWS) and the facts seen on libvirt 9.0 and 11.3 (`tests/libvirt/ROOT-NOTES.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionRule {
    /// libvirt 10.1.0 (NEWS: "qemu: Support clusters in CPU topology"): `<topology clusters>` is
    /// read and counts in the product; libvirt 9.0 ignores the attribute. libvirt 11.3 writes
    /// `clusters='1'` itself on x86.
    Clusters,
    /// libvirt 10.10.0 (NEWS: "qemu: Automatically add IOMMU when needed"): a domain with more
    /// than 255 vCPUs gets an Intel IOMMU with `intremap` and `eim` on (or an existing one its
    /// `eim`), and a split I/O APIC where interrupt remapping needs one, at define; libvirt 9.0
    /// refuses the domain instead ("more than 255 vCPUs require extended interrupt mode enabled on
    /// the iommu device"). The IOMMU it adds is validated as a written one: an explicit `<ioapic
    /// driver='kvm'/>` is refused ("IOMMU interrupt remapping requires split I/O APIC (ioapic
    /// driver='qemu')", seen with 11.3 and 12.8).
    AutoIommu,
    /// libvirt 9.6.0 (NEWS: "qemu: Add NUMA node automatically for memory hotplug"): `<maxMemory>`
    /// without a NUMA cell gets one at define; before, "At least one numa node has to be
    /// configured when enabling memory hotplug".
    AutoNumaForMemoryHotplug,
    /// libvirt 7.1.0 (formatdomain: `maximum` "Since 7.1.0", QEMU's `-cpu max`): `<cpu
    /// mode='maximum'>`. libvirt 7.0 refuses it at define, kvm and qemu alike ("unsupported
    /// configuration: Invalid mode attribute 'maximum'", seen on Debian 11's 7.0.0) and its
    /// domcapabilities list no such mode; the TCG fallback of host-passthrough is then
    /// host-model (defined and started under TCG on 7.0: live `EPYC`).
    MaximumMode,
    /// libvirt 12.2.0 (NEWS: "conf: support more than 255 vCPUs with amd-iommu": "With 256 or
    /// more vCPUs libvirt previously required EIM enabled for all models of IOMMU. This is not
    /// valid for AMD model and validation was changed so that XTSup is required there.
    /// Additionally, it is automatically enabled if needed."). Above 255 x86 vCPUs on q35,
    /// `qemuDomainIOMMUDefPostParse` (`src/qemu/qemu_postparse.c`) switches on, where not
    /// written, an Intel IOMMU's `intremap` and `eim` and an AMD IOMMU's `intremap` and `xtsup`
    /// (the latter only with a QEMU that has `amd-iommu.xtsup`,
    /// [`crate::amd_iommu::XTSUP_SINCE`]), `qemuDomainDefEnableDefaultFeatures` adds the split
    /// I/O APIC where none is written, and the vCPU check takes any of the three: "more than 255
    /// vCPUs require either IOAPIC in QEMU or an iommu device with EIM or XTSup mode enabled"
    /// (seen with 12.8: `eim='off'` or `xtsup='off'` are kept and defined, the split I/O APIC
    /// added; with `<ioapic driver='kvm'/>` and both off, refused in those words). Before, 11.3
    /// refuses `eim='off'` and every AMD IOMMU: "more than 255 vCPUs require extended interrupt
    /// mode enabled on the iommu device" (`qemuValidateDomainDefCpu`, which asks `eim` of any
    /// model).
    X2apicIommu,
    /// libvirt 11.5.0 (NEWS: "qemu: add support for AMD IOMMU device": "The ``amd`` model for
    /// the ``<iommu>`` device is now supported. New attributes ``passthrough`` and ``xtsup``
    /// are also supported for this model."). Before, the parser refuses the model at define:
    /// "XML error: Invalid value for attribute 'model' in element 'iommu': 'amd'." (seen with
    /// 9.0 and 11.3), "XML error: unknown IOMMU model: amd" (seen with 7.0). Judged only when
    /// the host's libvirt version is known ([`DomainFacts::lacks`]).
    AmdIommu,
    /// libvirt 8.3.0 (NEWS: "qemu: Introduce support for virtio-iommu"): `<iommu
    /// model='virtio'>`. libvirt 7.0's parser refuses the model at define ("XML error: unknown
    /// IOMMU model: virtio", seen on Debian 11's 7.0.0). Judged only when the host's libvirt
    /// version is known ([`DomainFacts::lacks`]).
    VirtioIommu,
    /// libvirt 12.1.0 (NEWS: "Introduce granule attribute for virtio-iommu"; the series that
    /// validates it with `QEMU_CAPS_VIRTIO_IOMMU_AW_BITS`): a virtio IOMMU's `<driver aw_bits>`
    /// is accepted. Before, `virDomainIOMMUDefValidate` (`src/conf/domain_validate.c`) refuses
    /// every driver attribute of a virtio IOMMU ("iommu model 'virtio' doesn't support
    /// additional attributes", seen with 9.0 and 11.3); 12.8 defines `aw_bits` and refuses the
    /// others ("... doesn't support some additional attributes").
    VirtioIommuAwBits,
    /// `virCPUCheckForbiddenFeatures` at start (`qemuProcessUpdateGuestCPU`, before the
    /// comparison with the host's CPU): a forbidden feature that libvirt's "full" host CPU lists
    /// by name is refused as "Host CPU provides forbidden feature 'lm'"; before it, only the
    /// comparison refuses, "Host CPU provides forbidden features: lm" (seen: libvirt 7.0 the
    /// second, 9.0, 11.3 and 12.8 the first, on one AMD host). 9.0 is the first release seen with
    /// it; 8.x is not seen and judged as 7.0.
    ForbiddenFeatureLookup,
}

impl VersionRule {
    /// The first release with the behaviour.
    #[must_use]
    pub fn since(self) -> LibvirtVersion {
        let (major, minor) = match self {
            VersionRule::Clusters => (10, 1),
            VersionRule::AutoIommu => (10, 10),
            VersionRule::AutoNumaForMemoryHotplug => (9, 6),
            VersionRule::MaximumMode => (7, 1),
            VersionRule::X2apicIommu => (12, 2),
            VersionRule::AmdIommu => (11, 5),
            VersionRule::VirtioIommu => (8, 3),
            VersionRule::VirtioIommuAwBits => (12, 1),
            VersionRule::ForbiddenFeatureLookup => (9, 0),
        };
        LibvirtVersion {
            major,
            minor,
            micro: 0,
        }
    }

    /// A short name for allow-lists and messages (`libvirt >= 10.10: automatic IOMMU`).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            VersionRule::Clusters => "libvirt >= 10.1: <topology clusters>",
            VersionRule::AutoIommu => "libvirt >= 10.10: automatic IOMMU and split I/O APIC",
            VersionRule::AutoNumaForMemoryHotplug => {
                "libvirt >= 9.6: a NUMA node added for memory hotplug"
            }
            VersionRule::MaximumMode => "libvirt >= 7.1: <cpu mode='maximum'>",
            VersionRule::X2apicIommu => {
                "libvirt >= 12.2: more than 255 vCPUs with an IOMMU in EIM or XTSup mode, or a split I/O APIC"
            }
            VersionRule::AmdIommu => "libvirt >= 11.5: <iommu model='amd'>",
            VersionRule::VirtioIommu => "libvirt >= 8.3: <iommu model='virtio'>",
            VersionRule::VirtioIommuAwBits => "libvirt >= 12.1: <driver aw_bits> on a virtio IOMMU",
            VersionRule::ForbiddenFeatureLookup => {
                "libvirt >= 9.0: a forbidden feature looked up in the host CPU's list"
            }
        }
    }
}

/// Whether a version rule can matter for this domain: the vCPU rules of the plan, a maximum above
/// 255, a `clusters` attribute, an `<iommu>` or a `<maxMemory>`. Otherwise the version is not
/// looked up (the hook then reads nothing of libvirt's capability cache).
fn needs_version(dom: &Domain<'_>, plan: &Plan, max: u32) -> bool {
    let root = dom.root();
    // The mode `maximum` (asked for, or the fallback of host-passthrough under TCG) exists
    // from libvirt 7.1 on.
    let host_based =
        |m: Option<CpuMode>| matches!(m, Some(CpuMode::Maximum | CpuMode::HostPassthrough));
    host_based(plan.mode.as_ref().map(|m| m.value))
        || dom
            .cpus()
            .iter()
            .any(|c| host_based(crate::domain::cpu_mode(*c)))
        || plan.vcpu_max.is_some()
        || plan.topology.is_some()
        || plan.iommu.is_some()
        || max > crate::topology::X86_XAPIC_LIMIT
        || child(root, "maxMemory").is_some()
        || child(root, "devices").is_some_and(|d| child(d, "iommu").is_some())
        || dom
            .cpus()
            .iter()
            .any(|c| child(*c, "topology").is_some_and(|t| t.attribute("clusters").is_some()))
        // The words of a forbidden feature's refusal at start.
        || dom.cpus().iter().any(|c| {
            c.children()
                .any(|f| f.has_tag_name("feature") && f.attribute("policy") == Some("forbid"))
        })
}

/// The models the result can name: the domain's (any `<cpu>`), the plan's, the arch's default,
/// and the host-model CPU's (for the level a host-model guest reaches).
fn model_names(dom: &Domain<'_>, plan: &Plan, domcaps: Option<&DomCaps>) -> BTreeSet<String> {
    let mut names: BTreeSet<String> = dom
        .cpus()
        .iter()
        .flat_map(|c| {
            c.children()
                .filter(|n| crate::xml::is_libvirt_element(*n, "model"))
        })
        .flat_map(|m| [crate::domain::model_name(m), text_of(m)])
        .map(Option::unwrap_or_default)
        .collect();
    names.extend(plan.model.as_ref().map(|m| m.value.clone()));
    names.extend(default_model(dom.arch()).map(str::to_string));
    names.extend(
        domcaps
            .and_then(|d| d.host_model.as_ref())
            .and_then(|h| h.model.clone()),
    );
    names
}

/// Feature names of the domain's `<cpu>` elements and the plan's `require`/`disable`, libvirt
/// spellings, minus libvirt 9.0's own (known without reading a file).
fn feature_names(dom: &Domain<'_>, plan: &Plan) -> BTreeSet<String> {
    let mut names: BTreeSet<String> = dom
        .cpus()
        .iter()
        .flat_map(|c| cpu_features(*c))
        .map(|(name, _)| name)
        .collect();
    for set in [&plan.require, &plan.disable].into_iter().flatten() {
        names.extend(set.value.iter().cloned());
    }
    // Host::feature_known answers libvirt 9.0's names without a read (except for another
    // host's facts, whose own cpu_map alone decides).
    names
}

/// `limit`, or the GIC's when that is lower ([`crate::vcpu_limits::gic_limit`]: an aarch64 TCG
/// `virt` guest on GICv2 takes 8 vCPUs whatever its machine type allows).
fn with_gic_limit(dom: &Domain<'_>, limit: Option<MachineLimit>) -> Option<MachineLimit> {
    let Some(gic) = gic_limit_of(dom) else {
        return limit;
    };
    if limit.as_ref().is_some_and(|l| l.max_cpus <= gic.max_cpus) {
        return limit;
    }
    Some(MachineLimit {
        machine: limit.map_or_else(|| dom.machine().to_string(), |l| l.machine),
        max_cpus: gic.max_cpus,
        source: format!("built-in rule ({})", gic.rule),
    })
}

/// [`crate::vcpu_limits::gic_limit`] of `dom`, by its `<features><gic version>`.
pub(crate) fn gic_limit_of(dom: &Domain<'_>) -> Option<crate::vcpu_limits::BuiltinLimit> {
    let version = child(dom.root(), "features")
        .and_then(|f| child(f, "gic"))
        .and_then(|g| g.attribute("version"));
    crate::vcpu_limits::gic_limit(dom.arch(), dom.virt_type(), dom.machine(), version)
}

/// [`DomainFacts::arm_models`] for `dom` on `host`: only for an Arm guest whose result may name
/// a model (any of its `<cpu>` elements has one: the rewrite merges them into the first; or the
/// plan's `cpu.model`), and no domcapabilities of its arch and virt type (`domcaps`) list models.
fn arm_models(
    dom: &Domain<'_>,
    plan: &Plan,
    host: &Host,
    domcaps: Option<&DomCaps>,
) -> Option<Sourced<Vec<String>>> {
    let named = dom.cpus().iter().any(|c| child(*c, "model").is_some()) || plan.model.is_some();
    let arm = crate::libvirt::arch::Arch::of(dom.arch()).is_arm();
    if !named || !arm || domcaps.is_some_and(|d| !d.models.is_empty()) {
        return None;
    }
    host.qemu_cpu_models(dom.arch(), dom.emulator().as_deref(), dom.virt_type())
}
