//! The XML every reader of the tool shares: hardened parsing (no DTD, size and node limits,
//! UTF-8 only) and the few questions asked of a parsed node, in libvirt's (empty) namespace.
//!
//! Every document the tool reads is untrusted: a domain from libvirt's hook or an
//! orchestrator, host facts from shared storage, a cpu_map from any directory. Parsing refuses
//! DTDs and entity declarations (roxmltree's `allow_dtd = false`), input over
//! [`MAX_INPUT_BYTES`] and more than [`MAX_NODES`] nodes, so a hostile document fails fast
//! instead of costing memory.

use crate::error::{Error, Result};
use roxmltree::{Document, Node, ParsingOptions};

/// Largest document accepted, in bytes (16 MiB, the project's input limit). `virsh` itself
/// reads XML files of at most 10 MiB (`VSH_MAX_XML_FILE`); anything larger is refused here before
/// parsing.
pub const MAX_INPUT_BYTES: usize = 16 * 1024 * 1024;

/// Largest number of XML nodes accepted (elements, attributes are not counted, text, comments).
pub const MAX_NODES: u32 = 2_000_000;

/// Decode `bytes` as the UTF-8 text of a document, refusing oversized or non-UTF-8 input.
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
    // memchr: a fleet decodes gigabytes, and a byte-by-byte search was a twentieth of its time.
    if let Some(offset) = memchr::memchr(0, bytes) {
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
