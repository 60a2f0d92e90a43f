//! One host's facts, read from a file: its arch, its CPU as libvirt describes it, the custom
//! models it can run and its machine types.
//!
//! A facts file is one host. Four shapes are read, by root element:
//!
//! * `<domainCapabilities>` (`virsh domcapabilities`): the host CPU is the `host-model` CPU
//!   (model, vendor and `require`/`disable` features: what KVM and QEMU can give a guest, the CPU
//!   libvirt's `hypervisor-cpu-baseline` and `hypervisor-cpu-compare` work on); the custom models
//!   `usable='yes'`; the machine type.
//! * `<capabilities>` (`virsh capabilities`): the host CPU is `<host><cpu>` (the physical CPU as
//!   libvirt decodes it); the machine types of the host's arch.
//! * `<cpu>` with an `<arch>`: a bare host CPU, as in `virsh capabilities` (the form of libvirt's
//!   `tests/cputestdata/*-host.xml`).
//! * `<hostFacts name='HOST' libvirt='X.Y.Z'>` holding a `<capabilities>` and/or a
//!   `<domainCapabilities>`: one host's two documents in one file, the tool's own host-facts
//!   format (`virt-cpu-policyd --publish` writes it: [`crate::libvirt::host_facts::document`]). The
//!   `host-model` CPU wins over the capabilities' host CPU when both are there.
//!
//! The host's name is `<hostFacts name=...>` when given, else the file name without `.xml`
//! (`virsh capabilities` names no host). A directory stands for its regular `*.xml` files, sorted.
//!
//! The documents are read by [`crate::libvirt`], as `Host` reads them: a document libvirt refuses
//! (a host-model feature policy it does not know) is refused here too.

use crate::cpu::CpuError;
use crate::cpu::compare::{Comparison, GuestCpu, compare_cpus};
use crate::libvirt::arch::is_x86;
use crate::libvirt::capabilities::Capabilities;
use crate::libvirt::cpu_def::{CpuDef, FeaturePolicy};
use crate::libvirt::cpu_map::x86::X86Map;
use crate::libvirt::domcaps::DomCaps;
use crate::libvirt::version::LibvirtVersion;
use crate::libvirt::{Document, DocumentError, DocumentKind, read_document};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// How a host's published guest facts end (`HOST.guests.xml`, written beside its `HOST.xml`
/// host facts by `virt-cpu-policyd --publish` and `virt-cpu-policy facts --guests`): in a facts
/// directory such a file is a host's guests, not a host, and [`read_hosts`] passes over it.
pub const GUEST_FACTS_SUFFIX: &str = ".guests.xml";

/// Which element a host's CPU came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuOrigin {
    /// `virsh domcapabilities`' `<mode name='host-model'>`.
    HostModel,
    /// `virsh capabilities`' `<host><cpu>`.
    Capabilities,
    /// A bare host `<cpu>` document.
    HostCpu,
}

impl CpuOrigin {
    /// A short description for reports: `domcapabilities host-model`, `capabilities host CPU`,
    /// `host <cpu>`.
    #[must_use]
    pub fn describe(self) -> &'static str {
        match self {
            CpuOrigin::HostModel => "domcapabilities host-model",
            CpuOrigin::Capabilities => "capabilities host CPU",
            CpuOrigin::HostCpu => "host <cpu>",
        }
    }
}

/// What one facts file says about its host.
#[derive(Debug, Clone)]
pub struct ClusterHost {
    /// The host's name (see the module docs).
    pub name: String,
    /// The file.
    pub path: PathBuf,
    /// libvirt's arch name (`x86_64`, `aarch64`...).
    pub arch: String,
    /// The host CPU; None when the file has none (aarch64 domcapabilities: KVM has no
    /// `host-model` there).
    pub cpu: Option<CpuDef>,
    /// Where `cpu` came from.
    pub origin: Option<CpuOrigin>,
    /// The custom models `usable='yes'` in domcapabilities; None without domcapabilities (no
    /// restriction known).
    pub usable_models: Option<BTreeSet<String>>,
    /// Every custom model the host's domcapabilities list, usable or not: every model its
    /// libvirt knows (libvirt lists the whole cpu_map of the arch); None without domcapabilities.
    pub known_models: Option<BTreeSet<String>>,
    /// Machine types: domcapabilities' `<machine>`, capabilities' `<machine>` names (aliases
    /// included) of the host's arch.
    pub machines: BTreeSet<String>,
    /// The libvirt the host runs: `<hostFacts libvirt=...>`; None in the other shapes.
    pub libvirt: Option<LibvirtVersion>,
}

impl ClusterHost {
    /// A host described by one domcapabilities document already read by [`crate::host::Host`]
    /// (`--caps`, the daemon's snapshot): its host-model CPU, its custom models `usable='yes'`
    /// and its machine type. `name` names it in messages.
    #[must_use]
    pub fn from_domcaps(name: &str, d: &DomCaps) -> ClusterHost {
        let mut host = ClusterHost::unnamed(PathBuf::from(&d.source));
        host.name = name.to_string();
        host.add_domcaps(d);
        host
    }

    /// A host known by its physical CPU `cpu` (`virsh capabilities`' `<host><cpu>`, read from
    /// `source`) as a KVM guest sees it: that CPU without the features KVM never gives a guest
    /// ([`crate::cpu::KVM_NEVER_GIVES`]: those it lists are dropped, every one the map defines
    /// disabled, [`crate::cpu::NeverDisabled::EveryDefined`]), the most KVM can give, to
    /// compare a guest CPU with as libvirt's `hypervisor-cpu-compare` does with the host-model
    /// CPU. A feature `map` does not define is not disabled (the compare would refuse the name).
    /// `name` names it in messages.
    #[must_use]
    pub fn kvm_of_physical(name: &str, source: &str, cpu: &CpuDef, map: &X86Map) -> ClusterHost {
        let mut kvm = cpu.clone();
        let disable = crate::cpu::subtract_kvm_never(
            map,
            kvm.model.as_deref(),
            &mut kvm.features,
            |(f, _)| f,
            crate::cpu::NeverDisabled::EveryDefined,
        );
        kvm.features.extend(
            disable
                .into_iter()
                .map(|f| (f.to_string(), FeaturePolicy::Disable)),
        );
        ClusterHost::of_capabilities_cpu(name, source, kvm)
    }

    /// The CPU libvirt compares a KVM guest's custom CPU with when it starts it under
    /// `check='partial'` (libvirt's "full" host CPU of `virQEMUCapsInitHostCPUModel`): the host's
    /// own CPU as its CPUID shows it (`physical`, `virsh capabilities`' `<host><cpu>`, read from
    /// `source`), with the features QEMU's KVM host CPU has beyond it (`kvm_adds`: the `require`
    /// features of domcapabilities' host-model CPU, `x2apic`, `hypervisor`, `tsc-deadline`...;
    /// names `map` does not define are left out). Not what KVM gives: a feature the CPUID has and
    /// KVM cannot give (`pni` and `popcnt` on a nested host) passes, and QEMU drops it at start
    /// (seen with libvirt 9.0, 11.3 and 12.8: `<model>Nehalem</model>` starts, its live XML
    /// disabling them). `name` names it in messages.
    #[must_use]
    pub fn started_kvm_compare(
        name: &str,
        source: &str,
        physical: &CpuDef,
        kvm_adds: Option<&CpuDef>,
        map: &X86Map,
    ) -> ClusterHost {
        let mut full = physical.clone();
        let adds = kvm_adds
            .into_iter()
            .flat_map(|c| &c.features)
            .filter(|(f, p)| *p == FeaturePolicy::Require && map.feature(f).is_some());
        for (f, _) in adds {
            if !full.features.iter().any(|(have, _)| have == f) {
                full.features.push((f.clone(), FeaturePolicy::Require));
            }
        }
        ClusterHost::of_capabilities_cpu(name, source, full)
    }

    /// A host known by its KVM host-model CPU `cpu` (domcapabilities' shape, here decoded from
    /// another `source`: QEMU's KVM host CPU in libvirt's capability cache), named `name`.
    #[must_use]
    pub fn of_host_model(name: &str, source: &str, cpu: CpuDef) -> ClusterHost {
        let mut host = ClusterHost::of_capabilities_cpu(name, source, cpu);
        host.origin = Some(CpuOrigin::HostModel);
        host
    }

    /// A host known by a CPU of `virsh capabilities`' shape (`source` the file), named `name`.
    fn of_capabilities_cpu(name: &str, source: &str, cpu: CpuDef) -> ClusterHost {
        let mut host = ClusterHost::unnamed(PathBuf::from(source));
        host.name = name.to_string();
        host.arch = cpu.arch.clone().unwrap_or_default();
        host.cpu = Some(cpu);
        host.origin = Some(CpuOrigin::Capabilities);
        host
    }

    /// The host of one facts file's documents (`path`, for messages), named `name`: the
    /// `libvirt` it runs (`<hostFacts libvirt=...>`), its capabilities `caps` and its
    /// domcapabilities `domcaps` (KVM's when there, else the first: its host-model CPU wins over
    /// the capabilities' host CPU). What [`read_host`] makes of a `<hostFacts>`,
    /// `<capabilities>` or `<domainCapabilities>`, and `fleet --admit` of the facts it read.
    ///
    /// # Errors
    /// [`CpuError::Facts`]: capabilities without a host CPU, capabilities and domcapabilities
    /// of different arches, no arch, a name with a control character.
    pub fn of_facts(
        path: &Path,
        name: String,
        libvirt: Option<LibvirtVersion>,
        caps: Option<&Capabilities>,
        domcaps: &[DomCaps],
    ) -> Result<ClusterHost, CpuError> {
        let mut host = ClusterHost::unnamed(path.to_owned());
        host.name = name;
        host.libvirt = libvirt;
        if let Some(d) = domcaps
            .iter()
            .find(|d| d.virt_type == "kvm")
            .or(domcaps.first())
        {
            host.add_domcaps(d);
        }
        if let Some(c) = caps {
            host.add_capabilities(c)
                .map_err(|m| CpuError::facts(path, &m))?;
        }
        host.checked()
    }

    /// This host as another host of the same facts (`fleet --admit`: a host of a class the
    /// first one of which was read), named `name`, read from `path`.
    ///
    /// # Errors
    /// [`CpuError::Facts`]: a name with a control character.
    pub fn renamed(&self, name: &str, path: &Path) -> Result<ClusterHost, CpuError> {
        let mut host = self.clone();
        host.name = name.to_string();
        path.clone_into(&mut host.path);
        host.checked()
    }

    /// The host if it names an arch and its name has no control character.
    fn checked(self) -> Result<ClusterHost, CpuError> {
        if self.arch.is_empty() {
            return Err(CpuError::facts(&self.path, "names no arch"));
        }
        // The name goes into comment lines of the toml, nova and cloudstack output: a newline
        // there would start a line of configuration taken from a file on shared storage.
        if self.name.chars().any(char::is_control) {
            return Err(CpuError::facts(
                &self.path,
                &format!(
                    "the host name {:?} has a control character (a hostname has none)",
                    self.name
                ),
            ));
        }
        Ok(self)
    }

    /// A host of no name yet, read from `path`, of whom nothing is known.
    fn unnamed(path: PathBuf) -> ClusterHost {
        ClusterHost {
            name: String::new(),
            path,
            arch: String::new(),
            cpu: None,
            origin: None,
            usable_models: None,
            known_models: None,
            machines: BTreeSet::new(),
            libvirt: None,
        }
    }

    /// What domcapabilities say: the arch, the machine type, the host-model CPU (when it names a
    /// model: the CPU `hypervisor-cpu-baseline` works on), the usable custom models.
    fn add_domcaps(&mut self, d: &DomCaps) {
        if !d.arch.is_empty() {
            self.arch.clone_from(&d.arch);
        }
        if !d.machine.is_empty() {
            self.machines.insert(d.machine.clone());
        }
        if let Some(cpu) = d.host_model.as_ref().filter(|c| c.model.is_some()) {
            self.cpu = Some(cpu.clone());
            self.origin = Some(CpuOrigin::HostModel);
        }
        if let Some(usable) = d.usable_models() {
            self.usable_models = Some(usable);
        }
        if !d.models.is_empty() {
            self.known_models = Some(d.models.iter().map(|(m, _)| m.clone()).collect());
        }
    }

    /// What capabilities say: the host CPU's arch (which must agree with domcapabilities'), the
    /// host CPU unless domcapabilities gave one, the machine types of that arch.
    fn add_capabilities(&mut self, c: &Capabilities) -> Result<(), String> {
        let Some(cpu) = &c.host_cpu else {
            return Err("capabilities without <host><cpu>".into());
        };
        let arch = c.host_arch().unwrap_or_default();
        if !self.arch.is_empty() && !arch.is_empty() && self.arch != arch {
            return Err(format!(
                "its capabilities say arch {arch}, its domcapabilities {}",
                self.arch
            ));
        }
        if self.arch.is_empty() {
            self.arch = arch.to_string();
        }
        if self.cpu.is_none() {
            self.cpu = Some(cpu.clone());
            self.origin = Some(CpuOrigin::Capabilities);
        }
        let machines = c.machines.iter().filter(|m| m.arch == self.arch);
        self.machines.extend(machines.map(|m| m.name.clone()));
        Ok(())
    }
}

/// Reads every host of `paths`: files, and directories standing for their `*.xml` files.
///
/// # Errors
/// [`CpuError::Input`] for a file that cannot be read or is not UTF-8 XML;
/// [`CpuError::Facts`] for a document that is not a facts file, a directory without `*.xml`
/// files, or two files naming the same host; [`CpuError::NoHosts`] for an empty list.
pub fn read_hosts(paths: &[PathBuf]) -> Result<Vec<ClusterHost>, CpuError> {
    let mut hosts: Vec<ClusterHost> = Vec::new();
    for path in paths {
        let files = if path.is_dir() {
            // Every *.xml entry but guest facts is a host: one that cannot be read (a dangling link, a FIFO) is an
            // error below, never a host silently left out of the baseline.
            let mut files = crate::readfile::xml_entries(path)
                .map_err(|e| CpuError::facts(path, &format!("cannot list the directory: {e}")))?;
            // A published directory holds each host's guests beside it: those are no host.
            files.retain(|f| {
                !f.file_name()
                    .is_some_and(|n| n.to_string_lossy().ends_with(GUEST_FACTS_SUFFIX))
            });
            if files.is_empty() {
                return Err(CpuError::facts(
                    path,
                    "the directory holds no *.xml facts files",
                ));
            }
            files
        } else {
            vec![path.clone()]
        };
        for (file, host) in files
            .iter()
            .zip(crate::parallel::map_ordered(&files, |f| read_host(f)))
        {
            let host = host?;
            if let Some(other) = hosts.iter().find(|h| h.name == host.name) {
                return Err(CpuError::facts(
                    file,
                    &format!(
                        "names host '{}' as {} does already; one file per host",
                        host.name,
                        other.path.display()
                    ),
                ));
            }
            hosts.push(host);
        }
    }
    if hosts.is_empty() {
        return Err(CpuError::NoHosts);
    }
    Ok(hosts)
}

/// Reads one facts file (see the module docs for the shapes).
///
/// # Errors
/// As [`read_hosts`].
pub fn read_host(path: &Path) -> Result<ClusterHost, CpuError> {
    let accept = [
        DocumentKind::DomCaps,
        DocumentKind::Capabilities,
        DocumentKind::Cpu,
        DocumentKind::HostFacts,
    ];
    let doc = read_document(path, &accept).map_err(|e| match e {
        DocumentError::Input(e) => CpuError::Input(e),
        DocumentError::Invalid { path, message } => CpuError::Facts { path, message },
    })?;
    let stem = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .map(|n| n.strip_suffix(".xml").unwrap_or(&n).to_string())
        .unwrap_or_default();
    let one = std::slice::from_ref;
    match doc {
        Document::HostFacts(f) => ClusterHost::of_facts(
            path,
            f.name.unwrap_or(stem),
            f.libvirt,
            f.capabilities.as_ref(),
            &f.domcaps,
        ),
        Document::DomCaps(d) => ClusterHost::of_facts(path, stem, None, None, one(&d)),
        Document::Capabilities(c) => ClusterHost::of_facts(path, stem, None, Some(&c), &[]),
        Document::Cpu(cpu) => {
            let Some(arch) = cpu.arch.clone() else {
                return Err(CpuError::facts(
                    path,
                    "this <cpu> names no <arch>: a host CPU from virsh capabilities has one (a guest <cpu> is not host facts)",
                ));
            };
            let mut host = ClusterHost::unnamed(path.to_owned());
            host.name = stem;
            host.arch = arch;
            host.cpu = Some(cpu);
            host.origin = Some(CpuOrigin::HostCpu);
            host.checked()
        }
        // Not among `accept`: read_document refused it.
        Document::QemuCaps(_) => Err(CpuError::facts(path, "names no arch")),
    }
}

/// Compares `guest` (read from `guest_path`) with `host`'s CPU (libvirt's `x86Compute`,
/// [`compare_cpus`]).
///
/// # Errors
/// [`CpuError::Facts`] for a host that is not x86 or has no CPU; unknown models, features
/// (in either CPU).
pub fn compare(
    map: &X86Map,
    host: &ClusterHost,
    guest: &GuestCpu,
    guest_path: &Path,
) -> Result<Comparison, CpuError> {
    compare_cpus(map, host_cpu(host)?, &host.path, guest, guest_path)
}

/// The CPU of an x86 `host` that compare can judge against.
fn host_cpu(host: &ClusterHost) -> Result<&CpuDef, CpuError> {
    let host_error = |message: String| CpuError::Facts {
        path: host.path.clone(),
        message,
    };
    if !is_x86(&host.arch) {
        return Err(host_error(format!(
            "compare judges x86 hosts (libvirt's x86Compute); this host is {}",
            host.arch
        )));
    }
    host.cpu.as_ref().ok_or_else(|| {
        host_error("no host CPU: its domcapabilities have no supported host-model".into())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::libvirt::cpu_def::FeaturePolicy;
    use crate::testdata::corpus;

    #[test]
    #[cfg_attr(
        not(vcp_shared_corpus),
        ignore = "needs ../shared/corpus beside the checkout"
    )]
    fn reads_the_four_shapes() {
        let cpu = corpus("libvirt-cputestdata/x86_64-cpuid-Xeon-E5-2650-v3-host.xml");
        let dc = corpus("libvirt-domaincapsdata/qemu_10.0.0-q35.x86_64.xml");
        let caps = corpus("virt-manager/capabilities/kvm-aarch64.xml");
        let arm = corpus("libvirt-domaincapsdata/qemu_11.0.0-virt.aarch64.xml");
        let xeon = read_host(&cpu).unwrap();
        assert_eq!(xeon.name, "x86_64-cpuid-Xeon-E5-2650-v3-host");
        assert_eq!(xeon.arch, "x86_64");
        assert_eq!(xeon.origin, Some(CpuOrigin::HostCpu));
        let c = xeon.cpu.unwrap();
        assert_eq!(c.model.as_deref(), Some("Haswell-v2"));
        assert_eq!(c.vendor.as_deref(), Some("Intel"));
        assert!(
            c.features
                .contains(&("invtsc".into(), FeaturePolicy::Require))
        );
        assert!(xeon.usable_models.is_none());

        let epyc = read_host(&dc).unwrap();
        assert_eq!(epyc.origin, Some(CpuOrigin::HostModel));
        let c = epyc.cpu.unwrap();
        assert_eq!(c.model.as_deref(), Some("EPYC-Rome"));
        assert!(
            c.features
                .contains(&("xsaves".into(), FeaturePolicy::Disable))
        );
        let usable = epyc.usable_models.unwrap();
        assert!(usable.contains("486") && !usable.contains("Broadwell"));
        assert!(epyc.machines.contains("pc-q35-10.0"));

        let neoverse = read_host(&caps).unwrap();
        assert_eq!(
            (neoverse.arch.as_str(), neoverse.origin),
            ("aarch64", Some(CpuOrigin::Capabilities))
        );
        assert_eq!(neoverse.cpu.unwrap().model.as_deref(), Some("Neoverse-N1"));
        assert!(!neoverse.machines.is_empty());

        let virt = read_host(&arm).unwrap();
        assert_eq!(virt.arch, "aarch64");
        assert!(virt.cpu.is_none(), "aarch64 KVM has no host-model");
    }

    /// What KVM can give of a physical CPU: the features it never gives are dropped from the
    /// list and disabled (those of the model too), the rest kept as they are.
    #[test]
    fn kvm_of_physical_leaves_out_what_kvm_never_gives() {
        let map = X86Map::load(&crate::testdata::cpu_map()).unwrap();
        let physical = CpuDef {
            arch: Some("x86_64".into()),
            model: Some("Nehalem".into()),
            vendor: Some("Intel".into()),
            features: vec![
                ("monitor".into(), FeaturePolicy::Require),
                ("vmx".into(), FeaturePolicy::Require),
                ("ht".into(), FeaturePolicy::Require),
            ],
            ..CpuDef::default()
        };
        let h = ClusterHost::kvm_of_physical("h", "caps.xml", &physical, &map);
        assert_eq!(
            (h.arch.as_str(), h.origin),
            ("x86_64", Some(CpuOrigin::Capabilities))
        );
        let cpu = h.cpu.unwrap();
        assert_eq!(cpu.model.as_deref(), Some("Nehalem"));
        assert!(
            cpu.features
                .contains(&("vmx".into(), FeaturePolicy::Require))
        );
        for f in ["monitor", "ht", "ds", "acpi"] {
            assert!(
                cpu.features.contains(&(f.into(), FeaturePolicy::Disable)),
                "{f}"
            );
            assert!(
                !cpu.features.contains(&(f.into(), FeaturePolicy::Require)),
                "{f}"
            );
        }
    }

    #[test]
    fn host_facts_wrapper_and_refusals() {
        let dir = std::env::temp_dir().join(format!("vcp-facts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("a.xml");
        std::fs::write(
            &f,
            "<hostFacts name='node-7'><capabilities><host><cpu><arch>x86_64</arch><model>Nehalem</model>\
             <vendor>Intel</vendor><feature name='vmx'/></cpu></host></capabilities></hostFacts>",
        )
        .unwrap();
        let h = read_host(&f).unwrap();
        assert_eq!(
            (h.name.as_str(), h.origin),
            ("node-7", Some(CpuOrigin::Capabilities))
        );
        assert_eq!(h.libvirt, None);
        // What the daemon publishes: the host's name and libvirt version.
        let caps = "<capabilities><host><cpu><arch>x86_64</arch><model>Nehalem</model></cpu></host></capabilities>";
        let doc = crate::libvirt::host_facts::document(
            "node-8",
            "11.3.0".parse().unwrap(),
            None,
            caps,
            &[],
        );
        let g = dir.join("g.xml");
        std::fs::write(&g, doc).unwrap();
        let h = read_host(&g).unwrap();
        assert_eq!(h.name, "node-8");
        assert_eq!(h.libvirt.map(|v| v.to_string()).as_deref(), Some("11.3.0"));
        std::fs::write(&g, format!("<hostFacts libvirt='x'>{caps}</hostFacts>")).unwrap();
        let e = read_host(&g).unwrap_err().to_string();
        assert!(e.contains("g.xml") && e.contains("libvirt='x'"), "{e}");
        std::fs::remove_file(&g).unwrap();
        std::fs::write(dir.join("b.xml"), "<domain/>").unwrap();
        let e = read_hosts(std::slice::from_ref(&dir))
            .unwrap_err()
            .to_string();
        assert!(e.contains("b.xml") && e.contains("<domain>"), "{e}");
        std::fs::write(
            dir.join("b.xml"),
            "<cpu mode='custom'><model>Nehalem</model></cpu>",
        )
        .unwrap();
        let e = read_hosts(&[dir.join("b.xml")]).unwrap_err().to_string();
        assert!(e.contains("names no <arch>"), "{e}");
        std::fs::write(
            dir.join("b.xml"),
            "<hostFacts name='node-7'><capabilities><host><cpu><arch>x86_64</arch></cpu></host></capabilities></hostFacts>",
        )
        .unwrap();
        let e = read_hosts(std::slice::from_ref(&dir))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("names host 'node-7'") && e.contains("a.xml"),
            "{e}"
        );
        let empty = dir.join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        let e = read_hosts(&[empty]).unwrap_err().to_string();
        assert!(e.contains("no *.xml"), "{e}");
        assert!(matches!(read_hosts(&[]), Err(CpuError::NoHosts)));
        std::fs::remove_dir_all(&dir).ok();
    }

    /// One reader, one answer: a domcapabilities file whose host-model CPU libvirt refuses (a
    /// feature policy it does not know, a feature listed twice) is refused by `Host` (`--caps`,
    /// the hook's snapshot) and by the cluster (`baseline`, `[host] cluster`) alike, in
    /// libvirt's words. Before, `Host` counted an unknown policy as `require` and the cluster
    /// dropped the host's CPU without a word.
    #[test]
    fn host_and_cluster_refuse_a_host_model_libvirt_refuses_alike() {
        let dir = std::env::temp_dir().join(format!("vcp-facts-strict-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (features, libvirt_says) in [
            (
                "<feature policy='mandatory' name='vme'/>",
                "Invalid CPU feature policy 'mandatory' for feature 'vme'",
            ),
            (
                "<feature policy='require' name='vme'/><feature policy='disable' name='vme'/>",
                "CPU feature 'vme' specified more than once",
            ),
        ] {
            let f = dir.join("dc.xml");
            std::fs::write(
                &f,
                format!(
                    "<domainCapabilities><arch>x86_64</arch><domain>kvm</domain><cpu>\
                     <mode name='host-model' supported='yes'><model>Nehalem</model>{features}</mode>\
                     </cpu></domainCapabilities>"
                ),
            )
            .unwrap();
            let cluster = read_host(&f).unwrap_err().to_string();
            let host = crate::host::Host::discover(&crate::host::HostOptions {
                caps: vec![f.clone()],
                qemu_cache: Some(PathBuf::new()),
                ..crate::host::HostOptions::default()
            })
            .unwrap_err()
            .to_string();
            let said = format!("{}: <mode name='host-model'>: {libvirt_says}", f.display());
            assert_eq!(cluster, said);
            assert_eq!(host, format!("host facts: {said}"));
        }
        std::fs::remove_dir_all(&dir).ok();
    }
}
