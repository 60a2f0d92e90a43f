//! The tool's own host-facts document: `<hostFacts name='HOST' libvirt='X.Y.Z' qemu='X.Y.Z'>` holding one
//! host's `<capabilities>` and/or `<domainCapabilities>`, each as libvirt wrote it.
//!
//! `virt-cpu-policyd` writes it ([`document`]) into its snapshot (which the hook reads) and, with
//! `--publish DIR`, to `DIR/<hostname>.xml` for the cluster. Every reader of host facts takes
//! it ([`HostFacts::read`]): `--caps`, `[host] capabilities`, the snapshot, `virt-cpu-policy
//! baseline` and `[host] cluster`.

use super::capabilities::Capabilities;
use super::domcaps::DomCaps;
use super::version::{LibvirtVersion, QemuVersion};
use crate::xml::{child, is_libvirt_element};
use roxmltree::Node;
use std::fmt::Write as _;

/// The root element of the host-facts document.
pub const ROOT: &str = "hostFacts";

/// One `<hostFacts>` document.
#[derive(Debug, Clone)]
pub struct HostFacts {
    /// `name=`, trimmed; None when absent or blank.
    pub name: Option<String>,
    /// `libvirt=`: the libvirt the host runs; None when absent.
    pub libvirt: Option<LibvirtVersion>,
    /// `qemu=`: the QEMU release libvirt drives there (`virConnectGetVersion`, the hypervisor's
    /// version); None when absent (facts published before it was written).
    pub qemu: Option<QemuVersion>,
    /// Its `<capabilities>`.
    pub capabilities: Option<Capabilities>,
    /// Its `<domainCapabilities>`, in document order: one per virt type the host runs (`kvm`,
    /// and `qemu` for TCG guests: each QEMU's TCG offers a different CPU).
    pub domcaps: Vec<DomCaps>,
}

impl HostFacts {
    /// Reads the `<hostFacts>` element `root`; `source` names the file in each fact.
    ///
    /// # Errors
    /// A sentence: a `libvirt` or `qemu` attribute that is not a version, a document holding
    /// neither `<capabilities>` nor `<domainCapabilities>`, or one of those refused
    /// ([`Capabilities::read`], [`DomCaps::read`]).
    pub fn read(root: Node<'_, '_>, source: &str) -> Result<HostFacts, String> {
        HostFacts::read_with(root, source, |d| DomCaps::read(d, source))
    }

    /// [`HostFacts::read`] with each `<domainCapabilities>` child read by `domcaps` (a fleet
    /// reads the copies many hosts share once: its reading of one is the same as
    /// [`DomCaps::read`]'s).
    ///
    /// # Errors
    /// As [`HostFacts::read`]; `domcaps`'s.
    pub fn read_with(
        root: Node<'_, '_>,
        source: &str,
        domcaps: impl FnMut(Node<'_, '_>) -> Result<DomCaps, String>,
    ) -> Result<HostFacts, String> {
        let libvirt = version_attr::<LibvirtVersion>(root, "libvirt")?;
        let qemu = version_attr::<QemuVersion>(root, "qemu")?;
        let caps = child(root, "capabilities");
        let nodes: Vec<Node<'_, '_>> = root
            .children()
            .filter(|n| is_libvirt_element(*n, "domainCapabilities"))
            .collect();
        if caps.is_none() && nodes.is_empty() {
            return Err(format!(
                "<{ROOT}> holds neither <capabilities> nor <domainCapabilities>"
            ));
        }
        Ok(HostFacts {
            name: root
                .attribute("name")
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(str::to_string),
            libvirt,
            qemu,
            capabilities: caps.map(|c| Capabilities::read(c, source)).transpose()?,
            domcaps: nodes.into_iter().map(domcaps).collect::<Result<_, _>>()?,
        })
    }
}

/// The release in attribute `name` of `root` (None when absent), read by its type's parser.
fn version_attr<T>(root: Node<'_, '_>, name: &str) -> Result<Option<T>, String>
where
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    root.attribute(name)
        .map(|v| {
            v.parse::<T>()
                .map_err(|e| format!("<{ROOT} {name}='{v}'>: {e}"))
        })
        .transpose()
}

/// One host's facts document: `<hostFacts name='NAME' libvirt='X.Y.Z' qemu='X.Y.Z'>` (`qemu`
/// when known) holding `capabilities` (`virsh capabilities`) and each of `domcapabilities` (`virsh domcapabilities`,
/// one per virt type, when known), each as libvirt wrote it (an XML declaration dropped), one
/// after the other, newline-terminated.
#[must_use]
pub fn document(
    name: &str,
    libvirt: LibvirtVersion,
    qemu: Option<QemuVersion>,
    capabilities: &str,
    domcapabilities: &[&str],
) -> String {
    // A document inside another cannot keep its own declaration.
    let body = |doc: &str| {
        let doc = doc.trim_start();
        let doc = match doc.strip_prefix("<?xml") {
            Some(rest) => rest.split_once("?>").map_or(doc, |(_, r)| r),
            None => doc,
        };
        format!("{}\n", doc.trim())
    };
    let qemu = qemu.map(|q| format!(" qemu='{q}'")).unwrap_or_default();
    let mut s = format!(
        "<{ROOT} name='{}' libvirt='{libvirt}'{qemu}>\n",
        quick_xml::escape::escape(name)
    );
    s.push_str(&body(capabilities));
    for d in domcapabilities {
        s.push_str(&body(d));
    }
    let _ = writeln!(s, "</{ROOT}>");
    s
}
