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
//!   format (`virt-cpu-policyd --publish` writes it: [`crate::host::host_facts_document`]). The
//!   `host-model` CPU wins over the capabilities' host CPU when both are there.
//!
//! The host's name is `<hostFacts name=...>` when given, else the file name without `.xml`
//! (`virsh capabilities` names no host). A directory stands for its regular `*.xml` files, sorted.

use super::ClusterError;
use crate::domain::{child, decode, is_libvirt_element, parse_xml, text_of};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// A feature's policy in a CPU definition (libvirt's `virCPUFeaturePolicy`; a host CPU's features
/// have none and count as `require`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FeaturePolicy {
    /// `force`: on even if the host lacks it.
    Force,
    /// `require` (the default): the host must have it.
    Require,
    /// `optional`: on when the host has it.
    Optional,
    /// `disable`: off.
    Disable,
    /// `forbid`: the host must not have it.
    Forbid,
}

impl FeaturePolicy {
    /// Parses libvirt's spelling (`force`, `require`, `optional`, `disable`, `forbid`).
    #[must_use]
    pub fn parse(s: &str) -> Option<FeaturePolicy> {
        Some(match s {
            "force" => FeaturePolicy::Force,
            "require" => FeaturePolicy::Require,
            "optional" => FeaturePolicy::Optional,
            "disable" => FeaturePolicy::Disable,
            "forbid" => FeaturePolicy::Forbid,
            _ => return None,
        })
    }
}

/// A CPU as a libvirt `<cpu>` element describes it (libvirt's `virCPUDef`, the parts the cluster
/// computations read).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuDef {
    /// `<model>`.
    pub model: Option<String>,
    /// `<vendor>`.
    pub vendor: Option<String>,
    /// `<feature>` names with their policies, in document order.
    pub features: Vec<(String, FeaturePolicy)>,
}

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
pub struct HostFacts {
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
    /// Machine types: domcapabilities' `<machine>`, capabilities' `<machine>` names (aliases
    /// included) of the host's arch.
    pub machines: BTreeSet<String>,
    /// The libvirt the host runs: `<hostFacts libvirt=...>`; None in the other shapes.
    pub libvirt: Option<crate::host::LibvirtVersion>,
}

impl HostFacts {
    /// A host described by one domcapabilities document already read by [`crate::host::Host`]
    /// (`--caps`, the daemon's snapshot): its host-model CPU (the model, the vendor, the
    /// `require` features then the `disable` ones), its custom models `usable='yes'` and its
    /// machine type. `name` names it in messages.
    #[must_use]
    pub fn from_domcaps(name: &str, d: &crate::host::DomCaps) -> HostFacts {
        let cpu = d.host_model.as_ref().map(|h| CpuDef {
            model: h.model.clone(),
            vendor: h.vendor.clone(),
            features: h
                .require
                .iter()
                .map(|f| (f.clone(), FeaturePolicy::Require))
                .chain(
                    h.disable
                        .iter()
                        .map(|f| (f.clone(), FeaturePolicy::Disable)),
                )
                .collect(),
        });
        HostFacts {
            name: name.to_string(),
            path: PathBuf::from(&d.source),
            arch: d.arch.clone(),
            origin: cpu.as_ref().map(|_| CpuOrigin::HostModel),
            cpu,
            usable_models: (!d.models.is_empty()).then(|| {
                d.models
                    .iter()
                    .filter(|(_, usable)| *usable)
                    .map(|(m, _)| m.clone())
                    .collect()
            }),
            machines: std::iter::once(d.machine.clone())
                .filter(|m| !m.is_empty())
                .collect(),
            libvirt: None,
        }
    }
}

/// Largest facts file read, in bytes (libvirt's domcapabilities are about 100 KiB).
pub const MAX_FACTS_BYTES: usize = crate::readfile::MAX_FACT_BYTES;

/// Reads every host of `paths`: files, and directories standing for their `*.xml` files.
///
/// # Errors
/// [`ClusterError::Input`] for a file that cannot be read or is not UTF-8 XML;
/// [`ClusterError::Facts`] for a document that is not a facts file, a directory without `*.xml`
/// files, or two files naming the same host; [`ClusterError::NoHosts`] for an empty list.
pub fn read_hosts(paths: &[PathBuf]) -> Result<Vec<HostFacts>, ClusterError> {
    let mut hosts: Vec<HostFacts> = Vec::new();
    for path in paths {
        let files = if path.is_dir() {
            // Every *.xml entry is a host: one that cannot be read (a dangling link, a FIFO) is an
            // error below, never a host silently left out of the baseline.
            let files = crate::host::xml_entries(path)
                .map_err(|e| facts_error(path, &format!("cannot list the directory: {e}")))?;
            if files.is_empty() {
                return Err(facts_error(
                    path,
                    "the directory holds no *.xml facts files",
                ));
            }
            files
        } else {
            vec![path.clone()]
        };
        for file in files {
            let host = read_host(&file)?;
            if let Some(other) = hosts.iter().find(|h| h.name == host.name) {
                return Err(facts_error(
                    &file,
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
        return Err(ClusterError::NoHosts);
    }
    Ok(hosts)
}

/// Reads one facts file (see the module docs for the shapes).
///
/// # Errors
/// As [`read_hosts`].
pub fn read_host(path: &Path) -> Result<HostFacts, ClusterError> {
    let text = read_text(path)?;
    let what = path.display().to_string();
    let doc = parse_xml(&text, &what)?;
    let root = doc.root_element();
    let stem = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .map(|n| n.strip_suffix(".xml").unwrap_or(&n).to_string())
        .unwrap_or_default();
    let mut host = HostFacts {
        name: stem,
        path: path.to_owned(),
        arch: String::new(),
        cpu: None,
        origin: None,
        usable_models: None,
        machines: BTreeSet::new(),
        libvirt: None,
    };
    let name = root.tag_name().name();
    if root.tag_name().namespace().is_some() {
        return Err(not_facts(path, name));
    }
    match name {
        "hostFacts" => {
            if let Some(n) = root.attribute("name").filter(|n| !n.trim().is_empty()) {
                host.name = n.trim().to_string();
            }
            host.libvirt =
                crate::host::host_facts_version(root).map_err(|e| facts_error(path, &e))?;
            let caps = child(root, "capabilities");
            let domcaps = child(root, "domainCapabilities");
            if caps.is_none() && domcaps.is_none() {
                return Err(facts_error(
                    path,
                    "<hostFacts> holds neither <capabilities> nor <domainCapabilities>",
                ));
            }
            // domcapabilities first: its host-model CPU is the one guests can get.
            if let Some(d) = domcaps {
                read_domcaps(&mut host, d);
            }
            if let Some(c) = caps {
                read_capabilities(&mut host, c, path)?;
            }
        }
        "domainCapabilities" => read_domcaps(&mut host, root),
        "capabilities" => read_capabilities(&mut host, root, path)?,
        "cpu" => {
            host.arch = child(root, "arch").and_then(text_of).ok_or_else(|| {
                facts_error(
                    path,
                    "this <cpu> names no <arch>: a host CPU from virsh capabilities has one (a guest <cpu> is not host facts)",
                )
            })?;
            host.cpu = Some(read_cpu(root, path)?);
            host.origin = Some(CpuOrigin::HostCpu);
        }
        other => return Err(not_facts(path, other)),
    }
    if host.arch.is_empty() {
        return Err(facts_error(path, "names no arch"));
    }
    // The name goes into comment lines of the toml, nova and cloudstack output: a newline there
    // would start a line of configuration taken from a file on shared storage.
    if host.name.chars().any(char::is_control) {
        return Err(facts_error(
            path,
            &format!(
                "the host name {:?} has a control character (a hostname has none)",
                host.name
            ),
        ));
    }
    Ok(host)
}

/// A `<cpu>` element's model, vendor and features. A feature without `policy` is `require`
/// (host CPUs list no policies).
///
/// # Errors
/// [`ClusterError::Facts`] for a feature without a name or with a policy libvirt does not know
/// (libvirt: "Invalid CPU feature policy").
pub fn read_cpu(node: roxmltree::Node<'_, '_>, path: &Path) -> Result<CpuDef, ClusterError> {
    let mut cpu = CpuDef {
        model: child(node, "model").and_then(text_of),
        vendor: child(node, "vendor").and_then(text_of),
        features: Vec::new(),
    };
    for f in node
        .children()
        .filter(|n| is_libvirt_element(*n, "feature"))
    {
        let Some(name) = f.attribute("name") else {
            return Err(facts_error(path, "a CPU <feature> has no name"));
        };
        let policy = match f.attribute("policy") {
            None => FeaturePolicy::Require,
            Some(p) => FeaturePolicy::parse(p).ok_or_else(|| {
                facts_error(
                    path,
                    &format!("feature '{name}': invalid CPU feature policy '{p}'"),
                )
            })?,
        };
        cpu.features.push((name.to_string(), policy));
    }
    Ok(cpu)
}

/// The text of a facts file: a regular file (a FIFO or a device would block or never end), at
/// most [`MAX_FACTS_BYTES`], UTF-8.
fn read_text(path: &Path) -> Result<String, crate::Error> {
    let bytes = crate::readfile::read_regular(path, MAX_FACTS_BYTES)?;
    Ok(decode(&bytes, &path.display().to_string())?.to_string())
}

fn read_domcaps(host: &mut HostFacts, root: roxmltree::Node<'_, '_>) {
    let txt = |name: &str| child(root, name).and_then(text_of);
    if let Some(arch) = txt("arch") {
        host.arch = arch;
    }
    if let Some(m) = txt("machine") {
        host.machines.insert(m);
    }
    let modes = child(root, "cpu")
        .into_iter()
        .flat_map(|c| c.children())
        .filter(|n| is_libvirt_element(*n, "mode") && n.attribute("supported") == Some("yes"));
    for mode in modes {
        match mode.attribute("name") {
            Some("host-model") if child(mode, "model").is_some() => {
                // Features of a host-model CPU carry require/disable; read_cpu only fails on a
                // nameless or unknown-policy feature, which libvirt never writes here.
                if let Ok(cpu) = read_cpu(mode, &host.path) {
                    host.cpu = Some(cpu);
                    host.origin = Some(CpuOrigin::HostModel);
                }
            }
            Some("custom") => {
                let usable = mode
                    .children()
                    .filter(|n| is_libvirt_element(*n, "model"))
                    .filter(|n| n.attribute("usable") == Some("yes"))
                    .filter_map(text_of)
                    .collect();
                host.usable_models = Some(usable);
            }
            _ => {}
        }
    }
}

fn read_capabilities(
    host: &mut HostFacts,
    root: roxmltree::Node<'_, '_>,
    path: &Path,
) -> Result<(), ClusterError> {
    let Some(cpu) = child(root, "host").and_then(|h| child(h, "cpu")) else {
        return Err(facts_error(path, "capabilities without <host><cpu>"));
    };
    let arch = child(cpu, "arch").and_then(text_of).unwrap_or_default();
    if !host.arch.is_empty() && !arch.is_empty() && host.arch != arch {
        return Err(facts_error(
            path,
            &format!(
                "its capabilities say arch {arch}, its domcapabilities {}",
                host.arch
            ),
        ));
    }
    if host.arch.is_empty() {
        host.arch = arch;
    }
    if host.cpu.is_none() {
        host.cpu = Some(read_cpu(cpu, path)?);
        host.origin = Some(CpuOrigin::Capabilities);
    }
    let guests = root
        .children()
        .filter(|n| is_libvirt_element(*n, "guest"))
        .filter_map(|g| child(g, "arch"))
        .filter(|a| a.attribute("name") == Some(host.arch.as_str()));
    for arch in guests {
        let machines = arch
            .descendants()
            .filter(|n| is_libvirt_element(*n, "machine"));
        host.machines.extend(machines.filter_map(text_of));
    }
    Ok(())
}

fn facts_error(path: &Path, message: &str) -> ClusterError {
    ClusterError::Facts {
        path: path.to_owned(),
        message: message.to_string(),
    }
}

fn not_facts(path: &Path, root: &str) -> ClusterError {
    facts_error(
        path,
        &format!(
            "the root element <{root}> is not <domainCapabilities>, <capabilities>, a host <cpu> or <hostFacts>"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let h = read_host(&cpu).unwrap();
        assert_eq!(h.name, "x86_64-cpuid-Xeon-E5-2650-v3-host");
        assert_eq!(h.arch, "x86_64");
        assert_eq!(h.origin, Some(CpuOrigin::HostCpu));
        let c = h.cpu.unwrap();
        assert_eq!(c.model.as_deref(), Some("Haswell-v2"));
        assert_eq!(c.vendor.as_deref(), Some("Intel"));
        assert!(
            c.features
                .contains(&("invtsc".into(), FeaturePolicy::Require))
        );
        assert!(h.usable_models.is_none());

        let d = read_host(&dc).unwrap();
        assert_eq!(d.origin, Some(CpuOrigin::HostModel));
        let c = d.cpu.unwrap();
        assert_eq!(c.model.as_deref(), Some("EPYC-Rome"));
        assert!(
            c.features
                .contains(&("xsaves".into(), FeaturePolicy::Disable))
        );
        let usable = d.usable_models.unwrap();
        assert!(usable.contains("486") && !usable.contains("Broadwell"));
        assert!(d.machines.contains("pc-q35-10.0"));

        let a = read_host(&caps).unwrap();
        assert_eq!(
            (a.arch.as_str(), a.origin),
            ("aarch64", Some(CpuOrigin::Capabilities))
        );
        assert_eq!(a.cpu.unwrap().model.as_deref(), Some("Neoverse-N1"));
        assert!(!a.machines.is_empty());

        let v = read_host(&arm).unwrap();
        assert_eq!(v.arch, "aarch64");
        assert!(v.cpu.is_none(), "aarch64 KVM has no host-model");
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
        let doc = crate::host::host_facts_document("node-8", "11.3.0".parse().unwrap(), caps, None);
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
        assert!(matches!(read_hosts(&[]), Err(ClusterError::NoHosts)));
        std::fs::remove_dir_all(&dir).ok();
    }
}
