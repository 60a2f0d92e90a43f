//! `virsh capabilities` (`virConnectGetCapabilities`): the host's CPU, and the machine types of
//! every guest arch the hypervisor runs.

use super::cpu_def::{CpuDef, CpuType};
use super::positive_count;
use crate::xml::{child, is_libvirt_element, text_of};
use roxmltree::Node;

/// One machine type listed by a capabilities document or libvirt's QEMU capability cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineType {
    /// Guest arch (`x86_64`, `aarch64`...).
    pub arch: String,
    /// Virt type it was listed under (`kvm`, `qemu`), or None when listed for every type.
    pub virt_type: Option<String>,
    /// Machine type name as listed (`pc-q35-7.2`, or an alias such as `q35`).
    pub name: String,
    /// The versioned type an alias stands for (`canonical=` / `alias=`).
    pub canonical: Option<String>,
    /// `maxCpus`: the most vCPUs the machine type takes; None when absent, not a number, or 0
    /// (libvirt writes the attribute only when QEMU reported a limit above 0, so 0 is no limit
    /// known, never a limit of 0).
    pub max_cpus: Option<u32>,
    /// `deprecated='yes'`: QEMU marks the type deprecated (libvirt writes the attribute in
    /// capabilities from 7.x on; libvirt 7.0 writes none, seen on Debian 11's 7.0.0).
    pub deprecated: bool,
    /// The emulator of the `<guest><arch>` it is listed under (`<emulator>`), or the
    /// capability cache file's `<emulator>`.
    pub emulator: Option<String>,
    /// The file it was read from.
    pub source: String,
    /// Listed by a `virsh capabilities` document (true), not by libvirt's QEMU capability
    /// cache: the host's capabilities, when given, are what libvirt checks a machine type
    /// against ([`crate::host::Host::caps_lack_machine`]). A flag, not a comparison of
    /// [`MachineType::source`] with the files read: that comparison was a tenth of a large
    /// fleet's time.
    pub from_capabilities: bool,
}

/// One `virsh capabilities` document.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// `<host><cpu>`, read as a host CPU ([`CpuType::Host`]); None when the document has none.
    pub host_cpu: Option<CpuDef>,
    /// The host CPU's `<signature family model stepping>` as "family F model M stepping S"
    /// (libvirt 7.x and later write it for x86; 7.0 on Debian 11 does not); None when absent.
    pub host_signature: Option<String>,
    /// The same signature as numbers (family, model, stepping; a missing `stepping` 0), for
    /// libvirt's decoding, which prefers a model whose `<signature>` it is.
    pub host_signature_numbers: Option<(u32, u32, u32)>,
    /// The host CPU's `<microcode version>`; None when absent (libvirt writes it for x86).
    pub host_microcode: Option<String>,
    /// The machine types of every `<guest><arch>`: `<machine maxCpus='N' [canonical='...']>NAME`,
    /// listed for every virt type, or under a `<domain type=...>` for that one.
    pub machines: Vec<MachineType>,
    /// The guests the host runs, (arch, virt type), one per `<guest><arch name><domain type>`:
    /// libvirt refuses any other ("could not find capabilities for arch=... domaintype=...").
    pub guest_types: Vec<(String, String)>,
}

impl Capabilities {
    /// Reads the `<capabilities>` element `root`; `source` names the file in each fact.
    ///
    /// # Errors
    /// A host CPU libvirt refuses ([`CpuDef::read_as`]), the reason prefixed with `<host><cpu>`.
    pub fn read(root: Node<'_, '_>, source: &str) -> Result<Capabilities, String> {
        let cpu_node = child(root, "host").and_then(|h| child(h, "cpu"));
        let host_signature = cpu_node.and_then(|c| child(c, "signature")).map(|s| {
            let a = |n: &str| s.attribute(n).unwrap_or("?").to_string();
            format!(
                "family {} model {} stepping {}",
                a("family"),
                a("model"),
                a("stepping")
            )
        });
        let host_signature_numbers = cpu_node.and_then(|c| child(c, "signature")).and_then(|s| {
            let n = |a: &str| s.attribute(a).and_then(|v| v.trim().parse::<u32>().ok());
            Some((n("family")?, n("model")?, n("stepping").unwrap_or(0)))
        });
        let host_microcode = cpu_node
            .and_then(|c| child(c, "microcode"))
            .and_then(|m| m.attribute("version"))
            .map(str::to_string);
        let host_cpu = cpu_node
            .map(|c| CpuDef::read_as(c, CpuType::Host))
            .transpose()
            .map_err(|e| format!("<host><cpu>: {e}"))?;
        let mut machines = Vec::new();
        let mut guest_types = Vec::new();
        for guest in root.children().filter(|n| is_libvirt_element(*n, "guest")) {
            let Some(arch) = child(guest, "arch") else {
                continue;
            };
            let arch_name = arch.attribute("name").unwrap_or("");
            let emulator = child(arch, "emulator").and_then(text_of);
            let mut push = |m: Node<'_, '_>, vt: Option<&str>| {
                if let Some(name) = text_of(m) {
                    machines.push(MachineType {
                        arch: arch_name.to_string(),
                        virt_type: vt.map(str::to_string),
                        name,
                        canonical: m.attribute("canonical").map(str::to_string),
                        max_cpus: positive_count(m.attribute("maxCpus")),
                        deprecated: m.attribute("deprecated") == Some("yes"),
                        emulator: emulator.clone(),
                        source: source.to_string(),
                        from_capabilities: true,
                    });
                }
            };
            for m in arch
                .children()
                .filter(|n| is_libvirt_element(*n, "machine"))
            {
                push(m, None);
            }
            for d in arch.children().filter(|n| is_libvirt_element(*n, "domain")) {
                let vt = d.attribute("type");
                if let Some(t) = vt {
                    guest_types.push((arch_name.to_string(), t.to_string()));
                }
                for m in d.children().filter(|n| is_libvirt_element(*n, "machine")) {
                    push(m, vt);
                }
            }
        }
        Ok(Capabilities {
            host_cpu,
            host_signature,
            host_signature_numbers,
            host_microcode,
            machines,
            guest_types,
        })
    }

    /// The host CPU's arch (`<host><cpu><arch>`), when the document has a host CPU.
    #[must_use]
    pub fn host_arch(&self) -> Option<&str> {
        self.host_cpu.as_ref().and_then(|c| c.arch.as_deref())
    }
}
