//! A read-only view of a libvirt domain document.
//!
//! The view is a thin layer over a [`roxmltree::Document`] of the original text, so every node
//! keeps its byte range: [`crate::edit`] splices changes into the original bytes and everything
//! else stays as the operator (or the orchestrator) wrote it. Only elements in libvirt's own
//! (empty) namespace are read: a `<cpu>` inside `<metadata>` or under another namespace is someone
//! else's data and is never looked at.
//!
//! Parsing is [`crate::xml::parse_xml`]'s: no DTD, a size and a node limit.

use crate::error::{Error, Result};
use crate::libvirt::arch::host_arch;
use crate::libvirt::cpu_def::{CpuMode, FeaturePolicy};
use crate::xml::{child, is_libvirt_element, parse_xml, text_of};
use roxmltree::{Document, Node};

/// A parsed domain document and the facts the policy matches on.
pub struct Domain<'t> {
    /// The original text; every node range indexes into it.
    pub text: &'t str,
    /// The parsed document.
    pub doc: Document<'t>,
}

/// Whether `<domain>` element `root` is a running guest's live XML ([`Domain::is_live`]): its
/// `id` is a domain id libvirt gives an active domain, a positive integer (libvirt keeps -1 for
/// an inactive one and never writes it; anything else is not an id libvirt wrote).
#[must_use]
pub fn is_live_element(root: Node<'_, '_>) -> bool {
    root.attribute("id")
        .and_then(|id| id.parse::<u32>().ok())
        .is_some_and(|id| id > 0)
}

/// The CPU model a `<model>` element names, as libvirt reads it: the text as written, spaces
/// included (libvirt 9.0 and 11.3 refuse `<model>  Nehalem\n</model>` with "Unknown CPU model
/// Nehalem" at start, the spaces kept); None when empty or only spaces (no model).
#[must_use]
pub fn model_name(model: Node<'_, '_>) -> Option<String> {
    let s: String = model
        .children()
        .filter(Node::is_text)
        .filter_map(|t| t.text())
        .collect();
    (!s.trim().is_empty()).then_some(s)
}

/// The mode of a domain's `<cpu>` as libvirt reads it: `custom` when absent; None for a word
/// libvirt does not know (it refuses the domain: validation says so, `cpu-mode-invalid`).
#[must_use]
pub fn cpu_mode(cpu: Node<'_, '_>) -> Option<CpuMode> {
    CpuMode::parse(cpu.attribute("mode").unwrap_or(CpuMode::Custom.as_str()))
}

/// The `<feature>` children of a domain's `<cpu>` as (libvirt feature name, policy) pairs in
/// document order: names normalised to libvirt's spelling ([`crate::cpu::normalize_feature`]),
/// the policy `require` when absent (libvirt's default) and None when libvirt does not know it
/// (libvirt refuses the domain: validation says so, `cpu-feature-invalid`; such a feature is
/// guaranteed nothing); features without a name, or with an empty one, are skipped. The domain is read as written,
/// not refused: its mistakes are findings.
#[must_use]
pub fn cpu_features(cpu: Node<'_, '_>) -> Vec<(String, Option<FeaturePolicy>)> {
    cpu.children()
        .filter(|c| is_libvirt_element(*c, "feature"))
        .filter_map(|f| {
            let name = f.attribute("name").filter(|n| !n.is_empty())?;
            let key = crate::cpu::normalize_feature(name).unwrap_or_else(|| name.to_string());
            let policy = FeaturePolicy::parse(f.attribute("policy").unwrap_or("require"));
            Some((key, policy))
        })
        .collect()
}

/// The root element of libvirt's status file of a running guest (`/run/libvirt/qemu/NAME.xml`,
/// written by `qemuDomainObjSave` through `virDomainObjFormat`): `<domstatus state reason pid>`
/// with the monitor, the vCPU threads and the live `<domain>` inside. A transient guest (what
/// CloudStack's agent creates) has no other document on the host.
pub const STATUS_ROOT: &str = "domstatus";

/// The live `<domain>` of a status file's root `root` (`<domstatus>`): None when `root` is not
/// a `<domstatus>`, `Some(Err(why))` for one without `<domain>`.
#[must_use]
pub fn status_domain<'a, 'i>(
    root: Node<'a, 'i>,
) -> Option<std::result::Result<Node<'a, 'i>, &'static str>> {
    is_libvirt_element(root, STATUS_ROOT).then(|| {
        child(root, "domain").ok_or("a <domstatus> (libvirt's status file) without <domain>")
    })
}

/// The text of the `<domain>` a guest document holds, and whether it is a running guest's live
/// XML: `text` itself for a `<domain>` (a stored definition, `virsh dumpxml`), the `<domain>`
/// inside for a status file ([`status_domain`]). Only a text naming `<domstatus` is parsed here:
/// a domain is parsed once, by [`Domain::parse`].
///
/// # Errors
/// [`Error::Xml`] for a status file that is not well-formed XML or has no `<domain>`.
pub fn guest_document<'t>(text: &'t str, what: &str) -> Result<(&'t str, bool)> {
    if !text.contains(STATUS_ROOT) {
        return Ok((text, false));
    }
    let doc = parse_xml(text, what)?;
    match status_domain(doc.root_element()) {
        None => Ok((text, false)),
        Some(Ok(d)) => Ok((&text[d.range()], true)),
        Some(Err(why)) => Err(Error::Xml {
            what: what.to_string(),
            message: why.to_string(),
        }),
    }
}

impl<'t> Domain<'t> {
    /// Parse a domain document.
    ///
    /// # Errors
    /// [`Error::Xml`] for malformed XML, DTDs and entities; [`Error::NotADomain`] when the root
    /// element is not libvirt's `<domain>`.
    pub fn parse(text: &'t str, what: &str) -> Result<Self> {
        let doc = parse_xml(text, what)?;
        let root = doc.root_element();
        if !is_libvirt_element(root, "domain") {
            return Err(Error::NotADomain {
                what: what.to_string(),
                root: root.tag_name().name().to_string(),
            });
        }
        Ok(Domain { text, doc })
    }

    /// The `<domain>` element.
    #[must_use]
    pub fn root(&self) -> Node<'_, 't> {
        self.doc.root_element()
    }

    /// Whether this is a running guest's live XML: libvirt writes `<domain id='N'>` only for an
    /// active domain (`virDomainDefFormatInternal`: the id unless the inactive definition is
    /// asked for), in `virsh dumpxml` of a running guest and in its status file; a stored
    /// definition never has it. Its `<cpu>` is what QEMU gave, with libvirt's `check='full'`
    /// written after its own start check passed.
    #[must_use]
    pub fn is_live(&self) -> bool {
        is_live_element(self.root())
    }

    /// `<domain type=...>`: the virt type (`kvm`, `qemu`, `xen`, `lxc`, `test`...), or "" if
    /// absent.
    #[must_use]
    pub fn virt_type(&self) -> &str {
        self.root().attribute("type").unwrap_or("")
    }

    /// `<name>`, or "" if absent.
    #[must_use]
    pub fn name(&self) -> String {
        child(self.root(), "name")
            .and_then(text_of)
            .unwrap_or_default()
    }

    /// `<os><type arch=...>`; when absent, the host's arch, which is what libvirt fills in
    /// (`virCapabilitiesDomainDataLookup` picks the host arch for a domain that names none).
    #[must_use]
    pub fn arch(&self) -> &str {
        match self.os_type().and_then(|t| t.attribute("arch")) {
            Some(a) => a,
            None => host_arch(),
        }
    }

    /// Whether the domain names its arch itself (`<os><type arch=...>`).
    #[must_use]
    pub fn arch_written(&self) -> bool {
        self.os_type().and_then(|t| t.attribute("arch")).is_some()
    }

    /// `<os><type machine=...>` as written (may be an alias such as `q35`). When absent on x86,
    /// the one libvirt fills in at define: QEMU's default machine type, the alias `pc` (libvirt's
    /// QEMU capability cache marks `pc-i440fx-7.2` on QEMU 7.2 and `pc-i440fx-10.0` on QEMU 10.0
    /// `default='yes'`, alias `pc`); "" for other arches, which have no default.
    #[must_use]
    pub fn machine(&self) -> &str {
        match self.os_type().and_then(|t| t.attribute("machine")) {
            Some(m) => m,
            None if crate::libvirt::arch::is_x86(self.arch()) => "pc",
            None => "",
        }
    }

    /// `<devices><emulator>`, if given.
    #[must_use]
    pub fn emulator(&self) -> Option<String> {
        child(self.root(), "devices")
            .and_then(|d| child(d, "emulator"))
            .and_then(text_of)
    }

    /// What the table of known hazards asks of this guest ([`crate::hazards::GuestShape`]): its
    /// domain type, the `threads` of the first `<cpu>` that has a `<topology>` (1 without
    /// one), the version of its versioned x86 machine type, and the first `<cpu>`'s model and
    /// enabled and disabled features (the one libvirt reads, [`Domain::cpus`]); `running`: it
    /// arrives by live migration, else it is started.
    #[must_use]
    pub fn hazard_shape(&self, running: bool) -> crate::hazards::GuestShape {
        let cpus = self.cpus();
        let threads = cpus
            .iter()
            .find_map(|c| {
                child(*c, "topology")
                    .and_then(|t| t.attribute("threads"))
                    .and_then(|t| t.trim().parse::<u32>().ok())
            })
            .unwrap_or(1);
        let cpu = cpus.first().copied();
        let cpu_model = cpu
            .and_then(|c| child(c, "model"))
            .and_then(model_name)
            .map(|m| m.trim().to_string());
        let (mut features_enabled, mut features_disabled) = (Vec::new(), Vec::new());
        for (name, policy) in cpu.map(cpu_features).unwrap_or_default() {
            match policy {
                Some(FeaturePolicy::Require | FeaturePolicy::Force) => features_enabled.push(name),
                Some(FeaturePolicy::Disable | FeaturePolicy::Forbid) => {
                    features_disabled.push(name);
                }
                Some(FeaturePolicy::Optional) | None => {}
            }
        }
        let machine = if crate::libvirt::arch::is_x86(self.arch()) {
            crate::hazards::machine_version(self.machine())
        } else {
            None
        };
        crate::hazards::GuestShape {
            virt_type: self.virt_type().to_string(),
            threads,
            running,
            machine,
            cpu_model,
            features_enabled,
            features_disabled,
        }
    }

    /// Whether the domain writes an Intel IOMMU with `<driver eim='on'/>` (QEMU's `eim=on`;
    /// libvirt passes nothing for an absent `eim`, which QEMU's `auto` decides).
    #[must_use]
    pub fn writes_eim_on(&self) -> bool {
        child(self.root(), "devices")
            .and_then(|d| child(d, "iommu"))
            .filter(|i| i.attribute("model") == Some("intel"))
            .and_then(|i| child(i, "driver"))
            .and_then(|d| d.attribute("eim"))
            == Some("on")
    }

    fn os_type(&self) -> Option<Node<'_, 't>> {
        child(self.root(), "os").and_then(|os| child(os, "type"))
    }

    /// Every top-level `<cpu>` element of `<domain>`, in document order. libvirt reads only the
    /// first one's mode, model and features (seen with libvirt 9.0), so more than one is a defect.
    #[must_use]
    pub fn cpus(&self) -> Vec<Node<'_, 't>> {
        self.root()
            .children()
            .filter(|c| is_libvirt_element(*c, "cpu"))
            .collect()
    }

    /// Whether this domain is one the tool rewrites: libvirt's QEMU driver, `type='kvm'` or
    /// `type='qemu'` (TCG). Xen, LXC, bhyve, the test driver and others pass through untouched.
    #[must_use]
    pub fn in_scope(&self) -> bool {
        matches!(self.virt_type(), "kvm" | "qemu")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_dtd_and_entities() {
        let bomb = "<?xml version='1.0'?><!DOCTYPE d [<!ENTITY a 'aaaa'><!ENTITY b '&a;&a;'>]><domain>&b;</domain>";
        let err = Domain::parse(bomb, "x").err().unwrap().to_string();
        assert!(err.contains("not acceptable XML"), "{err}");
    }

    #[test]
    fn refuses_non_domain_and_non_utf8() {
        assert!(matches!(
            Domain::parse("<cpu/>", "x"),
            Err(Error::NotADomain { .. })
        ));
        assert!(matches!(
            crate::xml::decode(b"<domain>\xff</domain>", "x"),
            Err(Error::NotUtf8 { offset: 8, .. })
        ));
    }

    #[test]
    fn reads_facts_and_ignores_foreign_cpu() {
        let x = "<domain type='kvm'><name>g</name><metadata><m:cpu xmlns:m='urn:x'/></metadata>\
                 <os><type arch='x86_64' machine='q35'>hvm</type></os><cpu/><cpu><numa/></cpu></domain>";
        let d = Domain::parse(x, "x").unwrap();
        assert_eq!(
            (d.virt_type(), d.arch(), d.machine(), d.name().as_str()),
            ("kvm", "x86_64", "q35", "g")
        );
        assert_eq!(d.cpus().len(), 2);
        assert!(d.in_scope());
    }
}
