//! Reading the fleet's facts files: each a host (its judged facts as a key, its capabilities'
//! host CPU) or guests ([`super::guest`]).

use super::FleetError;
use super::guest::{self, GuestFacts};
use super::shared_domcaps::{self, SharedDomCaps};
use crate::cpu::CpuError;
use crate::libvirt::cpu_def::CpuDef;
use crate::libvirt::domcaps::DomCaps;
use crate::libvirt::host_facts::HostFacts;
use crate::libvirt::version::{LibvirtVersion, QemuVersion};
use crate::libvirt::{Document, DocumentKind, read_root};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A capabilities' `<host><cpu>` with its signature and microcode.
#[derive(Debug, Clone)]
pub(super) struct CapsCpu {
    pub(super) cpu: CpuDef,
    pub(super) signature: Option<String>,
    pub(super) microcode: Option<String>,
}

impl CapsCpu {
    pub(super) fn of(c: &crate::libvirt::capabilities::Capabilities) -> Option<CapsCpu> {
        Some(CapsCpu {
            cpu: c.host_cpu.clone()?,
            signature: c.host_signature.clone(),
            microcode: c.host_microcode.clone(),
        })
    }
}

/// What one facts file holds.
pub(super) enum Input {
    Host {
        name: String,
        /// The libvirt and QEMU it runs, when its facts say (`<hostFacts libvirt qemu>`).
        versions: (Option<LibvirtVersion>, Option<QemuVersion>),
        /// What the judge reads of it: hosts alike in it are one class.
        key: Box<Judged>,
        /// Its capabilities' host CPU.
        cpu: Option<CapsCpu>,
    },
    /// Guests, and the host a `<guestFacts>` document names (its guests may be none: a host
    /// that published that it runs nothing).
    Guests(Vec<GuestFacts>, Option<String>),
}

/// Every file of `paths`: files as given, directories as their `*.xml` entries, sorted.
///
/// # Errors
/// A directory that cannot be listed; [`FleetError::FileTwice`] for a file given twice (by its
/// own path or another, a symbolic or hard link, or in a directory given: one device and inode),
/// whose guests would be counted twice.
pub(super) fn expand(paths: &[PathBuf]) -> Result<Vec<PathBuf>, FleetError> {
    use std::os::unix::fs::MetadataExt as _;
    // Each file, and the directory it was found in (None: given itself), for messages.
    let mut files: Vec<(PathBuf, Option<&PathBuf>)> = Vec::new();
    for p in paths {
        if p.is_dir() {
            let list = crate::readfile::xml_entries(p)
                .map_err(|e| CpuError::facts(p, &format!("cannot list the directory: {e}")))?;
            files.extend(list.into_iter().map(|f| (f, Some(p))));
        } else {
            files.push((p.clone(), None));
        }
    }
    let named = |(f, dir): &(PathBuf, Option<&PathBuf>)| match dir {
        Some(d) => format!("{} (in {})", f.display(), d.display()),
        None => f.display().to_string(),
    };
    // A file that cannot be read is left to its reader's error.
    let mut seen: std::collections::HashMap<(u64, u64), usize> = std::collections::HashMap::new();
    for (i, f) in files.iter().enumerate() {
        let Ok(meta) = std::fs::metadata(&f.0) else {
            continue;
        };
        if let Some(first) = seen.insert((meta.dev(), meta.ino()), i) {
            return Err(FleetError::FileTwice {
                path: named(f),
                other: named(&files[first]),
            });
        }
    }
    Ok(files.into_iter().map(|(f, _)| f).collect())
}

/// Reads one facts file, each domcapabilities text already read by another host's file taken
/// from `shared` ([`shared_domcaps`]).
pub(super) fn read_input(path: &Path, shared: &SharedDomCaps) -> Result<Input, FleetError> {
    let bytes = crate::readfile::read_regular(path, crate::readfile::MAX_FACT_BYTES)
        .map_err(crate::Error::from)?;
    let what = path.display().to_string();
    let text = crate::xml::decode(&bytes, &what)?;
    let stem = || {
        path.file_name()
            .map(|n| n.to_string_lossy())
            .map(|n| n.strip_suffix(".xml").unwrap_or(&n).to_string())
            .unwrap_or_default()
    };
    if let Some((f, domcaps)) = shared_domcaps::host_facts(text, &what, shared) {
        return Ok(host_of_facts(f, domcaps, stem));
    }
    let doc = crate::xml::parse_xml(text, &what)?;
    let root = doc.root_element();
    let facts = |message: String| FleetError::from(CpuError::facts(path, &message));
    let name = root.tag_name().name();
    let neither = |other: &str| {
        facts(format!(
            "<{other}> is neither host facts (<hostFacts>, <capabilities>, <domainCapabilities>) nor guest facts (<guestFacts>, <domain>, <domstatus>)"
        ))
    };
    match name {
        guest::ROOT => {
            let host = guest::document_host(root);
            return guest::read(root, &what)
                .map(|list| Input::Guests(list, host))
                .map_err(facts);
        }
        n if n == "domain" || n == crate::domain::STATUS_ROOT => {
            return guest::from_domain_document(root, &what)
                .map(|g| Input::Guests(vec![g], None))
                .map_err(facts);
        }
        _ => {}
    }
    // A host's facts: libvirt's documents, each read by its reader in crate::libvirt.
    let host_document = DocumentKind::of_root(name).filter(|k| {
        matches!(
            k,
            DocumentKind::HostFacts | DocumentKind::Capabilities | DocumentKind::DomCaps
        )
    });
    let Some(kind) = host_document else {
        return Err(neither(name));
    };
    match read_root(root, &what, kind).map_err(facts)? {
        Document::HostFacts(mut f) => {
            let domcaps = std::mem::take(&mut f.domcaps);
            Ok(host_of_facts(
                *f,
                domcaps.into_iter().map(Arc::new).collect(),
                stem,
            ))
        }
        Document::Capabilities(caps) => Ok(Input::Host {
            name: stem(),
            versions: (None, None),
            cpu: CapsCpu::of(&caps),
            key: Judged::boxed((None, None), Some(caps), Vec::new()),
        }),
        Document::DomCaps(dc) => Ok(Input::Host {
            name: stem(),
            versions: (None, None),
            key: Judged::boxed((None, None), None, vec![Arc::new(*dc)]),
            cpu: None,
        }),
        other => Err(neither(other.root())),
    }
}

/// The host of a `<hostFacts>` document `f` whose domcapabilities are `domcaps` (its own
/// `domcaps` not read), named `stem()` when it names none.
fn host_of_facts(f: HostFacts, domcaps: Vec<Arc<DomCaps>>, stem: impl FnOnce() -> String) -> Input {
    let cpu = f.capabilities.as_ref().and_then(CapsCpu::of);
    Input::Host {
        name: f.name.unwrap_or_else(stem),
        versions: (f.libvirt, f.qemu),
        key: Judged::boxed((f.libvirt, f.qemu), f.capabilities, domcaps),
        cpu,
    }
}

/// What the judge reads of a host's facts: hosts alike in it are one class, judged once. The
/// facts as the readers of libvirt's documents give them (the libvirt version; the capabilities'
/// host CPU with its signature and microcode, machine types and guest types; each
/// domcapabilities' arch, virt type, machine type, emulator, vCPU limit, CPU modes, host-model
/// CPU, models and blockers), never the documents' text: what libvirt writes and the tool does
/// not read (a host's `<uuid>`, NUMA topology, security labels, caches, TSC frequency) would
/// make every real host a class of its own. The file names of machine types and
/// domcapabilities are left out: a reason naming one is given each host's own
/// ([`super::Fleet::reasons`]). Hosts sharing one domcapabilities text share its reading
/// ([`shared_domcaps`]): two such are equal without a comparison (`Arc`'s equality of `Eq`
/// values looks at the pointer first).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Judged {
    libvirt: Option<LibvirtVersion>,
    /// The QEMU release: hosts alike in all else but it meet different known hazards.
    qemu: Option<QemuVersion>,
    caps: Option<crate::libvirt::capabilities::Capabilities>,
    domcaps: Vec<Arc<DomCaps>>,
}

impl Judged {
    fn boxed(
        (libvirt, qemu): (Option<LibvirtVersion>, Option<QemuVersion>),
        mut caps: Option<crate::libvirt::capabilities::Capabilities>,
        mut domcaps: Vec<Arc<DomCaps>>,
    ) -> Box<Judged> {
        for m in caps.iter_mut().flat_map(|c| &mut c.machines) {
            m.source.clear();
        }
        // A shared reading has none already: it is not copied.
        for d in domcaps.iter_mut().filter(|d| !d.source.is_empty()) {
            Arc::make_mut(d).source.clear();
        }
        Box::new(Judged {
            libvirt,
            qemu,
            caps,
            domcaps,
        })
    }
}

impl Judged {
    /// The host of these facts as the cluster's baseline reads it
    /// ([`crate::cluster::hosts::ClusterHost::of_facts`]), named `name`, read from `path`.
    pub(super) fn cluster_host(
        &self,
        name: &str,
        path: &Path,
    ) -> Result<crate::cluster::hosts::ClusterHost, CpuError> {
        crate::cluster::hosts::ClusterHost::of_facts(
            path,
            name.to_string(),
            self.libvirt,
            self.caps.as_ref(),
            &self
                .domcaps
                .iter()
                .map(|d| (**d).clone())
                .collect::<Vec<_>>(),
        )
    }
}

/// Files read at once: the facts of a batch are in memory together.
const BATCH: usize = 256;

/// Every file of `files` read ([`read_input`]), in order, the files of each batch of [`BATCH`]
/// spread over the machine's cores ([`crate::parallel::map_ordered`]), each batch counted on
/// `step`.
pub(super) fn read_all(
    files: Vec<PathBuf>,
    step: crate::progress::Step,
) -> impl Iterator<Item = (PathBuf, Result<Input, FleetError>)> {
    let mut files = files.into_iter().peekable();
    let shared = SharedDomCaps::default();
    std::iter::from_fn(move || {
        files.peek()?;
        let batch: Vec<PathBuf> = files.by_ref().take(BATCH).collect();
        let read = crate::parallel::map_ordered(&batch, |p| read_input(p, &shared));
        step.inc(batch.len());
        Some(batch.into_iter().zip(read).collect::<Vec<_>>())
    })
    .flatten()
}
