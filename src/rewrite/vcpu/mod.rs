//! The `vcpu.*` keys of a plan: the vCPU maximum, and everything that must follow it —
//! `<topology>`, `<vcpus>`, NUMA cells, and on x86 above 255 vCPUs the IOMMU and split I/O APIC.
//!
//! A dynamically scalable guest needs a maximum above its current count so vCPUs can be
//! hot-plugged while it runs. libvirt refuses a maximum above the machine type's limit, a topology
//! whose product differs from the maximum, and more than 255 x86 vCPUs without q35, an Intel IOMMU
//! in extended interrupt mode and a split I/O APIC (libvirt 9.0, DESIGN.md section 6). The steps,
//! in order: read the counts ([`read_counts`]), the maximum the rule asks for clamped to what the
//! host runs ([`target_maximum`]), the x86 rule above 255 vCPUs ([`x86_xapic_rule`], [`add_iommu`]),
//! then the new maximum in `<vcpu>` ([`set_vcpu_max`]) and what follows it ([`reshape_topology`],
//! [`regenerate_vcpus`], [`numa_cover`]). `current` is never lowered.

use crate::change::{Action, Change, Notes};
use crate::domain::Domain;
use crate::domain_facts::{DomainFacts, VersionRule};
use crate::edit::{
    Edits, Item, append_child, child_indent, document_quote, line_indent, newline, node_with_line,
    render_element, start_tag_attr_end, with_attrs,
};
use crate::finding::{Code, Finding};
use crate::libvirt::arch::is_x86;
use crate::machine::is_q35;
use crate::policy::{IommuStrategy, Plan, Ruled, TopologyStrategy, VcpuMax};
use crate::topology::{
    Topology, VcpuCount, X86_XAPIC_LIMIT, format_cpuset, parse_cpuset, read_vcpu,
};
use crate::xml::{child, is_libvirt_element, written_attributes};
use roxmltree::Node;
use std::collections::BTreeSet;

/// What the vCPU rules decided.
#[derive(Debug, Default)]
pub(crate) struct VcpuResult {
    /// Splices outside `<cpu>`: `<vcpu>`, `<vcpus>`, `<features>`, `<devices>`.
    pub(crate) edits: Edits,
    /// New markup for the `<topology>` that stays in `<cpu>`.
    pub(crate) topology_markup: Option<String>,
    /// New markup for the `<numa>` that stays in `<cpu>`.
    pub(crate) numa_markup: Option<String>,
    /// Changes with their rules; findings (clamps are warnings, impossible requests errors).
    pub(crate) notes: Notes,
}

/// The topology reshaped to hold exactly `max` vCPUs: `sockets` keeps the per-socket shape when
/// `max` is a multiple of it, else sockets = max and the rest 1; `cores` does the same with
/// cores; `keep` gives None when the product is not `max`.
#[must_use]
pub fn reshape(t: &Topology, max: u32, strategy: TopologyStrategy) -> Option<Topology> {
    if t.product() == u64::from(max) {
        return Some(*t);
    }
    // The dimension that grows, and the product of the others.
    let (per, with): (u64, fn(Topology, u32) -> Topology) = match strategy {
        TopologyStrategy::Keep => return None,
        TopologyStrategy::Sockets => (t.product() / u64::from(t.sockets), |t, n| Topology {
            sockets: n,
            ..t
        }),
        TopologyStrategy::Cores => (t.product() / u64::from(t.cores), |t, n| Topology {
            cores: n,
            ..t
        }),
    };
    let max64 = u64::from(max);
    Some(if max64 % per == 0 {
        with(*t, u32::try_from(max64 / per).ok()?)
    } else {
        with(Topology::ONE, max)
    })
}

/// Apply `vcpu.*` of the plan to the domain. `topology` and `numa` are the nodes that remain in
/// the merged `<cpu>` (possibly from a later `<cpu>` element).
///
/// Each key is a rule of its own about the document as it stands: `vcpu.max` changes the maximum
/// the others work from; `vcpu.topology` makes `<topology>` hold the maximum, new or not;
/// `vcpu.iommu = "auto"` adds what more than 255 x86 vCPUs need on q35, new or not. `<vcpus>`
/// and NUMA cells follow a new maximum and a reshaped topology alike.
pub(crate) fn apply(
    dom: &Domain<'_>,
    plan: &Plan,
    facts: &DomainFacts<'_>,
    topology: Option<Node<'_, '_>>,
    numa: Option<Node<'_, '_>>,
) -> VcpuResult {
    let mut r = VcpuResult::default();
    let Some(rule) = vcpu_rule(plan) else {
        return r;
    };
    let text = dom.text;
    let q = document_quote(text, &dom.doc);
    let Some((vcpu_node, count)) = read_counts(dom, plan, rule, &mut r.notes) else {
        return r;
    };
    let max = match &plan.vcpu_max {
        Some(want) => match target_maximum(dom, want, facts, &mut r.notes) {
            Some(max) => max,
            None => return r,
        },
        None => count.max,
    };
    let (max, need_iommu) = x86_xapic_rule(dom, plan, facts, max, &mut r.notes);
    if count.current > max {
        r.notes.finding(Finding::error(
            Code::VcpuCurrent,
            format!("current vCPU count {} is above the new maximum {max}: libvirt says \"maximum vCPU count must not be less than current vCPU count\"", count.current),
            "lower <vcpu current> or raise vcpu.max",
        ).rule(rule));
        return r;
    }
    let iommu_rule = plan.iommu.as_ref().map_or(rule, |i| i.rule.as_str());
    let auto = facts.applies(VersionRule::AutoIommu);
    if need_iommu && !add_iommu(dom, q, iommu_rule, auto, &mut r) {
        return r;
    }
    let new_max = max != count.max;
    if let (true, Some(node)) = (new_max, vcpu_node) {
        set_vcpu_max(text, node, count, max, q, rule, &mut r);
    }
    let mut reshaped = false;
    if let Some(t) = topology.filter(|_| new_max || plan.topology.is_some()) {
        let clusters = facts.applies(VersionRule::Clusters);
        match reshape_topology(dom, plan, (t, clusters), max, q, rule, &mut r) {
            Some(changed) => reshaped = changed,
            None => return r,
        }
    }
    if new_max || reshaped {
        let follow_rule = if new_max {
            rule
        } else {
            plan.topology.as_ref().map_or(rule, |t| t.rule.as_str())
        };
        if let Some(list) = child(dom.root(), "vcpus") {
            regenerate_vcpus(text, list, max, count.current, q, follow_rule, &mut r);
        }
        if let Some(n) = numa {
            numa_cover(text, n, max, q, follow_rule, &mut r);
        }
    }
    r
}

/// The rule named in messages about the vCPU counts: `vcpu.max`'s, else `vcpu.topology`'s, else
/// `vcpu.iommu`'s; None when the plan has no `vcpu.*` key.
fn vcpu_rule(plan: &Plan) -> Option<&str> {
    plan.vcpu_max
        .as_ref()
        .map(|s| s.rule.as_str())
        .or_else(|| plan.topology.as_ref().map(|s| s.rule.as_str()))
        .or_else(|| plan.iommu.as_ref().map(|s| s.rule.as_str()))
}

/// `<vcpu>` and the current count libvirt uses: with a `<vcpus>` list, the number of its enabled
/// entries (libvirt ignores `current` then). Without `<vcpu>` the guest has libvirt's default of
/// one vCPU, but `vcpu.max` has no current count to keep (an error). None, with an error
/// finding, when `<vcpu>` is not a number.
fn read_counts<'a, 't>(
    dom: &'a Domain<'t>,
    plan: &Plan,
    rule: &str,
    n: &mut Notes,
) -> Option<(Option<Node<'a, 't>>, VcpuCount)> {
    let root = dom.root();
    let Some(vcpu_node) = child(root, "vcpu") else {
        if plan.vcpu_max.is_none() {
            let one = VcpuCount {
                max: 1,
                current: 1,
                current_written: false,
            };
            return Some((None, one));
        }
        n.finding(
            Finding::error(
                Code::VcpuMissing,
                "the domain has no <vcpu> element; there is no current count to keep",
                "add <vcpu current='N'>MAX</vcpu>",
            )
            .rule(rule),
        );
        return None;
    };
    let c = match read_vcpu(vcpu_node) {
        Ok(c) => c,
        Err(m) => {
            n.finding(Finding::error(Code::VcpuInvalid, m, "write a positive integer").rule(rule));
            return None;
        }
    };
    let Some(list) = child(root, "vcpus") else {
        return Some((Some(vcpu_node), c));
    };
    let enabled = list
        .children()
        .filter(|e| is_libvirt_element(*e, "vcpu") && e.attribute("enabled") == Some("yes"))
        .filter(|e| {
            e.attribute("id")
                .and_then(|v| v.trim().parse::<u32>().ok())
                .is_some_and(|id| id < c.max)
        })
        .count();
    let current = u32::try_from(enabled).unwrap_or(c.current).max(1);
    Some((Some(vcpu_node), VcpuCount { current, ..c }))
}

/// The maximum `vcpu.max` asks for, clamped to the machine type's limit and, for KVM, KVM's
/// (warnings that name both numbers and their sources). None, with an error finding, when the
/// host CPU count or the machine type's limit is unknown.
fn target_maximum(
    dom: &Domain<'_>,
    want: &Ruled<VcpuMax>,
    facts: &DomainFacts<'_>,
    n: &mut Notes,
) -> Option<u32> {
    let rule = want.rule.as_str();
    let (arch, vt) = (dom.arch(), dom.virt_type());
    let requested = match want.value {
        VcpuMax::Count(c) => Some(c),
        VcpuMax::Machine => None,
        VcpuMax::Host => match &facts.host_cpus {
            Some(c) => Some(c.value),
            None => {
                n.finding(
                    Finding::error(
                        Code::HostCpusUnknown,
                        "vcpu.max = \"host\" but the host's CPU count is unknown",
                        "give --host-cpus N or [host] cpus",
                    )
                    .rule(rule),
                );
                return None;
            }
        },
    };
    // A count every machine type of the family allows needs no exact limit (an alias such as
    // `pc`, whose version the built-in table cannot know): nothing to clamp.
    let floor = crate::machine::family_floor(arch, dom.machine());
    if let (None, Some(c), Some(f)) = (&facts.machine_limit, requested, floor) {
        if c <= f {
            return Some(clamp_to_kvm(c, vt, facts, rule, n));
        }
    }
    let Some(limit) = &facts.machine_limit else {
        let machine = if dom.machine().is_empty() {
            "(none given)"
        } else {
            dom.machine()
        };
        n.finding(Finding::error(
            Code::MachineUnknown,
            format!("the vCPU limit of machine type '{machine}' ({arch}, {vt}) is found nowhere: not in the capabilities given, libvirt's QEMU capability cache, nor the built-in table"),
            "give the host's capabilities with --caps (virsh capabilities > FILE) or use a versioned machine type",
        ).rule(rule));
        return None;
    };
    let mut max = requested.unwrap_or(limit.max_cpus);
    if max > limit.max_cpus {
        let what = format!(
            "vCPU maximum {max} clamped to {}: machine type {} allows {} (from {})",
            limit.max_cpus, limit.machine, limit.max_cpus, limit.source
        );
        n.finding(Finding::warning(Code::VcpuClamped, what, "").rule(rule));
        max = limit.max_cpus;
    }
    Some(clamp_to_kvm(max, vt, facts, rule, n))
}

/// `max`, or KVM's limit when it is lower (for `kvm` guests), with a warning naming both.
fn clamp_to_kvm(max: u32, vt: &str, facts: &DomainFacts<'_>, rule: &str, n: &mut Notes) -> u32 {
    match (&facts.kvm_limit, vt) {
        (Some(k), "kvm") if max > k.value => {
            let what = format!(
                "vCPU maximum {max} clamped to {}: KVM allows {} (from {})",
                k.value, k.value, k.source
            );
            n.finding(Finding::warning(Code::VcpuClamped, what, "").rule(rule));
            k.value
        }
        _ => max,
    }
}

/// More than 255 x86 vCPUs need q35 and an IOMMU in extended interrupt mode. A maximum `vcpu.max`
/// asks for is clamped to 255 on another machine type, or under `vcpu.iommu = "never"`; a
/// maximum the domain already has is not lowered (validation says why it cannot start). Returns
/// the maximum and whether the IOMMU must be added: under `vcpu.iommu = "auto"`, which is also
/// what `vcpu.max` implies when `vcpu.iommu` is not given.
fn x86_xapic_rule(
    dom: &Domain<'_>,
    plan: &Plan,
    facts: &DomainFacts<'_>,
    max: u32,
    n: &mut Notes,
) -> (u32, bool) {
    if !is_x86(dom.arch()) || max <= X86_XAPIC_LIMIT {
        return (max, false);
    }
    let machine = facts
        .machine_limit
        .as_ref()
        .map_or(dom.machine(), |l| l.machine.as_str());
    let asked = plan.vcpu_max.as_ref();
    let iommu = plan.iommu.as_ref();
    if !is_q35(machine) && !is_q35(dom.machine()) {
        if let Some(want) = asked {
            n.finding(Finding::warning(Code::VcpuClamped, format!("vCPU maximum {max} clamped to {X86_XAPIC_LIMIT}: more than 255 vCPUs are only supported on q35-based machine types, and this guest's is {}", dom.machine()), "use a q35 machine type to go higher").rule(&want.rule));
            return (X86_XAPIC_LIMIT, false);
        }
        return (max, false);
    }
    match (iommu.map(|i| i.value), asked) {
        (Some(IommuStrategy::Never), Some(_)) => {
            let rule = iommu.map_or("", |i| i.rule.as_str());
            n.finding(Finding::warning(Code::VcpuClamped, format!("vCPU maximum {max} clamped to {X86_XAPIC_LIMIT}: vcpu.iommu = \"never\", and more than 255 vCPUs need an IOMMU in extended interrupt mode"), "").rule(rule));
            (X86_XAPIC_LIMIT, false)
        }
        (Some(IommuStrategy::Auto), _) | (None, Some(_)) => (max, true),
        _ => (max, false),
    }
}

/// `<vcpu>`: the maximum changes, `current` stays (written out when it was implicit).
fn set_vcpu_max(
    text: &str,
    vcpu_node: Node<'_, '_>,
    count: VcpuCount,
    max: u32,
    q: char,
    rule: &str,
    r: &mut VcpuResult,
) {
    let mut e = Edits::new();
    let base = vcpu_node.range().start;
    if let Some(t) = vcpu_node.children().find(Node::is_text) {
        e.replace(
            t.range().start - base..t.range().end - base,
            max.to_string(),
        );
    }
    let with_text = e.apply(&text[vcpu_node.range()]).unwrap_or_default();
    let (new_vcpu, current_added) = match roxmltree::Document::parse(&with_text) {
        Ok(d) if !count.current_written => {
            let current = count.current.to_string();
            let markup = with_attrs(&with_text, d.root_element(), &[("current", &current)], q);
            (markup, true)
        }
        _ => (with_text, false),
    };
    r.edits.replace(vcpu_node.range(), new_vcpu);
    let what = format!(
        "<vcpu>: maximum {} -> {max}, current {} kept",
        count.max, count.current
    );
    r.notes.change(
        Change::new(rule, Action::Set, "vcpu", what)
            .old(Some(count.max.to_string()))
            .new_value(max.to_string()),
    );
    if current_added {
        let what = format!(
            "<vcpu current='{}'> written: without it the current count would follow the maximum",
            count.current
        );
        r.notes.change(
            Change::new(rule, Action::Add, "vcpu", what)
                .attribute("current")
                .new_value(count.current.to_string()),
        );
    }
}

/// `<topology>` reshaped by `vcpu.topology` (default `sockets`) to hold the maximum; `clusters`
/// is never added on x86. Returns whether it changed, or None when `keep` cannot hold the maximum
/// (an error finding; nothing else follows).
fn reshape_topology(
    dom: &Domain<'_>,
    plan: &Plan,
    (t, clusters): (Node<'_, '_>, bool),
    max: u32,
    q: char,
    rule: &str,
    r: &mut VcpuResult,
) -> Option<bool> {
    let topo_rule = plan.topology.as_ref().map_or(rule, |s| s.rule.as_str());
    let topo = match Topology::read(t, clusters) {
        Ok(t) => t,
        Err(why) => {
            let fix = "give <topology> sockets, cores and threads as positive integers";
            r.notes
                .finding(Finding::error(Code::TopologyInvalid, why, fix).rule(rule));
            return Some(false);
        }
    };
    let strategy = plan
        .topology
        .as_ref()
        .map_or(TopologyStrategy::Sockets, |s| s.value);
    let Some(new) = reshape(&topo, max, strategy) else {
        r.notes.finding(Finding::error(
            Code::TopologyMismatch,
            format!("vcpu.topology = \"keep\" but <topology> {} holds {} vCPUs, not {max} (libvirt: \"CPU topology doesn't match maximum vcpu count\")", topo.describe(), topo.product()),
            "use vcpu.topology = \"sockets\" or \"cores\", or a maximum the topology holds",
        ).rule(topo_rule));
        return None;
    };
    if new == topo {
        return Some(false);
    }
    let x86 = is_x86(dom.arch());
    let mut set: Vec<(&str, String)> = vec![("sockets", new.sockets.to_string())];
    for (name, v, old) in [
        ("dies", new.dies, topo.dies),
        ("clusters", new.clusters, topo.clusters),
        ("cores", new.cores, topo.cores),
        ("threads", new.threads, topo.threads),
    ] {
        let written = t.attribute(name).is_some();
        // A libvirt that does not read clusters leaves the attribute as written; on x86 it is
        // never added.
        if name == "clusters" && (!clusters || (x86 && !written)) {
            continue;
        }
        if written || v != old || (name != "clusters" && v != 1) {
            set.push((name, v.to_string()));
        }
    }
    let a: Vec<(&str, &str)> = set.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let markup = with_attrs(dom.text, t, &a, q);
    let (was, now) = (written_attributes(t), markup_attributes(&markup));
    r.topology_markup = Some(markup);
    let what = format!("<topology>: {was} -> {now} ({max} vCPUs)");
    r.notes.change(
        Change::new(topo_rule, Action::Set, "topology", what)
            .old(Some(was))
            .new_value(now),
    );
    Some(true)
}

/// [`written_attributes`] of the element `markup` (one element, as [`with_attrs`] writes it);
/// the markup itself when it does not parse alone (a prefix declared further up).
fn markup_attributes(markup: &str) -> String {
    roxmltree::Document::parse(markup).map_or_else(
        |_| markup.to_string(),
        |d| written_attributes(d.root_element()),
    )
}

/// `<vcpus>`: entries past the new maximum leave, new ids are added disabled and hotpluggable;
/// when the list could not stay consistent (vCPU 0 enabled and not hotpluggable, the enabled count
/// the current count), it is dropped with a warning and libvirt rebuilds it.
fn regenerate_vcpus(
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
fn numa_cover(text: &str, numa: Node<'_, '_>, max: u32, q: char, rule: &str, r: &mut VcpuResult) {
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

/// Make the domain able to run more than 255 x86 vCPUs: an Intel IOMMU with interrupt remapping
/// and extended interrupt mode, and a split I/O APIC. Where libvirt fills in what is missing
/// itself (`auto`: [`VersionRule::AutoIommu`], 10.10.0 and later) only what is written against it
/// is changed (`eim='off'`, an I/O APIC of another driver). Returns false (with an error finding)
/// when an IOMMU of another model is already there, or there is no `<devices>` to add it to.
fn add_iommu(dom: &Domain<'_>, q: char, rule: &str, auto: bool, r: &mut VcpuResult) -> bool {
    let devices = child(dom.root(), "devices");
    let done = match (devices.and_then(|d| child(d, "iommu")), devices) {
        (Some(i), _) => intel_iommu_eim(dom.text, i, q, rule, auto, r),
        (None, _) if auto => true,
        (None, Some(devs)) => {
            add_intel_iommu(dom.text, devs, q, rule, r);
            true
        }
        (None, None) => {
            r.notes.finding(
                Finding::error(
                    Code::IommuNoDevices,
                    "more than 255 vCPUs need an IOMMU, but the domain has no <devices>",
                    "add <devices>",
                )
                .rule(rule),
            );
            false
        }
    };
    if done {
        split_ioapic(dom, q, rule, auto, r);
    }
    done
}

/// An existing IOMMU must be Intel's with `intremap` and `eim` on (under `auto`, libvirt switches
/// on what is not written); another model cannot do eim.
fn intel_iommu_eim(
    text: &str,
    i: Node<'_, '_>,
    q: char,
    rule: &str,
    auto: bool,
    r: &mut VcpuResult,
) -> bool {
    let model = i.attribute("model").unwrap_or("");
    if model != "intel" {
        r.notes.finding(Finding::error(
            Code::IommuModel,
            format!("more than 255 vCPUs need an Intel IOMMU in extended interrupt mode, but the domain has <iommu model='{model}'>, which cannot do eim"),
            "replace the IOMMU with <iommu model='intel'>, or set vcpu.iommu = \"never\"",
        ).rule(rule));
        return false;
    }
    let driver = child(i, "driver");
    let written: Vec<(&'static str, Option<&str>)> = ["intremap", "eim"]
        .into_iter()
        .map(|a| (a, driver.and_then(|d| d.attribute(a))))
        .collect();
    if written
        .iter()
        .all(|(_, v)| *v == Some("on") || (auto && v.is_none()))
    {
        return true;
    }
    // Both are written `on` (under `auto` too: one edit, and libvirt's value anyway).
    let wrong = written.into_iter().filter(|(_, v)| *v != Some("on"));
    if let Some(d) = driver {
        r.edits.replace(
            d.range(),
            with_attrs(text, d, &[("intremap", "on"), ("eim", "on")], q),
        );
        for (a, old) in wrong {
            let what = format!(
                "<iommu model='intel'><driver {a}='on'> set (more than 255 vCPUs need interrupt remapping in extended interrupt mode)"
            );
            r.notes.change(
                Change::new(rule, Action::Set, "driver", what)
                    .attribute(a)
                    .old(old)
                    .new_value("on"),
            );
        }
    } else {
        let markup = format!("<driver intremap={q}on{q} eim={q}on{q}/>");
        append_child(&mut r.edits, text, i, &markup);
        let what =
            "<iommu model='intel'>: <driver intremap='on' eim='on'/> added (more than 255 vCPUs)";
        r.notes.change(
            Change::new(rule, Action::Add, "driver", what).new_value("intremap='on' eim='on'"),
        );
    }
    true
}

fn add_intel_iommu(text: &str, devs: Node<'_, '_>, q: char, rule: &str, r: &mut VcpuResult) {
    let nl = newline(text);
    let cind = child_indent(text, devs);
    let step = cind
        .strip_prefix(line_indent(text, devs.range().start))
        .filter(|s| !s.is_empty())
        .unwrap_or("  ");
    let markup = format!(
        "<iommu model={q}intel{q}>{nl}{cind}{step}<driver intremap={q}on{q} eim={q}on{q}/>{nl}{cind}</iommu>"
    );
    append_child(&mut r.edits, text, devs, &markup);
    r.notes.change(Change::new(rule, Action::Add, "iommu", "<iommu model='intel'> with <driver intremap='on' eim='on'/> added (libvirt: \"more than 255 vCPUs require extended interrupt mode enabled on the iommu device\")").new_value("intel"));
}

/// `<features><ioapic driver='qemu'/>`: interrupt remapping needs the split I/O APIC (under
/// `auto` libvirt adds it where none is written).
fn split_ioapic(dom: &Domain<'_>, q: char, rule: &str, auto: bool, r: &mut VcpuResult) {
    let (text, root) = (dom.text, dom.root());
    let features = child(root, "features");
    let ioapic = features.and_then(|f| child(f, "ioapic"));
    let change = |action, what: &str, old: Option<&str>| {
        Change::new(rule, action, "ioapic", what)
            .attribute("driver")
            .old(old)
            .new_value("qemu")
    };
    match ioapic {
        Some(io) if io.attribute("driver") == Some("qemu") => {}
        Some(io) => {
            r.edits
                .replace(io.range(), with_attrs(text, io, &[("driver", "qemu")], q));
            r.notes.change(change(Action::Set, "<ioapic driver='qemu'/> set (libvirt: \"IOMMU interrupt remapping requires split I/O APIC\")", io.attribute("driver")));
        }
        None if auto => {}
        None => {
            let markup = format!("<ioapic driver={q}qemu{q}/>");
            match features {
                Some(f) => append_child(&mut r.edits, text, f, &markup),
                None => add_features_element(dom, &markup, &mut r.edits),
            }
            r.notes.change(change(Action::Add, "<features><ioapic driver='qemu'/> added (libvirt: \"IOMMU interrupt remapping requires split I/O APIC\")", None));
        }
    }
}

/// A new `<features>` holding `markup`, after `<os>` where libvirt writes it.
fn add_features_element(dom: &Domain<'_>, markup: &str, edits: &mut Edits) {
    let (text, root) = (dom.text, dom.root());
    let nl = newline(text);
    let ind = child_indent(text, root);
    let cind = format!(
        "{ind}{}",
        ind.strip_prefix(line_indent(text, root.range().start))
            .filter(|s| !s.is_empty())
            .unwrap_or("  ")
    );
    let el = format!("<features>{nl}{cind}{markup}{nl}{ind}</features>");
    match child(root, "os") {
        Some(os) => edits.insert(os.range().end, format!("{nl}{ind}{el}")),
        None => append_child(edits, text, root, &el),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reshapes() {
        let t = Topology {
            cores: 2,
            ..Topology::ONE
        };
        assert_eq!(
            reshape(&t, 8, TopologyStrategy::Sockets).unwrap().sockets,
            4
        );
        let t3 = Topology {
            cores: 3,
            ..Topology::ONE
        };
        let r = reshape(&t3, 8, TopologyStrategy::Sockets).unwrap();
        assert_eq!((r.sockets, r.cores), (8, 1));
        let r = reshape(&t, 8, TopologyStrategy::Cores).unwrap();
        assert_eq!((r.sockets, r.cores), (1, 8));
        assert!(reshape(&t, 8, TopologyStrategy::Keep).is_none());
        assert_eq!(reshape(&t, 2, TopologyStrategy::Keep), Some(t));
    }
}
