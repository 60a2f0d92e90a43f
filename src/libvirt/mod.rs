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
    /// The document's kind.
    #[must_use]
    pub fn kind(&self) -> DocumentKind {
        match self {
            Document::Capabilities(_) => DocumentKind::Capabilities,
            Document::DomCaps(_) => DocumentKind::DomCaps,
            Document::QemuCaps(_) => DocumentKind::QemuCaps,
            Document::HostFacts(_) => DocumentKind::HostFacts,
            Document::Cpu(_) => DocumentKind::Cpu,
        }
    }

    /// The document's root element, for messages (`<capabilities>`...).
    #[must_use]
    pub fn root(&self) -> &'static str {
        self.kind().root()
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

/// The documents this module reads, named by their root element in libvirt's (empty) namespace:
/// what a caller accepts ([`read_document`]) or asks of an element it parsed ([`read_root`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DocumentKind {
    /// `<capabilities>` (`virsh capabilities`).
    Capabilities,
    /// `<domainCapabilities>` (`virsh domcapabilities`).
    DomCaps,
    /// `<qemuCaps>`, one file of libvirt's QEMU capability cache.
    QemuCaps,
    /// `<hostFacts>`, the tool's own bundle of a host's documents.
    HostFacts,
    /// A bare `<cpu>`.
    Cpu,
}

impl DocumentKind {
    /// Every kind, in the order [`DocumentKind::of_root`] tries them.
    pub const ALL: [DocumentKind; 5] = [
        DocumentKind::Capabilities,
        DocumentKind::DomCaps,
        DocumentKind::QemuCaps,
        DocumentKind::HostFacts,
        DocumentKind::Cpu,
    ];

    /// Its root element's name: `capabilities`, `domainCapabilities`, `qemuCaps`, `hostFacts`,
    /// `cpu`.
    #[must_use]
    pub fn root(self) -> &'static str {
        match self {
            DocumentKind::Capabilities => "capabilities",
            DocumentKind::DomCaps => "domainCapabilities",
            DocumentKind::QemuCaps => "qemuCaps",
            DocumentKind::HostFacts => host_facts::ROOT,
            DocumentKind::Cpu => "cpu",
        }
    }

    /// The kind whose root element is named `name`, if any.
    #[must_use]
    pub fn of_root(name: &str) -> Option<DocumentKind> {
        DocumentKind::ALL.into_iter().find(|k| k.root() == name)
    }
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
pub fn read_document(path: &Path, accept: &[DocumentKind]) -> Result<Document, DocumentError> {
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
    let kind = DocumentKind::of_root(name)
        .filter(|k| root.tag_name().namespace().is_none() && accept.contains(k));
    let Some(kind) = kind else {
        return Err(invalid(not_one_of(name, accept)));
    };
    read_root(root, &what, kind).map_err(invalid)
}

/// Reads the element `root` (of the document `what`, for messages) as a document of `kind`,
/// whatever its name: the caller has matched it ([`DocumentKind::of_root`]).
///
/// # Errors
/// The reader's sentence when libvirt would refuse the document (libvirt's words where it has
/// some).
pub fn read_root(
    root: roxmltree::Node<'_, '_>,
    what: &str,
    kind: DocumentKind,
) -> Result<Document, String> {
    Ok(match kind {
        DocumentKind::Capabilities => {
            Document::Capabilities(capabilities::Capabilities::read(root, what)?)
        }
        DocumentKind::DomCaps => Document::DomCaps(Box::new(domcaps::DomCaps::read(root, what)?)),
        DocumentKind::QemuCaps => Document::QemuCaps(qemu_caps::QemuCaps::read(root, what)),
        DocumentKind::HostFacts => {
            Document::HostFacts(Box::new(host_facts::HostFacts::read(root, what)?))
        }
        DocumentKind::Cpu => Document::Cpu(cpu_def::CpuDef::read(root)?),
    })
}

/// The refusal of a root element that is none of `accept`: "the root element <x> is not <a>,
/// <b> or <c>".
fn not_one_of(root: &str, accept: &[DocumentKind]) -> String {
    let tags: Vec<String> = accept.iter().map(|a| format!("<{}>", a.root())).collect();
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
