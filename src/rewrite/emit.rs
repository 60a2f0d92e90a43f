//! The desired `<cpu>` written back as splices on the original text: the smallest edit that
//! makes the document say what [`Desired`] holds.
//!
//! The first `<cpu>` is replaced only when something in it changes; its children that stay are
//! copied byte for byte, in their own order; what is new is placed where libvirt writes it (model
//! first, vendor and topology/cache/maxphysaddr next, features after the last feature, numa and the
//! children of later `<cpu>` elements last) with its siblings' indentation and the document's
//! quote style. The later `<cpu>` elements are deleted with their lines. A domain without `<cpu>`
//! gets one after `<features>` (or `<cputune>`, `<os>`).

use super::desired::{Desired, DesiredFeature, DesiredModel, SINGLES};
use crate::domain::Domain;
use crate::edit::{
    Edits, Item, child_indent, document_quote, end_tag_start, escape_attr, escape_text, is_blank,
    is_self_closing, line_indent, newline, node_with_line, quote_of, raw_range, render_element,
    start_tag_attr_end, with_attrs,
};
use crate::xml::{child, is_libvirt_element};
use roxmltree::Node;
use std::fmt::Write as _;

/// What a body item is, for placing new ones.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Model,
    Single,
    Feature,
    Numa,
    Other,
}

/// How new markup is written: the document's text, its quote character, and whether features
/// are written `name` first (Nova does; libvirt writes `policy` first).
struct Style<'s, 'a, 't> {
    text: &'s str,
    q: char,
    name_first: bool,
    d: &'s Desired<'a, 't>,
}

/// The edits that turn the document's `<cpu>` elements (`cpus`, in document order) into `d`.
///
/// # Errors
/// A message when a `<cpu>` must be added to a `<domain>` with no content at all.
pub(crate) fn emit(
    dom: &Domain<'_>,
    cpus: &[Node<'_, '_>],
    d: &Desired<'_, '_>,
) -> Result<Edits, String> {
    let text = dom.text;
    let first = cpus.first().copied();
    let q = match first {
        Some(f) => quote_of(text, f, document_quote(text, &dom.doc)),
        None => document_quote(text, &dom.doc),
    };
    let style = Style {
        text,
        q,
        name_first: features_name_first(cpus),
        d,
    };
    let first_children: Vec<Node<'_, '_>> = first
        .map(|f| f.children().filter(|c| !is_blank(text, *c)).collect())
        .unwrap_or_default();
    let (mut items, placed) = kept_items(&style, &first_children);
    place_new_items(&style, &mut items, &placed);
    let items: Vec<Item> = items.into_iter().map(|(_, i)| i).collect();
    let mut edits = Edits::new();
    match first {
        Some(f) => {
            let start_tag = start_tag_with(text, f, &d.attrs, q);
            let body_changed = body_differs(text, &items, &first_children);
            if let Some(new) = replaced_cpu(text, f, &start_tag, &items, body_changed) {
                edits.replace(f.range(), new);
            }
            for later in &cpus[1..] {
                edits.delete(node_with_line(text, *later));
            }
        }
        None if items.is_empty() && d.attrs.is_empty() => {}
        None => insert_cpu(dom, &new_start_tag(&d.attrs, q), &items, &mut edits)?,
    }
    Ok(edits)
}

/// New features follow the attribute order of the features already there.
fn features_name_first(cpus: &[Node<'_, '_>]) -> bool {
    cpus.iter()
        .flat_map(Node::children)
        .find(|c| is_libvirt_element(*c, "feature"))
        .and_then(|f| {
            let mut names = f.attributes().map(|a| a.name());
            let first = names.find(|n| *n == "name" || *n == "policy")?;
            Some(first == "name")
        })
        .unwrap_or(false)
}

fn feature_item(s: &Style<'_, '_, '_>, f: &DesiredFeature<'_, '_>) -> Item {
    let q = s.q;
    match f.node {
        Some(node) if node.attribute("policy").unwrap_or("require") == f.policy => {
            Item::Verbatim(node.range())
        }
        Some(node) => Item::Markup(with_attrs(
            s.text,
            node,
            &[("policy", f.policy.as_str())],
            q,
        )),
        None if s.name_first => Item::Markup(format!(
            "<feature name={q}{}{q} policy={q}{}{q}/>",
            escape_attr(&f.name),
            escape_attr(&f.policy)
        )),
        None => Item::Markup(format!(
            "<feature policy={q}{}{q} name={q}{}{q}/>",
            escape_attr(&f.policy),
            escape_attr(&f.name)
        )),
    }
}

fn model_item(s: &Style<'_, '_, '_>, m: &DesiredModel<'_, '_>) -> Item {
    match m.src {
        Some(src) => Item::Verbatim(src.range()),
        None => Item::Markup(model_markup(m, s.q)),
    }
}

fn single_item(s: &Style<'_, '_, '_>, name: &str, src: Node<'_, '_>) -> Item {
    match (&s.d.topology_markup, name) {
        (Some(m), "topology") => Item::Markup(m.clone()),
        _ => Item::Verbatim(src.range()),
    }
}

fn numa_item(s: &Style<'_, '_, '_>, n: Node<'_, '_>) -> Item {
    match &s.d.numa_markup {
        Some(m) => Item::Markup(m.clone()),
        None => Item::Verbatim(n.range()),
    }
}

/// The first `<cpu>`'s children in their own order: kept, replaced in place, or dropped. Also
/// returns the names of the once-only children (`model`, [`SINGLES`], `numa`) the first `<cpu>`
/// had, which are placed now and not again.
fn kept_items(
    s: &Style<'_, '_, '_>,
    first_children: &[Node<'_, '_>],
) -> (Vec<(Kind, Item)>, Vec<&'static str>) {
    let d = s.d;
    let by_node: std::collections::HashMap<roxmltree::NodeId, &DesiredFeature<'_, '_>> = d
        .features
        .iter()
        .filter_map(|f| Some((f.node?.id(), f)))
        .collect();
    let mut items = Vec::new();
    let mut placed: Vec<&'static str> = Vec::new();
    for c in first_children {
        let name = c.tag_name().name();
        let ours = c.is_element() && c.tag_name().namespace().is_none();
        let once = ["model", "numa"]
            .into_iter()
            .chain(SINGLES)
            .find(|n| ours && *n == name);
        if let Some(once) = once {
            if placed.contains(&once) {
                continue;
            }
            placed.push(once);
            let item = match once {
                "model" => d.model.as_ref().map(|m| (Kind::Model, model_item(s, m))),
                "numa" => d.numa.map(|n| (Kind::Numa, numa_item(s, n))),
                _ => d
                    .single(once)
                    .map(|src| (Kind::Single, single_item(s, once, src))),
            };
            items.extend(item);
        } else if ours && name == "feature" && c.attribute("name").is_some() {
            let f = by_node.get(&c.id());
            items.extend(f.map(|f| (Kind::Feature, feature_item(s, f))));
        } else {
            items.push((Kind::Other, Item::Verbatim(raw_range(s.text, *c))));
        }
    }
    (items, placed)
}

/// Add what the first `<cpu>` did not have (`placed` names what it had), where libvirt writes it.
fn place_new_items(s: &Style<'_, '_, '_>, items: &mut Vec<(Kind, Item)>, placed: &[&str]) {
    let d = s.d;
    let pos_after = |items: &[(Kind, Item)], kinds: &[Kind]| -> Option<usize> {
        items
            .iter()
            .rposition(|(k, _)| kinds.contains(k))
            .map(|i| i + 1)
    };
    if let (false, Some(m)) = (placed.contains(&"model"), &d.model) {
        items.insert(0, (Kind::Model, model_item(s, m)));
    }
    for name in SINGLES.into_iter().filter(|n| !placed.contains(n)) {
        if let Some(src) = d.single(name) {
            let at = pos_after(items, &[Kind::Model, Kind::Single]).unwrap_or(0);
            items.insert(at, (Kind::Single, single_item(s, name, src)));
        }
    }
    // New features go together after the last feature (else before <numa>, else last).
    let at = pos_after(items, &[Kind::Feature])
        .or_else(|| items.iter().position(|(k, _)| *k == Kind::Numa))
        .unwrap_or(items.len());
    let new: Vec<(Kind, Item)> = d
        .features
        .iter()
        .filter(|f| f.node.is_none())
        .map(|f| (Kind::Feature, feature_item(s, f)))
        .collect();
    items.splice(at..at, new);
    if let (false, Some(n)) = (placed.contains(&"numa"), d.numa) {
        items.push((Kind::Numa, numa_item(s, n)));
    }
    for e in &d.extras {
        items.push((Kind::Other, Item::Verbatim(e.range())));
    }
}

/// Whether the new body differs from the first `<cpu>`'s own non-blank children.
fn body_differs(text: &str, items: &[Item], first_children: &[Node<'_, '_>]) -> bool {
    items.len() != first_children.len()
        || items.iter().zip(first_children).any(|(it, c)| match it {
            Item::Verbatim(r) => *r != raw_range(text, *c),
            Item::Markup(_) => true,
        })
}

/// The new text of the first `<cpu>`, or None when neither its start tag nor its body changes.
fn replaced_cpu(
    text: &str,
    f: Node<'_, '_>,
    start_tag: &str,
    items: &[Item],
    body_changed: bool,
) -> Option<String> {
    let orig_start = &text[f.range().start..start_tag_attr_end(text, f)];
    if orig_start == start_tag && !body_changed {
        return None;
    }
    let self_closing = is_self_closing(text, f);
    Some(if !body_changed {
        // Only the start tag changes: the rest is copied as it is.
        let gap_and_body = &text[start_tag_attr_end(text, f)..f.range().end];
        format!("{start_tag}{gap_and_body}")
    } else if items.is_empty() {
        // Every child went (a model under host-passthrough): `<cpu .../>`, as libvirt writes it.
        format!("{start_tag}/>")
    } else if !text[f.range()].contains('\n') && !self_closing {
        // Written on one line (CloudStack writes `<cpu><topology .../></cpu>`): it stays on one.
        let mut s = format!("{start_tag}>");
        for it in items {
            match it {
                Item::Verbatim(r) => s.push_str(text[r.clone()].trim()),
                Item::Markup(m) => s.push_str(m),
            }
        }
        s.push_str("</cpu>");
        s
    } else {
        let ind = line_indent(text, f.range().start).to_string();
        let cind = child_indent(text, f);
        render_element(text, "cpu", start_tag, items, &ind, &cind)
    })
}

/// Insert a new `<cpu>` into a domain that has none, where libvirt writes it: after `<features>`,
/// `<cputune>` or `<os>`, else before `<clock>` or `<devices>`, else last.
fn insert_cpu(
    dom: &Domain<'_>,
    start_tag: &str,
    items: &[Item],
    edits: &mut Edits,
) -> Result<(), String> {
    let text = dom.text;
    let root = dom.root();
    let ind = child_indent(text, root);
    let cind = format!("{ind}{}", indent_step(text, root, &ind));
    let el = render_element(text, "cpu", start_tag, items, &ind, &cind);
    let nl = newline(text);
    let anchor_after = child(root, "features")
        .or_else(|| child(root, "cputune"))
        .or_else(|| child(root, "os"));
    if let Some(a) = anchor_after {
        edits.insert(a.range().end, format!("{nl}{ind}{el}"));
    } else if let Some(b) = child(root, "clock").or_else(|| child(root, "devices")) {
        edits.insert(b.range().start, format!("{el}{nl}{ind}"));
    } else if let Some(last) = root.last_element_child() {
        edits.insert(last.range().end, format!("{nl}{ind}{el}"));
    } else if let Some(end) = end_tag_start(text, root) {
        edits.insert(end, format!("{ind}{el}{nl}"));
    } else {
        return Err("the <domain> element is empty; cannot add a <cpu> to it".into());
    }
    Ok(())
}

fn indent_step(text: &str, root: Node<'_, '_>, ind: &str) -> String {
    let own = line_indent(text, root.range().start);
    ind.strip_prefix(own)
        .filter(|s| !s.is_empty())
        .unwrap_or("  ")
        .to_string()
}

fn model_markup(m: &DesiredModel<'_, '_>, q: char) -> String {
    match &m.fallback {
        Some(fb) => format!(
            "<model fallback={q}{}{q}>{}</model>",
            escape_attr(fb),
            escape_text(&m.text)
        ),
        None => format!("<model>{}</model>", escape_text(&m.text)),
    }
}

/// A new `<cpu>`'s start tag (without its closing `>` or `/>`).
fn new_start_tag(attrs: &[(String, String)], q: char) -> String {
    let mut s = String::from("<cpu");
    for (n, v) in attrs {
        let _ = write!(s, " {n}={q}{}{q}", escape_attr(v));
    }
    s
}

/// The first `<cpu>`'s start tag (without its closing `>` or `/>`) carrying `attrs`: kept
/// attributes keep their bytes, changed ones get a new value, removed ones go with the whitespace
/// before them, new ones are appended.
fn start_tag_with(text: &str, f: Node<'_, '_>, attrs: &[(String, String)], q: char) -> String {
    let base = f.range().start;
    let end = start_tag_attr_end(text, f);
    let mut e = Edits::new();
    for a in f.attributes().filter(|a| a.namespace().is_none()) {
        match attrs.iter().find(|(n, _)| n == a.name()) {
            Some((_, v)) if v == a.value() => {}
            Some((_, v)) => e.replace(
                a.range_value().start - base..a.range_value().end - base,
                escape_attr(v),
            ),
            None => {
                let r = a.range();
                let ws = text[..r.start].len() - text[..r.start].trim_end().len();
                e.delete(r.start - ws - base..r.end - base);
            }
        }
    }
    let mut tail = String::new();
    for (n, v) in attrs {
        if !f
            .attributes()
            .any(|a| a.name() == n && a.namespace().is_none())
        {
            let _ = write!(tail, " {n}={q}{}{q}", escape_attr(v));
        }
    }
    e.insert(end - base, tail);
    e.apply(&text[base..end])
        .unwrap_or_else(|_| text[base..end].to_string())
}
