//! The vCPU maximum, and everything that must follow it: `<topology>`, `<vcpus>`, NUMA cells, and
//! on x86 above 255 vCPUs the IOMMU and split I/O APIC.
//!
//! A dynamically scalable guest needs a maximum above its current count so vCPUs can be
//! hot-plugged while it runs. libvirt refuses a maximum above the machine type's limit, a topology
//! whose product differs from the maximum, and more than 255 x86 vCPUs without q35, an Intel IOMMU
//! in extended interrupt mode and a split I/O APIC (libvirt 9.0, DESIGN.md section 6). This module
//! computes the maximum the policy asks for, clamps it to what the host can run, and produces the
//! edits that keep everything else consistent with it. It never lowers `current`.

use crate::domain::{Domain, child, is_libvirt_element, text_of};
use crate::edit::{
    Edits, Item, append_child, child_indent, document_quote, line_indent, newline, render_element,
    with_attrs,
};
use crate::finding::Finding;
use crate::host::Host;
use crate::machine::is_q35;
use crate::policy::{IommuStrategy, Plan, TopologyStrategy, VcpuMax};
use crate::rewrite::Change;
use roxmltree::Node;
use std::collections::BTreeSet;

/// x86's vCPU count above which QEMU needs x2APIC IDs delivered through an IOMMU in extended
/// interrupt mode (libvirt: "more than 255 vCPUs require extended interrupt mode enabled on the
/// iommu device").
pub const X86_XAPIC_LIMIT: u32 = 255;

/// Parse a libvirt cpuset (`0-3,5,^2`) into the set of ids; None when malformed or over `limit`
/// ids (a hostile `0-4294967295` must not allocate).
#[must_use]
pub fn parse_cpuset(s: &str, limit: u32) -> Option<BTreeSet<u32>> {
    let mut set = BTreeSet::new();
    let mut minus = BTreeSet::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (neg, part) = match part.strip_prefix('^') {
            Some(p) => (true, p),
            None => (false, part),
        };
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse::<u32>().ok()?, b.trim().parse::<u32>().ok()?),
            None => {
                let n = part.parse::<u32>().ok()?;
                (n, n)
            }
        };
        if a > b || b >= limit {
            return None;
        }
        let target = if neg { &mut minus } else { &mut set };
        target.extend(a..=b);
    }
    Some(set.difference(&minus).copied().collect())
}

/// Format ids as a libvirt cpuset with ranges (`0-3,8`).
#[must_use]
pub fn format_cpuset(set: &BTreeSet<u32>) -> String {
    let mut parts = Vec::new();
    let mut it = set.iter().copied().peekable();
    while let Some(start) = it.next() {
        let mut end = start;
        while it.peek() == Some(&(end + 1)) {
            end += 1;
            it.next();
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    parts.join(",")
}

/// `<cpu><topology>` as numbers; missing attributes are 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Topology {
    /// `sockets`.
    pub sockets: u32,
    /// `dies`.
    pub dies: u32,
    /// `clusters` (libvirt >= 10.1; never written on x86).
    pub clusters: u32,
    /// `cores`.
    pub cores: u32,
    /// `threads`.
    pub threads: u32,
}

impl Topology {
    /// Read a `<topology>` element; None when an attribute is not a positive integer.
    #[must_use]
    pub fn read(node: Node<'_, '_>) -> Option<Topology> {
        let get = |n: &str| -> Option<u32> {
            match node.attribute(n) {
                None => Some(1),
                Some(v) => v.trim().parse::<u32>().ok().filter(|v| *v > 0),
            }
        };
        Some(Topology {
            sockets: get("sockets")?,
            dies: get("dies")?,
            clusters: get("clusters")?,
            cores: get("cores")?,
            threads: get("threads")?,
        })
    }

    /// sockets × dies × clusters × cores × threads (saturating).
    #[must_use]
    pub fn product(&self) -> u64 {
        [
            self.sockets,
            self.dies,
            self.clusters,
            self.cores,
            self.threads,
        ]
        .iter()
        .map(|v| u64::from(*v))
        .product()
    }

    /// The topology reshaped to hold exactly `max` vCPUs (issue rule 3): `sockets` keeps the
    /// per-socket shape when `max` is a multiple of it, else sockets = max and the rest 1; `cores`
    /// does the same with cores; `keep` gives None when the product is not `max`.
    #[must_use]
    pub fn reshape(&self, max: u32, strategy: TopologyStrategy) -> Option<Topology> {
        if self.product() == u64::from(max) {
            return Some(*self);
        }
        let ones = Topology {
            sockets: 1,
            dies: 1,
            clusters: 1,
            cores: 1,
            threads: 1,
        };
        match strategy {
            TopologyStrategy::Keep => None,
            TopologyStrategy::Sockets => {
                let per = u64::from(self.dies)
                    * u64::from(self.clusters)
                    * u64::from(self.cores)
                    * u64::from(self.threads);
                Some(if u64::from(max) % per == 0 {
                    Topology {
                        sockets: u32::try_from(u64::from(max) / per).ok()?,
                        ..*self
                    }
                } else {
                    Topology {
                        sockets: max,
                        ..ones
                    }
                })
            }
            TopologyStrategy::Cores => {
                let per = u64::from(self.sockets)
                    * u64::from(self.dies)
                    * u64::from(self.clusters)
                    * u64::from(self.threads);
                Some(if u64::from(max) % per == 0 {
                    Topology {
                        cores: u32::try_from(u64::from(max) / per).ok()?,
                        ..*self
                    }
                } else {
                    Topology { cores: max, ..ones }
                })
            }
        }
    }
}

/// What the vCPU part of the rewrite decided.
#[derive(Debug, Default)]
pub struct VcpuResult {
    /// Splices outside `<cpu>`: `<vcpu>`, `<vcpus>`, `<features>`, `<devices>`.
    pub edits: Edits,
    /// New markup for the `<topology>` that stays in `<cpu>`.
    pub topology_markup: Option<String>,
    /// New markup for the `<numa>` that stays in `<cpu>`.
    pub numa_markup: Option<String>,
    /// Changes, with their rules.
    pub changes: Vec<Change>,
    /// Findings (clamps are warnings; impossible requests are errors).
    pub findings: Vec<Finding>,
}

/// `<vcpu>`'s maximum and current count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VcpuCount {
    /// The element text: the maximum.
    pub max: u32,
    /// `current`, or the maximum when absent.
    pub current: u32,
    /// Whether `current` was written.
    pub current_written: bool,
}

/// Read `<vcpu>`; None when absent; Err(message) when not a number.
///
/// # Errors
/// A message naming the bad value.
pub fn read_vcpu(vcpu: Node<'_, '_>) -> Result<VcpuCount, String> {
    let t = text_of(vcpu).unwrap_or_default();
    let max: u32 = t
        .parse()
        .map_err(|_| format!("<vcpu> '{t}' is not a vCPU count"))?;
    let (current, current_written) = match vcpu.attribute("current") {
        Some(c) => (
            c.trim()
                .parse()
                .map_err(|_| format!("<vcpu current='{c}'> is not a vCPU count"))?,
            true,
        ),
        None => (max, false),
    };
    Ok(VcpuCount {
        max,
        current,
        current_written,
    })
}

fn change(rule: &str, what: impl Into<String>) -> Change {
    Change {
        rule: rule.to_string(),
        what: what.into(),
    }
}

/// Apply `vcpu.*` of the plan to the domain. `topology` and `numa` are the nodes that remain in
/// the merged `<cpu>` (possibly from a later `<cpu>` element).
#[must_use]
#[allow(clippy::too_many_lines)]
pub fn apply(
    dom: &Domain<'_>,
    plan: &Plan,
    host: &Host,
    topology: Option<Node<'_, '_>>,
    numa: Option<Node<'_, '_>>,
) -> VcpuResult {
    let mut r = VcpuResult::default();
    let Some(want) = &plan.vcpu_max else {
        return r;
    };
    let rule = want.rule.as_str();
    let text = dom.text;
    let q = document_quote(text, &dom.doc);
    let root = dom.root();
    let arch = dom.arch();
    let vt = dom.virt_type();
    let Some(vcpu_node) = child(root, "vcpu") else {
        r.findings.push(
            Finding::error(
                "vcpu-missing",
                "the domain has no <vcpu> element; there is no current count to keep",
                "add <vcpu current='N'>MAX</vcpu>",
            )
            .rule(rule),
        );
        return r;
    };
    let count = match read_vcpu(vcpu_node) {
        // With a <vcpus> list, libvirt counts its enabled entries as the current count.
        Ok(c) => match child(root, "vcpus") {
            Some(list) => {
                let enabled = list
                    .children()
                    .filter(|e| {
                        is_libvirt_element(*e, "vcpu") && e.attribute("enabled") == Some("yes")
                    })
                    .filter(|e| {
                        e.attribute("id")
                            .and_then(|v| v.trim().parse::<u32>().ok())
                            .is_some_and(|id| id < c.max)
                    })
                    .count();
                VcpuCount {
                    current: u32::try_from(enabled).unwrap_or(c.current).max(1),
                    ..c
                }
            }
            None => c,
        },
        Err(m) => {
            r.findings
                .push(Finding::error("vcpu-invalid", m, "write a positive integer").rule(rule));
            return r;
        }
    };
    let limit = host.machine_limit(arch, vt, dom.machine(), dom.emulator().as_deref());
    let mut max = match want.value {
        VcpuMax::Count(n) => n,
        VcpuMax::Host => match host.cpus() {
            Some(c) => c.value,
            None => {
                r.findings.push(
                    Finding::error(
                        "host-cpus-unknown",
                        "vcpu.max = \"host\" but the host's CPU count is unknown",
                        "give --host-cpus N or [host] cpus",
                    )
                    .rule(rule),
                );
                return r;
            }
        },
        VcpuMax::Machine => match &limit {
            Some(l) => l.max_cpus,
            None => 0,
        },
    };
    let Some(limit) = limit else {
        r.findings.push(
            Finding::error(
                "machine-unknown",
                format!(
                    "the vCPU limit of machine type '{}' ({arch}, {vt}) is found nowhere: not in the capabilities given, libvirt's QEMU capability cache, nor the built-in table",
                    if dom.machine().is_empty() { "(none given)" } else { dom.machine() }
                ),
                "give the host's capabilities with --caps (virsh capabilities > FILE) or use a versioned machine type",
            )
            .rule(rule),
        );
        return r;
    };
    let requested = max;
    if max > limit.max_cpus {
        r.findings.push(
            Finding::warning(
                "vcpu-clamped",
                format!(
                    "vCPU maximum {requested} clamped to {}: machine type {} allows {} (from {})",
                    limit.max_cpus, limit.machine, limit.max_cpus, limit.source
                ),
                "",
            )
            .rule(rule),
        );
        max = limit.max_cpus;
    }
    if vt == "kvm" {
        if let Some(k) = host.kvm_limit() {
            if max > k.value {
                r.findings.push(
                    Finding::warning(
                        "vcpu-clamped",
                        format!(
                            "vCPU maximum {max} clamped to {}: KVM allows {} (from {})",
                            k.value, k.value, k.source
                        ),
                        "",
                    )
                    .rule(rule),
                );
                max = k.value;
            }
        }
    }
    let x86 = matches!(arch, "x86_64" | "i686");
    let mut need_iommu = false;
    if x86 && max > X86_XAPIC_LIMIT {
        let machine = &limit.machine;
        let iommu_rule = plan.iommu.as_ref().map_or(rule, |i| i.rule.as_str());
        if !is_q35(machine) && !is_q35(dom.machine()) {
            r.findings.push(Finding::warning("vcpu-clamped", format!("vCPU maximum {max} clamped to {X86_XAPIC_LIMIT}: more than 255 vCPUs are only supported on q35-based machine types, and this guest's is {}", dom.machine()), "use a q35 machine type to go higher").rule(rule));
            max = X86_XAPIC_LIMIT;
        } else if plan
            .iommu
            .as_ref()
            .is_some_and(|i| i.value == IommuStrategy::Never)
        {
            r.findings.push(Finding::warning("vcpu-clamped", format!("vCPU maximum {max} clamped to {X86_XAPIC_LIMIT}: vcpu.iommu = \"never\", and more than 255 vCPUs need an IOMMU in extended interrupt mode"), "").rule(iommu_rule));
            max = X86_XAPIC_LIMIT;
        } else {
            need_iommu = true;
        }
    }
    if count.current > max {
        r.findings.push(Finding::error(
            "vcpu-current",
            format!("current vCPU count {} is above the new maximum {max}: libvirt says \"maximum vCPU count must not be less than current vCPU count\"", count.current),
            "lower <vcpu current> or raise vcpu.max",
        ).rule(rule));
        return r;
    }
    if need_iommu && !add_iommu(dom, q, rule, &mut r) {
        return r;
    }
    if max == count.max {
        return r;
    }
    // <vcpu>: the maximum changes, current stays.
    let nl = newline(text);
    let mut attrs: Vec<(&str, String)> = Vec::new();
    if !count.current_written {
        attrs.push(("current", count.current.to_string()));
    }
    let mut e = Edits::new();
    let base = vcpu_node.range().start;
    if let Some(t) = vcpu_node.children().find(roxmltree::Node::is_text) {
        e.replace(
            t.range().start - base..t.range().end - base,
            max.to_string(),
        );
    }
    let with_text = e.apply(&text[vcpu_node.range()]).unwrap_or_default();
    let new_vcpu = if attrs.is_empty() {
        with_text
    } else {
        let parsed = roxmltree::Document::parse(&with_text).ok();
        match parsed {
            Some(d) => {
                let n = d.root_element();
                let a: Vec<(&str, &str)> = attrs.iter().map(|(k, v)| (*k, v.as_str())).collect();
                with_attrs(&with_text, n, &a, q)
            }
            None => with_text,
        }
    };
    r.edits.replace(vcpu_node.range(), new_vcpu);
    r.changes.push(change(
        rule,
        format!(
            "<vcpu>: maximum {} -> {max}, current {} kept",
            count.max, count.current
        ),
    ));
    // <topology>.
    if let Some(t) = topology {
        match Topology::read(t) {
            Some(topo) => {
                let strategy = plan
                    .topology
                    .as_ref()
                    .map_or(TopologyStrategy::Sockets, |s| s.value);
                match topo.reshape(max, strategy) {
                    Some(new) if new != topo => {
                        let mut set: Vec<(&str, String)> =
                            vec![("sockets", new.sockets.to_string())];
                        for (name, v, old) in [
                            ("dies", new.dies, topo.dies),
                            ("clusters", new.clusters, topo.clusters),
                            ("cores", new.cores, topo.cores),
                            ("threads", new.threads, topo.threads),
                        ] {
                            if t.attribute(name).is_some()
                                || v != old
                                || (name != "clusters" && v != 1)
                            {
                                if name == "clusters" && x86 && t.attribute("clusters").is_none() {
                                    continue;
                                }
                                set.push((name, v.to_string()));
                            }
                        }
                        let a: Vec<(&str, &str)> =
                            set.iter().map(|(k, v)| (*k, v.as_str())).collect();
                        r.topology_markup = Some(with_attrs(text, t, &a, q));
                        r.changes.push(change(
                            plan.topology.as_ref().map_or(rule, |s| s.rule.as_str()),
                            format!("<topology>: {} -> sockets={} dies={} cores={} threads={} ({} vCPUs)", describe(&topo), new.sockets, new.dies, new.cores, new.threads, max),
                        ));
                    }
                    Some(_) => {}
                    None => {
                        r.findings.push(Finding::error(
                            "topology-mismatch",
                            format!("vcpu.topology = \"keep\" but <topology> {} holds {} vCPUs, not {max} (libvirt: \"CPU topology doesn't match maximum vcpu count\")", describe(&topo), topo.product()),
                            "use vcpu.topology = \"sockets\" or \"cores\", or a maximum the topology holds",
                        ).rule(plan.topology.as_ref().map_or(rule, |s| s.rule.as_str())));
                        return r;
                    }
                }
            }
            None => r.findings.push(
                Finding::error(
                    "topology-invalid",
                    "<topology> has an attribute that is not a positive integer",
                    "fix <topology>",
                )
                .rule(rule),
            ),
        }
    }
    // <vcpus>.
    if let Some(list) = child(root, "vcpus") {
        regenerate_vcpus(text, list, max, count.current, q, rule, &mut r);
    }
    // NUMA cells cover 0..max-1: new vCPUs join the last cell; ids past the maximum leave.
    if let Some(n) = numa {
        numa_cover(text, n, max, q, rule, &mut r);
    }
    let _ = nl;
    r
}

fn describe(t: &Topology) -> String {
    format!(
        "sockets={} dies={} cores={} threads={}",
        t.sockets, t.dies, t.cores, t.threads
    )
}

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
            r.findings.push(Finding::warning("vcpus-dropped", "<vcpus> dropped: an entry has no valid id; libvirt rebuilds the list from <vcpu current>", "").rule(rule));
            r.edits.delete(crate::edit::node_with_line(text, list));
            return;
        };
        if id < max {
            kept.push((id, *e));
        }
    }
    let known: BTreeSet<u32> = kept.iter().map(|(i, _)| *i).collect();
    let enabled = kept
        .iter()
        .filter(|(_, e)| e.attribute("enabled") == Some("yes"))
        .count();
    let first_ok = kept.iter().any(|(i, e)| {
        *i == 0
            && e.attribute("enabled") == Some("yes")
            && e.attribute("hotpluggable") != Some("yes")
    });
    if u32::try_from(enabled).ok() != Some(current) || !first_ok || known.len() != kept.len() {
        r.findings.push(Finding::warning(
            "vcpus-dropped",
            format!("<vcpus> dropped: after the maximum change it would not have vCPU 0 enabled and not hotpluggable with {current} enabled; libvirt rebuilds the list from <vcpu current>"),
            "",
        ).rule(rule));
        r.edits.delete(crate::edit::node_with_line(text, list));
        r.changes
            .push(change(rule, "<vcpus> removed (libvirt regenerates it)"));
        return;
    }
    let mut items: Vec<Item> = Vec::new();
    for c in list
        .children()
        .filter(|c| !(c.is_text() && text[c.range()].trim().is_empty()))
    {
        let keep = !is_libvirt_element(c, "vcpu") || kept.iter().any(|(_, e)| *e == c);
        if keep {
            items.push(Item::Verbatim(c.range()));
        }
    }
    let added: Vec<u32> = (0..max).filter(|i| !known.contains(i)).collect();
    for id in &added {
        items.push(Item::Markup(format!(
            "<vcpu id={q}{id}{q} enabled={q}no{q} hotpluggable={q}yes{q}/>"
        )));
    }
    let start_tag = &text[list.range().start..crate::edit::start_tag_attr_end(text, list)];
    let ind = line_indent(text, list.range().start);
    let cind = child_indent(text, list);
    r.edits.replace(
        list.range(),
        render_element(text, "vcpus", start_tag, &items, ind, &cind),
    );
    if !added.is_empty() {
        r.changes.push(change(
            rule,
            format!(
                "<vcpus>: {} vCPU(s) added, disabled and hotpluggable",
                added.len()
            ),
        ));
    }
    if kept.len() < entries.len() {
        r.changes.push(change(
            rule,
            format!(
                "<vcpus>: {} entr(ies) past the new maximum removed",
                entries.len() - kept.len()
            ),
        ));
    }
}

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
                r.findings.push(
                    Finding::error(
                        "numa-invalid",
                        format!(
                            "NUMA cell cpus='{}' is not a valid cpuset",
                            c.attribute("cpus").unwrap_or("")
                        ),
                        "fix the cell's cpus",
                    )
                    .rule(rule),
                );
                return;
            }
        }
    }
    let covered: BTreeSet<u32> = sets.iter().flatten().copied().collect();
    let missing: BTreeSet<u32> = (0..max).filter(|i| !covered.contains(i)).collect();
    let last = sets.len() - 1;
    let mut new_sets = sets.clone();
    for s in &mut new_sets {
        s.retain(|i| *i < max);
    }
    new_sets[last].extend(missing.iter().copied());
    if new_sets == sets {
        return;
    }
    if let Some(i) = new_sets.iter().position(BTreeSet::is_empty) {
        if !sets[i].is_empty() {
            r.findings.push(
                Finding::error(
                    "numa-cell-empty",
                    format!("NUMA cell {i} would have no vCPU left under the new maximum {max}"),
                    "raise vcpu.max or reshape the NUMA cells",
                )
                .rule(rule),
            );
            return;
        }
    }
    let base = numa.range().start;
    let mut e = Edits::new();
    for (i, c) in cells.iter().enumerate() {
        if new_sets[i] != sets[i] {
            let new = with_attrs(text, *c, &[("cpus", &format_cpuset(&new_sets[i]))], q);
            e.replace(c.range().start - base..c.range().end - base, new);
        }
    }
    if let Ok(m) = e.apply(&text[numa.range()]) {
        r.numa_markup = Some(m);
        r.changes.push(change(
            rule,
            format!(
                "<numa>: cells cover vCPUs 0-{} (new vCPUs join the last cell)",
                max - 1
            ),
        ));
    }
}

/// Make the domain able to run more than 255 x86 vCPUs: an Intel IOMMU with interrupt remapping
/// and extended interrupt mode, and a split I/O APIC. Returns false (with an error finding) when
/// an IOMMU of another model is already there.
fn add_iommu(dom: &Domain<'_>, q: char, rule: &str, r: &mut VcpuResult) -> bool {
    let text = dom.text;
    let root = dom.root();
    let devices = child(root, "devices");
    let existing = devices.and_then(|d| child(d, "iommu"));
    match existing {
        Some(i) if i.attribute("model") != Some("intel") => {
            r.findings.push(Finding::error(
                "iommu-model",
                format!("more than 255 vCPUs need an Intel IOMMU in extended interrupt mode, but the domain has <iommu model='{}'>, which cannot do eim", i.attribute("model").unwrap_or("")),
                "replace the IOMMU with <iommu model='intel'>, or set vcpu.iommu = \"never\"",
            ).rule(rule));
            return false;
        }
        Some(i) => match child(i, "driver") {
            Some(d) => {
                if d.attribute("intremap") != Some("on") || d.attribute("eim") != Some("on") {
                    r.edits.replace(
                        d.range(),
                        with_attrs(text, d, &[("intremap", "on"), ("eim", "on")], q),
                    );
                    r.changes.push(change(rule, "<iommu model='intel'><driver intremap='on' eim='on'/> set (more than 255 vCPUs)"));
                }
            }
            None => {
                append_child(
                    &mut r.edits,
                    text,
                    i,
                    &format!("<driver intremap={q}on{q} eim={q}on{q}/>"),
                );
                r.changes.push(change(rule, "<iommu model='intel'>: <driver intremap='on' eim='on'/> added (more than 255 vCPUs)"));
            }
        },
        None => {
            let Some(devs) = devices else {
                r.findings.push(
                    Finding::error(
                        "iommu-no-devices",
                        "more than 255 vCPUs need an IOMMU, but the domain has no <devices>",
                        "add <devices>",
                    )
                    .rule(rule),
                );
                return false;
            };
            let nl = newline(text);
            let cind = child_indent(text, devs);
            let step = cind
                .strip_prefix(line_indent(text, devs.range().start))
                .filter(|s| !s.is_empty())
                .unwrap_or("  ");
            append_child(
                &mut r.edits,
                text,
                devs,
                &format!(
                    "<iommu model={q}intel{q}>{nl}{cind}{step}<driver intremap={q}on{q} eim={q}on{q}/>{nl}{cind}</iommu>"
                ),
            );
            r.changes.push(change(rule, "<iommu model='intel'> with <driver intremap='on' eim='on'/> added (libvirt: \"more than 255 vCPUs require extended interrupt mode enabled on the iommu device\")"));
        }
    }
    let features = child(root, "features");
    match features.and_then(|f| child(f, "ioapic")) {
        Some(io) if io.attribute("driver") == Some("qemu") => {}
        Some(io) => {
            r.edits
                .replace(io.range(), with_attrs(text, io, &[("driver", "qemu")], q));
            r.changes.push(change(rule, "<ioapic driver='qemu'/> set (libvirt: \"IOMMU interrupt remapping requires split I/O APIC\")"));
        }
        None => {
            let markup = format!("<ioapic driver={q}qemu{q}/>");
            match features {
                Some(f) => append_child(&mut r.edits, text, f, &markup),
                None => {
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
                        Some(os) => r.edits.insert(os.range().end, format!("{nl}{ind}{el}")),
                        None => append_child(&mut r.edits, text, root, &el),
                    }
                }
            }
            r.changes.push(change(rule, "<features><ioapic driver='qemu'/> added (libvirt: \"IOMMU interrupt remapping requires split I/O APIC\")"));
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpusets() {
        let s = parse_cpuset("0-3,5,^2", 100).unwrap();
        assert_eq!(s.into_iter().collect::<Vec<_>>(), vec![0, 1, 3, 5]);
        assert_eq!(
            format_cpuset(&[0, 1, 2, 3, 8, 10, 11].into_iter().collect()),
            "0-3,8,10-11"
        );
        assert!(parse_cpuset("0-4294967295", 1000).is_none());
        assert!(parse_cpuset("3-1", 10).is_none());
        assert!(parse_cpuset("x", 10).is_none());
    }

    #[test]
    fn reshape() {
        let t = Topology {
            sockets: 1,
            dies: 1,
            clusters: 1,
            cores: 2,
            threads: 1,
        };
        assert_eq!(t.reshape(8, TopologyStrategy::Sockets).unwrap().sockets, 4);
        let t3 = Topology {
            sockets: 1,
            dies: 1,
            clusters: 1,
            cores: 3,
            threads: 1,
        };
        let r = t3.reshape(8, TopologyStrategy::Sockets).unwrap();
        assert_eq!((r.sockets, r.cores), (8, 1));
        let r = t.reshape(8, TopologyStrategy::Cores).unwrap();
        assert_eq!((r.sockets, r.cores), (1, 8));
        assert!(t.reshape(8, TopologyStrategy::Keep).is_none());
        assert_eq!(t.reshape(2, TopologyStrategy::Keep), Some(t));
    }
}
