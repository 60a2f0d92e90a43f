//! A fleet's host facts read with each distinct `<domainCapabilities>` parsed once.
//!
//! A host's domcapabilities are four fifths of its `<hostFacts>` (libvirt 12.8's two: 295 KB of
//! 320 KB), and hosts of one hardware and one libvirt and QEMU release publish them byte for
//! byte the same (they hold no host's uuid, name or topology, unlike its capabilities). Parsing
//! every host's copy was most of what 10,000 hosts cost; here each distinct text is parsed once
//! and its reading ([`DomCaps`]) handed to every host that has the same bytes, the rest of the
//! document (the capabilities, the attributes) parsed per host as before.
//!
//! It is a shortcut that must read exactly what the whole parse reads: it is taken only for a
//! document it can cut without changing a node (no comment, CDATA, DTD or namespace declaration
//! on the root; each domcapabilities a child of the root), and any error, limit or doubt gives
//! None: the caller then parses the whole document, as before, and says what it says.

use crate::libvirt::domcaps::DomCaps;
use crate::libvirt::host_facts::{HostFacts, ROOT};
use crate::xml::{MAX_NODES, is_libvirt_element, parse_xml};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The element whose copies are shared.
const DOMCAPS: &str = "domainCapabilities";

/// Distinct domcapabilities texts kept: a fleet of as many kinds of host is already unusual;
/// beyond them each is parsed per host, as before (the memory stays bounded: at most this many
/// texts of a few hundred KB).
const MAX_KEPT: usize = 256;

/// Domcapabilities texts already read, shared by the threads that read a fleet's files: by a
/// hash of the text, each with its text (a hash alone could mistake two) and its reading (its
/// `source` left empty: each host's file is put in), with the count of XML nodes it holds.
#[derive(Default)]
pub(super) struct SharedDomCaps {
    kept: Mutex<HashMap<u64, Vec<Kept>>>,
}

/// One distinct domcapabilities text and its reading.
struct Kept {
    text: Box<str>,
    read: Arc<DomCaps>,
    nodes: usize,
}

impl SharedDomCaps {
    /// The reading of domcapabilities `text` (its `source` empty) and its node count: a kept
    /// one, else parsed and kept. None when it does not parse or is refused.
    fn get(&self, text: &str) -> Option<(Arc<DomCaps>, usize)> {
        let hash = hash(text.as_bytes());
        {
            let kept = self
                .kept
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let same = kept.get(&hash).into_iter().flatten();
            if let Some(k) = same.into_iter().find(|k| &*k.text == text) {
                return Some((k.read.clone(), k.nodes));
            }
        }
        // Parsed outside the lock: another thread may parse the same text meanwhile, and
        // keeps the same reading.
        let doc = parse_xml(text, "").ok()?;
        let root = doc.root_element();
        if !is_libvirt_element(root, DOMCAPS) {
            return None;
        }
        let read = Arc::new(DomCaps::read(root, "").ok()?);
        let nodes = doc.descendants().count();
        let mut kept = self
            .kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if kept.values().map(Vec::len).sum::<usize>() < MAX_KEPT {
            let same = kept.entry(hash).or_default();
            if !same.iter().any(|k| &*k.text == text) {
                same.push(Kept {
                    text: text.into(),
                    read: read.clone(),
                    nodes,
                });
            }
        }
        Some((read, nodes))
    }
}

/// A fast hash of `bytes` (word by word, multiply and rotate, as rustc's FxHash): the texts are
/// compared whole on a hit, so it only has to spread them.
fn hash(bytes: &[u8]) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mut h = bytes.len() as u64;
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        let w = u64::from_le_bytes(w.try_into().expect("chunks of 8"));
        h = (h.rotate_left(5) ^ w).wrapping_mul(K);
    }
    for b in words.remainder() {
        h = (h.rotate_left(5) ^ u64::from(*b)).wrapping_mul(K);
    }
    h
}

/// The byte ranges of the `<domainCapabilities>` elements of `text`, in order; None when one
/// cannot be cut out plainly (empty element, nested, unterminated, another name beginning so).
fn spans(text: &str) -> Option<Vec<std::ops::Range<usize>>> {
    let open = format!("<{DOMCAPS}");
    let close = format!("</{DOMCAPS}>");
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(i) = text[at..].find(&open) {
        let start = at + i;
        let after = &text[start + open.len()..];
        let tag_end = after.find('>')?;
        let plain = after[..tag_end]
            .chars()
            .next()
            .is_none_or(char::is_whitespace);
        if !plain || after[..tag_end].ends_with('/') {
            return None;
        }
        let end = start + open.len() + after.find(&close)? + close.len();
        if text[start + open.len()..end].contains(&open) {
            return None;
        }
        out.push(start..end);
        at = end;
    }
    Some(out)
}

/// The `<hostFacts>` document `text` (read from `what`) as [`HostFacts::read`] reads it, its
/// `domcaps` left empty, and beside it the readings of its domcapabilities in order, taken
/// from `shared` (their `source` empty); None when the shortcut does not apply or anything in
/// it fails (the caller parses the whole document then).
pub(super) fn host_facts(
    text: &str,
    what: &str,
    shared: &SharedDomCaps,
) -> Option<(HostFacts, Vec<Arc<DomCaps>>)> {
    if !text.trim_start().starts_with(&format!("<{ROOT}")) {
        return None;
    }
    // A comment, CDATA section or DTD could hide or make the element names searched for.
    if text.contains("<!") {
        return None;
    }
    let spans = spans(text)?;
    // A namespace declared on the root (the text before the first domcapabilities holds its
    // start tag) would be one of each domcapabilities too, and not of its text alone.
    if spans.is_empty() || text[..spans[0].start].contains("xmlns") {
        return None;
    }
    // The document with each domcapabilities left as an empty element of its name, where it
    // was: the reader finds them as before, and each is given its shared reading.
    let mut outer =
        String::with_capacity(text.len() - spans.iter().map(ExactSizeIterator::len).sum::<usize>());
    let mut from = 0;
    let mut shared_read = Vec::with_capacity(spans.len());
    let mut nodes = 0;
    for s in &spans {
        outer.push_str(&text[from..s.start]);
        outer.push('<');
        outer.push_str(DOMCAPS);
        outer.push_str("/>");
        from = s.end;
        let (read, n) = shared.get(&text[s.clone()])?;
        shared_read.push(read);
        nodes += n;
    }
    outer.push_str(&text[from..]);
    let doc = parse_xml(&outer, what).ok()?;
    let root = doc.root_element();
    if !is_libvirt_element(root, ROOT) {
        return None;
    }
    // Each placeholder a child of the root, as the reader takes them (one elsewhere would be
    // one the reader passes over); the nodes within the whole document's limit.
    let placeholders: Vec<_> = root
        .descendants()
        .filter(|n| n.is_element() && n.tag_name().name() == DOMCAPS)
        .collect();
    let top = placeholders
        .iter()
        .all(|n| n.parent() == Some(root) && is_libvirt_element(*n, DOMCAPS));
    nodes += doc.descendants().count();
    if placeholders.len() != spans.len() || !top || nodes >= MAX_NODES as usize {
        return None;
    }
    // The placeholders read as nothing (an empty reading allocates nothing): the shared
    // readings stand for them.
    let facts = HostFacts::read_with(root, what, |_| Ok(DomCaps::default())).ok()?;
    Some((
        HostFacts {
            domcaps: Vec::new(),
            ..facts
        },
        shared_read,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FACTS: &str = "tests/data/generations/forky";

    fn facts(name: &str, uuid: &str) -> String {
        let part = |f: &str| {
            let t = std::fs::read_to_string(format!("{FACTS}/{f}")).unwrap();
            t.trim_start()
                .strip_prefix("<?xml")
                .map_or(t.clone(), |r| r.split_once("?>").unwrap().1.to_string())
        };
        let caps = part("capabilities.xml").replacen("<uuid>", &format!("<uuid>{uuid}"), 1);
        format!(
            "<hostFacts name='{name}' libvirt='12.8.0'>\n{caps}{}{}</hostFacts>\n",
            part("domcapabilities-x86_64-q35-kvm.xml"),
            part("domcapabilities-x86_64-q35-qemu.xml")
        )
    }

    fn whole(text: &str, what: &str) -> HostFacts {
        let doc = parse_xml(text, what).unwrap();
        HostFacts::read(doc.root_element(), what).unwrap()
    }

    #[test]
    fn reads_as_the_whole_parse_and_shares_the_domcapabilities() {
        let shared = SharedDomCaps::default();
        for (name, uuid) in [("a", "1"), ("b", "2")] {
            let text = facts(name, uuid);
            let (fast, domcaps) = host_facts(&text, name, &shared).expect("the shortcut applies");
            let mut slow = whole(&text, name);
            assert_eq!(fast.name, slow.name);
            assert_eq!(fast.libvirt, slow.libvirt);
            for d in &mut slow.domcaps {
                d.source.clear();
            }
            let domcaps: Vec<DomCaps> = domcaps.iter().map(|d| (**d).clone()).collect();
            assert_eq!(domcaps, slow.domcaps);
            assert_eq!(domcaps.len(), 2);
            assert_eq!(
                format!("{:?}", fast.capabilities),
                format!("{:?}", slow.capabilities)
            );
        }
        let kept = shared.kept.lock().unwrap();
        assert_eq!(kept.values().map(Vec::len).sum::<usize>(), 2);
    }

    #[test]
    fn a_document_it_cannot_cut_plainly_is_left_to_the_whole_parse() {
        let shared = SharedDomCaps::default();
        let text = facts("a", "1");
        let commented = text.replacen("<capabilities>", "<!-- x --><capabilities>", 1);
        assert!(host_facts(&commented, "a", &shared).is_none());
        let nested = text.replacen(
            "</capabilities>",
            "<domainCapabilities></domainCapabilities></capabilities>",
            1,
        );
        assert!(host_facts(&nested, "a", &shared).is_none());
        let namespaced = text.replacen("<hostFacts", "<hostFacts xmlns='urn:x'", 1);
        assert!(host_facts(&namespaced, "a", &shared).is_none());
        let broken = text.replacen("</domainCapabilities>", "</domainCapabilitie>", 1);
        assert!(host_facts(&broken, "a", &shared).is_none());
        let caps_only = "<hostFacts name='a'><capabilities><host/></capabilities></hostFacts>";
        assert!(host_facts(caps_only, "a", &shared).is_none());
    }
}
