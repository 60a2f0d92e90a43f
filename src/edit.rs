//! A splice editor over the original document text.
//!
//! Edits are (byte range, replacement) pairs against the original text, applied in one forward
//! pass in the order of their positions, so every byte outside an edited range is copied as it
//! is: comments, quoting style, attribute order, namespace prefixes, entity references. New
//! markup is escaped with
//! `quick-xml`, never built by formatting unescaped user values, and takes the indentation of the
//! sibling it is inserted next to (quick-xml's own indenting writer is a heuristic, so it is not
//! used).
//!
//! The editor must never produce overlapping edits: [`Edits::apply`] refuses them rather than
//! guess, which would be a bug in the caller.

use roxmltree::Node;
use std::fmt::Write as _;
use std::ops::Range;

/// A set of splices against one original text.
#[derive(Debug, Default, Clone)]
pub struct Edits {
    splices: Vec<(Range<usize>, String)>,
}

/// Two edits touch the same bytes: a bug in the rewrite, reported instead of writing bad XML.
#[derive(Debug, thiserror::Error)]
#[error("internal error: overlapping edits at bytes {first:?} and {second:?}")]
pub struct OverlapError {
    /// The earlier range.
    pub first: Range<usize>,
    /// The range that overlaps it.
    pub second: Range<usize>,
}

impl Edits {
    /// No edits yet.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether there is nothing to change.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.splices.is_empty()
    }

    /// Replace the bytes in `range` with `text`.
    pub fn replace(&mut self, range: Range<usize>, text: impl Into<String>) {
        self.splices.push((range, text.into()));
    }

    /// Insert `text` at byte offset `at`.
    pub fn insert(&mut self, at: usize, text: impl Into<String>) {
        self.splices.push((at..at, text.into()));
    }

    /// Delete the bytes in `range`.
    pub fn delete(&mut self, range: Range<usize>) {
        self.splices.push((range, String::new()));
    }

    /// Add every splice of `other` (made against the same text).
    pub fn extend(&mut self, other: Edits) {
        self.splices.extend(other.splices);
    }

    /// Apply every splice to `original`. Insertions at the same offset keep the order in which
    /// they were added.
    ///
    /// # Errors
    /// [`OverlapError`] if two splices overlap (an insertion at the boundary of a replacement is
    /// not an overlap).
    pub fn apply(&self, original: &str) -> Result<String, OverlapError> {
        let mut order: Vec<usize> = (0..self.splices.len()).collect();
        order.sort_by_key(|&i| (self.splices[i].0.start, self.splices[i].0.end, i));
        let mut out = String::with_capacity(original.len() + 256);
        let mut pos = 0usize;
        let mut last: Option<Range<usize>> = None;
        for i in order {
            let (range, text) = &self.splices[i];
            if range.start < pos {
                return Err(OverlapError {
                    first: last.unwrap_or(0..0),
                    second: range.clone(),
                });
            }
            out.push_str(&original[pos..range.start]);
            out.push_str(text);
            pos = range.end;
            last = Some(range.clone());
        }
        out.push_str(&original[pos..]);
        Ok(out)
    }
}

/// The document's line ending: `"\r\n"` when its first line ends so, else `"\n"`. New lines
/// take it, so a CRLF document stays CRLF throughout.
#[must_use]
pub fn newline(text: &str) -> &'static str {
    match text.find('\n') {
        Some(i) if i > 0 && text.as_bytes()[i - 1] == b'\r' => "\r\n",
        _ => "\n",
    }
}

/// Add `markup` as the last child element of `parent`, on its own line with the indentation of
/// the other children (a `<x/>` parent is opened up; comments and text stay where they are).
pub fn append_child(edits: &mut Edits, text: &str, parent: Node<'_, '_>, markup: &str) {
    let nl = newline(text);
    let ind = line_indent(text, parent.range().start);
    let cind = child_indent(text, parent);
    let name = &text[parent.range().start + 1
        ..parent.range().start + 1 + tag_qname_len(text, parent.range().start)];
    if is_self_closing(text, parent) {
        let at = start_tag_attr_end(text, parent);
        edits.replace(
            at..parent.range().end,
            format!(">{nl}{cind}{markup}{nl}{ind}</{name}>"),
        );
        return;
    }
    let last = parent.children().rev().find(|c| !is_blank(text, *c));
    match last {
        Some(c) => edits.insert(raw_range(text, c).end, format!("{nl}{cind}{markup}")),
        None => {
            let start = start_tag_end(text, parent);
            let end = end_tag_start(text, parent).unwrap_or(start);
            edits.replace(start..end, format!("{nl}{cind}{markup}{nl}{ind}"));
        }
    }
}

/// The bytes a child node stands for in the original text. For elements, comments and processing
/// instructions that is [`Node::range`]; a text node may merge several pieces (text, CDATA
/// sections, entity references), so its bytes are everything between its neighbours: the previous
/// sibling's end (or the parent's start tag) and the next sibling's start (or the parent's end
/// tag).
#[must_use]
pub fn raw_range(text: &str, node: Node<'_, '_>) -> Range<usize> {
    if !node.is_text() {
        return node.range();
    }
    let start = match (node.prev_sibling(), node.parent()) {
        (Some(p), _) => p.range().end,
        (None, Some(parent)) if parent.is_element() => start_tag_end(text, parent),
        _ => node.range().start,
    };
    let end = match (node.next_sibling(), node.parent()) {
        (Some(n), _) => n.range().start,
        (None, Some(parent)) if parent.is_element() => {
            end_tag_start(text, parent).unwrap_or(node.range().end)
        }
        _ => node.range().end,
    };
    if start <= end {
        start..end
    } else {
        node.range()
    }
}

/// Whether `node` is text that is only whitespace in the original (not CDATA, not an entity).
#[must_use]
pub fn is_blank(text: &str, node: Node<'_, '_>) -> bool {
    node.is_text() && text[raw_range(text, node)].trim().is_empty()
}

/// The whitespace that starts the line `offset` is on, if only whitespace precedes `offset` on
/// that line; otherwise "".
#[must_use]
pub fn line_indent(text: &str, offset: usize) -> &str {
    // Walk back over spaces and tabs only: a long line without newlines costs nothing.
    let bytes = text.as_bytes();
    let mut start = offset;
    while start > 0 && matches!(bytes[start - 1], b' ' | b'\t') {
        start -= 1;
    }
    if start == 0 || bytes[start - 1] == b'\n' {
        &text[start..offset]
    } else {
        ""
    }
}

/// The indentation to use for a new child of `parent`: that of its first element child, or the
/// parent's own indentation plus one level (the step between the parent and its own parent, or
/// two spaces, libvirt's step).
#[must_use]
pub fn child_indent(text: &str, parent: Node<'_, '_>) -> String {
    if let Some(c) = parent.children().find(Node::is_element) {
        let ind = line_indent(text, c.range().start);
        if !ind.is_empty() || text[..c.range().start].ends_with('\n') {
            return ind.to_string();
        }
    }
    let own = line_indent(text, parent.range().start);
    let step = parent
        .parent_element()
        .map(|gp| {
            let g = line_indent(text, gp.range().start);
            own.strip_prefix(g).unwrap_or("").to_string()
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "  ".to_string());
    format!("{own}{step}")
}

/// The range to delete to remove `node` together with the line it stands on: the node plus the
/// whitespace before it back to (and including) the previous newline, when only whitespace is
/// there. Otherwise just the node.
#[must_use]
pub fn node_with_line(text: &str, node: Node<'_, '_>) -> Range<usize> {
    let r = node.range();
    let ind = line_indent(text, r.start);
    let start = r.start - ind.len();
    if start > 0 && text.as_bytes()[start - 1] == b'\n' {
        let nl = if start >= 2 && text.as_bytes()[start - 2] == b'\r' {
            2
        } else {
            1
        };
        (start - nl)..r.end
    } else {
        r
    }
}

/// The quote character `node`'s attributes use (the first one's), or `fallback`.
#[must_use]
pub fn quote_of(text: &str, node: Node<'_, '_>, fallback: char) -> char {
    node.attributes().next().map_or(fallback, |a| {
        let start = a.range_value().start;
        text.as_bytes()[start - 1] as char
    })
}

/// The quote character most attributes in the document use (`'` as libvirt writes when tied or
/// when there are none).
#[must_use]
pub fn document_quote(text: &str, doc: &roxmltree::Document<'_>) -> char {
    let (mut single, mut double) = (0usize, 0usize);
    for n in doc.root_element().descendants().take(200) {
        for a in n.attributes() {
            match text.as_bytes()[a.range_value().start - 1] {
                b'"' => double += 1,
                _ => single += 1,
            }
        }
    }
    if double > single { '"' } else { '\'' }
}

/// Escape an attribute value for the given quote character.
#[must_use]
pub fn escape_attr(value: &str) -> String {
    quick_xml::escape::escape(value).into_owned()
}

/// Escape element text.
#[must_use]
pub fn escape_text(value: &str) -> String {
    quick_xml::escape::partial_escape(value).into_owned()
}

/// Byte offset just before the `>` or `/>` that ends `node`'s start tag: where a new attribute
/// goes.
#[must_use]
pub fn start_tag_attr_end(text: &str, node: Node<'_, '_>) -> usize {
    let start = node.range().start;
    let mut pos = node
        .attributes()
        .map(|a| a.range().end)
        .max()
        .unwrap_or_else(|| start + 1 + tag_qname_len(text, start));
    // Namespace declarations are not attributes in roxmltree: skip past any that follow.
    let end = start_tag_end(text, node);
    let tail = &text[pos..end];
    let close = if tail.ends_with("/>") { 2 } else { 1 };
    let inner = &tail[..tail.len() - close];
    let trimmed = inner.trim_end();
    pos += trimmed.len();
    pos
}

fn tag_qname_len(text: &str, start: usize) -> usize {
    text[start + 1..]
        .find(|c: char| c.is_whitespace() || c == '>' || c == '/')
        .unwrap_or(0)
}

/// Byte offset just past the `>` of `node`'s start tag.
#[must_use]
pub fn start_tag_end(text: &str, node: Node<'_, '_>) -> usize {
    let r = node.range();
    // The first '>' outside quotes (a child's range cannot be trusted for this: roxmltree merges
    // CDATA into text nodes).
    let bytes = text.as_bytes();
    let mut quote: Option<u8> = None;
    for (i, &b) in bytes[r.start..r.end].iter().enumerate() {
        match (quote, b) {
            (None, b'"' | b'\'') => quote = Some(b),
            (Some(q), _) if q == b => quote = None,
            (None, b'>') => return r.start + i + 1,
            _ => {}
        }
    }
    r.end
}

/// Whether `node` is written as an empty-element tag (`<x/>`).
#[must_use]
pub fn is_self_closing(text: &str, node: Node<'_, '_>) -> bool {
    text[node.range()].ends_with("/>")
}

/// Byte offset of the `<` of `node`'s end tag (`</x>`), or None for `<x/>`.
#[must_use]
pub fn end_tag_start(text: &str, node: Node<'_, '_>) -> Option<usize> {
    if is_self_closing(text, node) {
        return None;
    }
    text[..node.range().end].rfind("</")
}

/// One piece of a re-rendered element's content: original bytes or new markup.
#[derive(Debug, Clone)]
pub enum Item {
    /// Bytes of the original text (a child node kept as it was written).
    Verbatim(Range<usize>),
    /// New markup, already escaped.
    Markup(String),
}

/// An element `<NAME ...>` whose start tag is `start_tag` (without its closing `>`), with `items`
/// each on its own line indented by `cind`, and the end tag indented by `ind`; `<NAME .../>` when
/// there are no items. Lines end as the document's do.
#[must_use]
pub fn render_element(
    text: &str,
    name: &str,
    start_tag: &str,
    items: &[Item],
    ind: &str,
    cind: &str,
) -> String {
    if items.is_empty() {
        return format!("{start_tag}/>");
    }
    let nl = newline(text);
    let mut s = format!("{start_tag}>");
    for it in items {
        s.push_str(nl);
        s.push_str(cind);
        match it {
            Item::Verbatim(r) => s.push_str(text[r.clone()].trim()),
            Item::Markup(m) => s.push_str(m),
        }
    }
    s.push_str(nl);
    s.push_str(ind);
    s.push_str("</");
    s.push_str(name);
    s.push('>');
    s
}

/// `node`'s original markup with each (attribute, value) set: existing attributes get the new
/// value in their own quotes, missing ones are appended with quote `q`; every other byte is kept.
#[must_use]
pub fn with_attrs(text: &str, node: Node<'_, '_>, attrs: &[(&str, &str)], q: char) -> String {
    let base = node.range().start;
    let mut e = Edits::new();
    let mut tail = String::new();
    for (name, value) in attrs {
        match node
            .attributes()
            .find(|a| a.name() == *name && a.namespace().is_none())
        {
            Some(a) if a.value() == *value => {}
            Some(a) => e.replace(
                a.range_value().start - base..a.range_value().end - base,
                escape_attr(value),
            ),
            None => {
                let _ = write!(tail, " {name}={q}{}{q}", escape_attr(value));
            }
        }
    }
    if !tail.is_empty() {
        e.insert(start_tag_attr_end(text, node) - base, tail);
    }
    e.apply(&text[node.range()])
        .unwrap_or_else(|_| text[node.range()].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apply_keeps_untouched_bytes() {
        let t = "abcdef";
        let mut e = Edits::new();
        e.replace(1..2, "B");
        e.insert(4, "X");
        e.delete(5..6);
        assert_eq!(e.apply(t).unwrap(), "aBcdXe");
    }

    #[test]
    fn overlap_is_refused() {
        let mut e = Edits::new();
        e.replace(1..4, "");
        e.replace(2..3, "");
        assert!(e.apply("abcdef").is_err());
    }

    #[test]
    fn tag_geometry() {
        let t = "<d>\n  <cpu a='1' xmlns:q=\"u\" >\n    <x/>\n  </cpu>\n  <e b=\"2\"/>\n</d>";
        let doc = roxmltree::Document::parse(t).unwrap();
        let cpu = doc.root_element().first_element_child().unwrap();
        assert_eq!(
            &t[..start_tag_attr_end(t, cpu)],
            "<d>\n  <cpu a='1' xmlns:q=\"u\""
        );
        assert_eq!(child_indent(t, cpu), "    ");
        let e = cpu.next_sibling_element().unwrap();
        assert!(is_self_closing(t, e));
        assert_eq!(quote_of(t, e, '\''), '"');
        let r = node_with_line(t, e);
        assert_eq!(&t[r], "\n  <e b=\"2\"/>");
        assert_eq!(
            &t[end_tag_start(t, cpu).unwrap()..cpu.range().end],
            "</cpu>"
        );
        let x = cpu.first_element_child().unwrap();
        assert_eq!(child_indent(t, x), "      ");
    }
}
