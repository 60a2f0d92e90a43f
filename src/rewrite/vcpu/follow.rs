//! What follows a new vCPU maximum or a reshaped topology: the `<vcpus>` list and the NUMA
//! cells, kept what libvirt accepts.

use super::VcpuResult;
use crate::change::{Action, Change};
use crate::edit::{
    Edits, Item, child_indent, line_indent, node_with_line, render_element, start_tag_attr_end,
    with_attrs,
};
use crate::finding::{Code, Finding};
use crate::topology::{format_cpuset, parse_cpuset};
use crate::xml::is_libvirt_element;
use roxmltree::Node;
use std::collections::BTreeSet;

/// `<vcpus>`: entries past the new maximum leave, new ids are added disabled and hotpluggable;
/// when the list could not stay consistent (vCPU 0 enabled and not hotpluggable, the enabled count
/// the current count), it is dropped with a warning and libvirt rebuilds it.
pub(super) fn regenerate_vcpus(
    text: &str,
    list: Node<'_, '_>,
    max: u32,
    current: u32,
    q: char,
    rule: &str,
    r: &mut VcpuResult,
) {
    let entries: Vec<Node<'_, '_>> = list
        .children()
        .filter(|c| is_libvirt_element(*c, "vcpu"))
        .collect();
    let mut kept: Vec<(u32, Node<'_, '_>)> = Vec::new();
    for e in &entries {
        let Some(id) = e.attribute("id").and_then(|v| v.trim().parse::<u32>().ok()) else {
            r.notes.finding(Finding::warning(Code::VcpusDropped, "<vcpus> dropped: an entry has no valid id; libvirt rebuilds the list from <vcpu current>", "").rule(rule));
            r.edits.delete(node_with_line(text, list));
            return;
        };
        if id < max {
            kept.push((id, *e));
        }
    }
    let known: BTreeSet<u32> = kept.iter().map(|(i, _)| *i).collect();
    let added: BTreeSet<u32> = (0..max).filter(|i| !known.contains(i)).collect();
    let consistent = vcpus_consistent(&kept, &known, current);
    if consistent && added.is_empty() && kept.len() == entries.len() {
        // The list already holds exactly 0..max-1 (a reshaped topology keeps the ids).
        return;
    }
    if !consistent {
        r.notes.finding(Finding::warning(
            Code::VcpusDropped,
            format!("<vcpus> dropped: after the maximum change it would not have vCPU 0 enabled and not hotpluggable with {current} enabled; libvirt rebuilds the list from <vcpu current>"),
            "",
        ).rule(rule));
        r.edits.delete(node_with_line(text, list));
        r.notes.change(Change::new(
            rule,
            Action::Remove,
            "vcpus",
            "<vcpus> removed (libvirt regenerates it)",
        ));
        return;
    }
    r.edits
        .replace(list.range(), rebuilt_vcpus(text, list, &kept, &added, q));
    // One `set` of the list's ids, old and new: the `<vcpus>` element stays, its entries change.
    let before: BTreeSet<u32> = entries
        .iter()
        .filter_map(|e| e.attribute("id")?.trim().parse::<u32>().ok())
        .collect();
    let after: BTreeSet<u32> = known.union(&added).copied().collect();
    let gone = entries.len() - kept.len();
    let what = match (added.len(), gone) {
        (a, 0) => format!("<vcpus>: {a} vCPU entry(ies) added, disabled and hotpluggable"),
        (0, g) => format!("<vcpus>: {g} vCPU entry(ies) past the new maximum removed"),
        (a, g) => format!("<vcpus>: {a} vCPU entry(ies) added, {g} past the new maximum removed"),
    };
    r.notes.change(
        Change::new(rule, Action::Set, "vcpus", what)
            .old(Some(format_cpuset(&before)))
            .new_value(format_cpuset(&after)),
    );
}

/// `<vcpus>` with the `kept` entries as written and the `added` ids, disabled and hotpluggable.
fn rebuilt_vcpus(
    text: &str,
    list: Node<'_, '_>,
    kept: &[(u32, Node<'_, '_>)],
    added: &BTreeSet<u32>,
    q: char,
) -> String {
    let mut items: Vec<Item> = list
        .children()
        .filter(|c| !(c.is_text() && text[c.range()].trim().is_empty()))
        .filter(|c| !is_libvirt_element(*c, "vcpu") || kept.iter().any(|(_, e)| e == c))
        .map(|c| Item::Verbatim(c.range()))
        .collect();
    for id in added {
        items.push(Item::Markup(format!(
            "<vcpu id={q}{id}{q} enabled={q}no{q} hotpluggable={q}yes{q}/>"
        )));
    }
    let start_tag = &text[list.range().start..start_tag_attr_end(text, list)];
    let ind = line_indent(text, list.range().start);
    let cind = child_indent(text, list);
    render_element(text, "vcpus", start_tag, &items, ind, &cind)
}

/// The kept `<vcpus>` entries are what libvirt accepts: `current` of them enabled, vCPU 0 enabled
/// and not hotpluggable, no id twice.
fn vcpus_consistent(kept: &[(u32, Node<'_, '_>)], known: &BTreeSet<u32>, current: u32) -> bool {
    let enabled = kept
        .iter()
        .filter(|(_, e)| e.attribute("enabled") == Some("yes"))
        .count();
    let first_ok = kept.iter().any(|(i, e)| {
        *i == 0
            && e.attribute("enabled") == Some("yes")
            && e.attribute("hotpluggable") != Some("yes")
    });
    u32::try_from(enabled).ok() == Some(current) && first_ok && known.len() == kept.len()
}

/// NUMA cells cover 0..max-1: new vCPUs join the last cell; ids past the maximum leave.
pub(super) fn numa_cover(
    text: &str,
    numa: Node<'_, '_>,
    max: u32,
    q: char,
    rule: &str,
    r: &mut VcpuResult,
) {
    let cells: Vec<Node<'_, '_>> = numa
        .children()
        .filter(|c| is_libvirt_element(*c, "cell"))
        .collect();
    if cells.is_empty() {
        return;
    }
    let limit = max.saturating_add(1 << 16);
    let mut sets = Vec::new();
    for c in &cells {
        match c.attribute("cpus").map(|v| parse_cpuset(v, limit)) {
            Some(Some(s)) => sets.push(s),
            None => sets.push(BTreeSet::new()),
            Some(None) => {
                let v = c.attribute("cpus").unwrap_or("");
                r.notes.finding(
                    Finding::error(
                        Code::NumaInvalid,
                        format!("NUMA cell cpus='{v}' is not a valid cpuset"),
                        "fix the cell's cpus",
                    )
                    .rule(rule),
                );
                return;
            }
        }
    }
    let covered: BTreeSet<u32> = sets.iter().flatten().copied().collect();
    let mut new_sets = sets.clone();
    for s in &mut new_sets {
        s.retain(|i| *i < max);
    }
    let last = new_sets.len() - 1;
    new_sets[last].extend((0..max).filter(|i| !covered.contains(i)));
    if new_sets == sets {
        return;
    }
    if let Some(i) = (0..sets.len()).find(|i| new_sets[*i].is_empty() && !sets[*i].is_empty()) {
        r.notes.finding(
            Finding::error(
                Code::NumaCellEmpty,
                format!("NUMA cell {i} would have no vCPU left under the new maximum {max}"),
                "raise vcpu.max or reshape the NUMA cells",
            )
            .rule(rule),
        );
        return;
    }
    rewrite_cells(text, numa, &cells, (&sets, &new_sets), q, rule, r);
}

/// The cells whose set changed get their new `cpus` (one change each, named by the cell's `id`);
/// the rest of `<numa>` is copied as it is.
fn rewrite_cells(
    text: &str,
    numa: Node<'_, '_>,
    cells: &[Node<'_, '_>],
    (sets, new_sets): (&[BTreeSet<u32>], &[BTreeSet<u32>]),
    q: char,
    rule: &str,
    r: &mut VcpuResult,
) {
    let base = numa.range().start;
    let covers = new_sets.iter().flatten().max().copied().unwrap_or(0);
    let mut e = Edits::new();
    let mut changes = Vec::new();
    for (i, c) in cells.iter().enumerate() {
        if new_sets[i] == sets[i] {
            continue;
        }
        let cpus = format_cpuset(&new_sets[i]);
        e.replace(
            c.range().start - base..c.range().end - base,
            with_attrs(text, *c, &[("cpus", &cpus)], q),
        );
        let id = c
            .attribute("id")
            .map_or_else(|| i.to_string(), str::to_string);
        let old = c.attribute("cpus");
        let what = format!(
            "<numa><cell id='{id}'>: cpus '{}' -> '{cpus}' (the cells cover vCPUs 0-{covers}; new vCPUs join the last cell)",
            old.unwrap_or("")
        );
        changes.push(
            Change::new(rule, Action::Set, "cell", what)
                .name(&id)
                .attribute("cpus")
                .old(old)
                .new_value(cpus),
        );
    }
    if let Ok(m) = e.apply(&text[numa.range()]) {
        r.numa_markup = Some(m);
        for c in changes {
            r.notes.change(c);
        }
    }
}
