//! A read-only view of a libvirt domain document.
//!
//! The view is a thin layer over a [`roxmltree::Document`] of the original text, so every node
//! keeps its byte range: [`crate::edit`] splices changes into the original bytes and everything
//! else stays as the operator (or the orchestrator) wrote it. Only elements in libvirt's own (empty)
//! namespace are read: a `<cpu>` inside `<metadata>` or under another namespace is someone else's
//! data and is never looked at.
//!
//! Parsing refuses DTDs and entity declarations (roxmltree's `allow_dtd = false`), documents over
//! [`MAX_INPUT_BYTES`] and documents with more than [`MAX_NODES`] nodes, so a hostile document
//! fails fast instead of costing memory.

use crate::error::{Error, Result};
use roxmltree::{Document, Node, ParsingOptions};

/// Largest domain document accepted, in bytes (16 MiB, the project's input limit). `virsh` itself
/// reads XML files of at most 10 MiB (`VSH_MAX_XML_FILE`); anything larger is refused here before
/// parsing.
pub const MAX_INPUT_BYTES: usize = 16 * 1024 * 1024;

/// Largest number of XML nodes accepted (elements, attributes are not counted, text, comments).
pub const MAX_NODES: u32 = 2_000_000;

/// Decode `bytes` as the UTF-8 text of a domain document, refusing oversized or non-UTF-8 input.
///
/// `what` names the input in messages ("the domain XML", a path).
///
/// # Errors
/// [`Error::TooLarge`] over [`MAX_INPUT_BYTES`]; [`Error::NotUtf8`] for bytes that are not
/// UTF-8 or are NUL (a UTF-16 document with or without a byte-order mark, a stray Latin-1 byte);
/// [`Error::Xml`] for an XML declaration naming another encoding.
pub fn decode<'b>(bytes: &'b [u8], what: &str) -> Result<&'b str> {
    if bytes.len() > MAX_INPUT_BYTES {
        return Err(Error::TooLarge {
            what: what.to_string(),
            size: bytes.len(),
            limit: MAX_INPUT_BYTES,
        });
    }
    let text = std::str::from_utf8(bytes).map_err(|e| Error::NotUtf8 {
        what: what.to_string(),
        offset: e.valid_up_to(),
    })?;
    // NUL is not an XML character at all; in a document that is otherwise ASCII it means UTF-16
    // without a byte-order mark, which is valid UTF-8 byte by byte.
    if let Some(offset) = bytes.iter().position(|b| *b == 0) {
        return Err(Error::NotUtf8 {
            what: what.to_string(),
            offset,
        });
    }
    if let Some(enc) = declared_encoding(text) {
        if !enc.eq_ignore_ascii_case("utf-8") && !enc.eq_ignore_ascii_case("utf8") {
            return Err(Error::Xml {
                what: what.to_string(),
                message: format!(
                    "it declares encoding '{enc}'; libvirt reads and writes domain XML as UTF-8 only"
                ),
            });
        }
    }
    Ok(text)
}

/// The `encoding` of the XML declaration, if the document starts with one.
fn declared_encoding(text: &str) -> Option<&str> {
    let decl = text.strip_prefix("<?xml")?;
    let decl = &decl[..decl.find("?>")?];
    let rest = &decl[decl.find("encoding")? + "encoding".len()..];
    let rest = rest.trim_start().strip_prefix('=')?.trim_start();
    let quote = rest.chars().next().filter(|c| *c == '"' || *c == '\'')?;
    let value = &rest[1..];
    Some(&value[..value.find(quote)?])
}

/// Parse `text` with the project's hardened options: no DTD, a node limit.
///
/// # Errors
/// [`Error::Xml`] with roxmltree's message (which gives line and column).
pub fn parse_xml<'t>(text: &'t str, what: &str) -> Result<Document<'t>> {
    if text.trim().is_empty() {
        return Err(Error::Xml {
            what: what.to_string(),
            message: "the input is empty".into(),
        });
    }
    let opts = ParsingOptions {
        allow_dtd: false,
        nodes_limit: MAX_NODES,
        ..ParsingOptions::default()
    };
    Document::parse_with_options(text, opts).map_err(|e| Error::Xml {
        what: what.to_string(),
        message: e.to_string(),
    })
}

/// The host's arch in libvirt's spelling (`x86_64`, `aarch64`, `s390x`, `ppc64le`, `i686`).
#[must_use]
pub fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86" => "i686",
        "powerpc64" if cfg!(target_endian = "little") => "ppc64le",
        "powerpc64" => "ppc64",
        "arm" => "armv7l",
        other => other,
    }
}

/// A parsed domain document and the facts the policy matches on.
pub struct Domain<'t> {
    /// The original text; every node range indexes into it.
    pub text: &'t str,
    /// The parsed document.
    pub doc: Document<'t>,
}

/// Whether `node` is an element named `name` in libvirt's (empty) namespace.
#[must_use]
pub fn is_libvirt_element(node: Node<'_, '_>, name: &str) -> bool {
    node.is_element() && node.tag_name().name() == name && node.tag_name().namespace().is_none()
}

/// The first child element of `node` named `name` in libvirt's namespace.
#[must_use]
pub fn child<'a, 't>(node: Node<'a, 't>, name: &str) -> Option<Node<'a, 't>> {
    node.children().find(|c| is_libvirt_element(*c, name))
}

/// The trimmed text content of `node`'s text children, or None when empty.
#[must_use]
pub fn text_of(node: Node<'_, '_>) -> Option<String> {
    let s: String = node
        .children()
        .filter(Node::is_text)
        .filter_map(|t| t.text())
        .collect();
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

/// An element's attributes as written, `name='value'` separated by spaces, in document order
/// (`sockets='2' cores='4' threads='1'`): the `old`/`new` form of a change to an element whose
/// attributes are its value (`<topology>`, `<driver>`). Namespaced attributes keep their local
/// name only.
#[must_use]
pub fn written_attributes(node: Node<'_, '_>) -> String {
    node.attributes()
        .map(|a| format!("{}='{}'", a.name(), a.value()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// An element's value in a change: its attributes as written ([`written_attributes`]), else its
/// trimmed text (`Intel` for `<vendor>`).
#[must_use]
pub fn written_value(node: Node<'_, '_>) -> String {
    if node.attributes().len() > 0 {
        written_attributes(node)
    } else {
        text_of(node).unwrap_or_default()
    }
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

/// The `<feature>` children of a `<cpu>` (or of a domcapabilities `<mode>`) as (libvirt feature
/// name, policy) pairs in document order: names normalised to libvirt's spelling
/// ([`crate::cpu::normalize_feature`]), the policy `require` when absent (libvirt's default);
/// features without a name are skipped.
#[must_use]
pub fn cpu_features(cpu: Node<'_, '_>) -> Vec<(String, String)> {
    cpu.children()
        .filter(|c| is_libvirt_element(*c, "feature"))
        .filter_map(|f| {
            let name = f.attribute("name")?;
            let key = crate::cpu::normalize_feature(name).unwrap_or_else(|| name.to_string());
            Some((key, f.attribute("policy").unwrap_or("require").to_string()))
        })
        .collect()
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

    /// `<domain type=...>`: the virt type (`kvm`, `qemu`, `xen`, `lxc`, `test`...), or "" if absent.
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
            None if matches!(self.arch(), "x86_64" | "i686") => "pc",
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
            decode(b"<domain>\xff</domain>", "x"),
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
