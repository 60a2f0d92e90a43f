//! libvirt's documents, read as libvirt reads them: one reader and one type per document.
//!
//! * [`capabilities`]: `virsh capabilities` (the host CPU, machine types);
//! * [`domcaps`]: `virsh domcapabilities` (CPU modes, the host-model CPU, custom models, the
//!   vCPU limit);
//! * [`qemu_caps`]: libvirt's QEMU capability cache (machine types, libvirt's release, QEMU's
//!   host CPU), and its directory;
//! * [`host_facts`]: the tool's own `<hostFacts>`, holding a host's capabilities and
//!   domcapabilities (reader and writer);
//! * [`cpu_def`]: a `<cpu>` definition and libvirt's words for its attributes;
//! * [`cpu_map`]: libvirt's x86 cpu_map (vendors, features as CPUID bits, models), one loader;
//! * [`cpudata`]: raw x86 CPUID and MSR registers, and libvirt's `<cpudata>` dump of them;
//! * [`arch`] and [`version`]: libvirt's architecture names and release numbers.
//!
//! Every host fact the tool uses comes through here, whoever asks (`Host` for one host, the
//! cluster for many, the daemon for what it publishes), so one document gets one answer. Where
//! libvirt refuses a document (a feature policy it does not know, a feature listed twice), the
//! reader refuses it too, once, with libvirt's words.
//!
//! Nothing here calls libvirt: the documents are files (the hook must never call back into
//! libvirt).

pub mod arch;
pub mod capabilities;
pub mod cpu_def;
pub mod cpu_map;
pub mod cpudata;
pub mod domcaps;
pub mod host_facts;
pub mod qemu_caps;
pub mod version;

use std::path::{Path, PathBuf};

/// A host-facts file, by its root element.
#[derive(Debug, Clone)]
pub enum Document {
    /// `<capabilities>`.
    Capabilities(capabilities::Capabilities),
    /// `<domainCapabilities>`.
    DomCaps(Box<domcaps::DomCaps>),
    /// `<qemuCaps>`, one file of libvirt's QEMU capability cache.
    QemuCaps(qemu_caps::QemuCaps),
    /// `<hostFacts>`.
    HostFacts(Box<host_facts::HostFacts>),
    /// A bare `<cpu>` (a host CPU as `virsh capabilities` writes it, libvirt's
    /// `tests/cputestdata/*-host.xml`; a guest `<cpu>` read as libvirt would).
    Cpu(cpu_def::CpuDef),
}

impl Document {
    /// The document's root element, for messages (`<capabilities>`...).
    #[must_use]
    pub fn root(&self) -> &'static str {
        match self {
            Document::Capabilities(_) => "capabilities",
            Document::DomCaps(_) => "domainCapabilities",
            Document::QemuCaps(_) => "qemuCaps",
            Document::HostFacts(_) => host_facts::ROOT,
            Document::Cpu(_) => "cpu",
        }
    }
}

/// Why a host-facts file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum DocumentError {
    /// It could not be read, is too large, not UTF-8 or not XML.
    #[error(transparent)]
    Input(#[from] crate::Error),
    /// It is XML but not a document of this module, or one libvirt refuses.
    #[error("{}: {message}", .path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, one sentence (libvirt's words where it has some).
        message: String,
    },
}

/// Largest host-facts file read, in bytes (libvirt's domcapabilities are about 100 KiB, its
/// QEMU capability cache files a few hundred KiB).
pub const MAX_DOCUMENT_BYTES: usize = crate::readfile::MAX_FACT_BYTES;

/// Reads one host-facts file: a regular file of at most [`MAX_DOCUMENT_BYTES`] (a FIFO named
/// as host facts must not hang the hook, `/dev/zero` must not fill the memory), UTF-8 XML,
/// then by its root element, which must be one of `accept` (root element names, in the order a
/// refusal lists them) in libvirt's (empty) namespace.
///
/// # Errors
/// [`DocumentError::Input`] for a file that cannot be read or parsed; [`DocumentError::Invalid`]
/// for another root element ("the root element `<domain>` is not `<capabilities>` or
/// `<hostFacts>`") or a document the element's reader refuses.
pub fn read_document(path: &Path, accept: &[&str]) -> Result<Document, DocumentError> {
    let what = path.display().to_string();
    let bytes =
        crate::readfile::read_regular(path, MAX_DOCUMENT_BYTES).map_err(crate::Error::from)?;
    let text = crate::xml::decode(&bytes, &what)?;
    let doc = crate::xml::parse_xml(text, &what)?;
    let root = doc.root_element();
    let invalid = |message: String| DocumentError::Invalid {
        path: path.to_owned(),
        message,
    };
    let name = root.tag_name().name();
    if root.tag_name().namespace().is_some() || !accept.contains(&name) {
        return Err(invalid(not_one_of(name, accept)));
    }
    Ok(match name {
        "capabilities" => {
            Document::Capabilities(capabilities::Capabilities::read(root, &what).map_err(invalid)?)
        }
        "domainCapabilities" => Document::DomCaps(Box::new(
            domcaps::DomCaps::read(root, &what).map_err(invalid)?,
        )),
        "qemuCaps" => Document::QemuCaps(qemu_caps::QemuCaps::read(root, &what)),
        host_facts::ROOT => Document::HostFacts(Box::new(
            host_facts::HostFacts::read(root, &what).map_err(invalid)?,
        )),
        "cpu" => Document::Cpu(cpu_def::CpuDef::read(root).map_err(invalid)?),
        other => return Err(invalid(not_one_of(other, accept))),
    })
}

/// The refusal of a root element that is none of `accept`: "the root element <x> is not <a>,
/// <b> or <c>".
fn not_one_of(root: &str, accept: &[&str]) -> String {
    let tags: Vec<String> = accept.iter().map(|a| format!("<{a}>")).collect();
    let list = match tags.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => "a document this tool reads".to_string(),
    };
    format!("the root element <{root}> is not {list}")
}

/// A vCPU limit as libvirt writes it (`maxCpus` of capabilities and of its QEMU capability
/// cache, `<vcpu max>` of domcapabilities): the count, or None when the attribute is absent, not
/// an unsigned 32-bit number, or 0. libvirt writes capabilities' `maxCpus` and domcapabilities'
/// `<vcpu max>` only when the limit is above 0 (`virCapabilitiesFormatGuest`,
/// `virDomainCapsFormat`), so a 0 is no limit known, never a limit of 0 (which would turn every
/// `vcpu.max = "machine"` into a maximum of 0).
pub(crate) fn positive_count(value: Option<&str>) -> Option<u32> {
    value.and_then(|v| v.parse::<u32>().ok()).filter(|&n| n > 0)
}
