//! The `vcpu.*` keys of a plan: the vCPU maximum, and everything that must follow it —
//! `<topology>`, `<vcpus>`, NUMA cells, and on x86 above 255 vCPUs the IOMMU and split I/O APIC.
//!
//! A dynamically scalable guest needs a maximum above its current count so vCPUs can be
//! hot-plugged while it runs. libvirt refuses a maximum above the machine type's limit, a topology
//! whose product differs from the maximum, and more than 255 x86 vCPUs without q35, an Intel IOMMU
//! in extended interrupt mode and a split I/O APIC (libvirt 9.0's errors, quoted where each is
//! made). The steps,
//! in order: read the counts ([`read_counts`]), the maximum the rule asks for clamped to what the
//! host runs ([`target_maximum`]), the x86 rule above 255 vCPUs ([`x86_xapic_rule`],
//! [`iommu::add_iommu`]), the APIC IDs an x86 TCG guest's QEMU runs ([`super::apic`]), then the new maximum in `<vcpu>` ([`set_vcpu_max`]) and what follows it
//! ([`reshape_topology`], [`follow::regenerate_vcpus`], [`follow::numa_cover`]). `current` is never
//! lowered.

mod amd_iommu;
mod follow;
mod iommu;
mod iommu_driver;
pub(super) mod x2apic;

use crate::change::{Action, Change, Notes};
use crate::domain::Domain;
use crate::domain_facts::{DomainFacts, VersionRule};
use crate::edit::{Edits, document_quote, with_attrs};
use crate::finding::{Code, Finding};
use crate::libvirt::arch::is_x86;
use crate::policy::{IommuStrategy, Plan, Ruled, TopologyStrategy, VcpuMax};
use crate::topology::{Topology, VcpuCount, X86_XAPIC_LIMIT, read_vcpu};
use crate::vcpu_limits::{QEMU_MAX_VCPUS, is_q35};
use crate::xml::{child, written_attributes};
use follow::{numa_cover, regenerate_vcpus};
use iommu::add_iommu;
use roxmltree::Node;

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
    /// x2APIC the guest CPU must get for the maximum under TCG ([`super::apic`]).
    pub(crate) x2apic: Option<x2apic::X2apicNeed>,
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
///
/// `cpu_x2apic` says whether the desired CPU has x2APIC (an x86 TCG guest whose vCPUs reach APIC
/// ID 255 needs it, [`super::apic`]).
pub(crate) fn apply(
    dom: &Domain<'_>,
    plan: &Plan,
    facts: &DomainFacts<'_>,
    topology: Option<Node<'_, '_>>,
    numa: Option<Node<'_, '_>>,
    cpu_x2apic: bool,
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
    let Some(max) = wanted_maximum(dom, plan, facts, count, rule, &mut r.notes) else {
        return r;
    };
    let (max, need_iommu) = x86_xapic_rule(dom, plan, facts, max, &mut r.notes);
    let clusters = facts.applies(VersionRule::Clusters);
    let Some((max, x2apic)) = x2apic::tcg_maximum(
        plan,
        facts,
        (topology, clusters),
        (count.max, max),
        cpu_x2apic,
        rule,
        &mut r.notes,
    ) else {
        return r;
    };
    // A maximum the TCG rule lowered needs no IOMMU any more.
    let need_iommu = need_iommu && max > X86_XAPIC_LIMIT;
    r.x2apic = x2apic;
    if count.current > max {
        r.notes.finding(Finding::error(
            Code::VcpuCurrent,
            format!("current vCPU count {} is above the new maximum {max}: libvirt says \"maximum vCPU count must not be less than current vCPU count\"", count.current),
            "lower <vcpu current> or raise vcpu.max",
        ).rule(rule));
        return r;
    }
    let iommu_rule = plan.iommu.as_ref().map_or(rule, |i| i.rule.as_str());
    if need_iommu && !add_iommu(dom, q, iommu_rule, facts, &mut r) {
        return r;
    }
    let new_max = max != count.max;
    if let (true, Some(node)) = (new_max, vcpu_node) {
        set_vcpu_max(text, node, count, max, q, rule, &mut r);
    }
    let mut reshaped = false;
    if let Some(t) = topology.filter(|_| new_max || plan.topology.is_some()) {
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
        follow_counts(dom, numa, max, count.current, q, follow_rule, &mut r);
    }
    r
}

/// The vCPU maximum the rules work from: `vcpu.max`'s, clamped to what the host runs
/// ([`target_maximum`]), else the document's own. None, with an error finding, when the limit
/// `vcpu.max` asks for is not known, or when the maximum is above [`QEMU_MAX_VCPUS`]: no QEMU
/// machine type takes it, so what the rules would build on it could start nowhere.
fn wanted_maximum(
    dom: &Domain<'_>,
    plan: &Plan,
    facts: &DomainFacts<'_>,
    count: VcpuCount,
    rule: &str,
    n: &mut Notes,
) -> Option<u32> {
    let max = match &plan.vcpu_max {
        Some(want) => target_maximum(dom, want, facts, n)?,
        None => count.max,
    };
    if max > QEMU_MAX_VCPUS {
        n.finding(Finding::error(
            Code::MachineVcpuLimit,
            format!("vCPU maximum {max} is above {QEMU_MAX_VCPUS}, the most any QEMU machine type takes (QEMU's largest MachineClass::max_cpus); {}", maximum_origin(plan, facts)),
            format!("give a vcpu.max of {QEMU_MAX_VCPUS} or less, and the host's real capabilities (virsh capabilities > FILE)"),
        ).rule(rule));
        return None;
    }
    Some(max)
}

/// What follows a new maximum or a reshaped topology (`max` vCPUs, `current` of them online),
/// under `rule`, the rule that made the change: `<vcpus>`, which lists every vCPU, and the NUMA
/// cells, which must cover them all, or libvirt refuses the document.
fn follow_counts(
    dom: &Domain<'_>,
    numa: Option<Node<'_, '_>>,
    max: u32,
    current: u32,
    q: char,
    rule: &str,
    r: &mut VcpuResult,
) {
    if let Some(list) = child(dom.root(), "vcpus") {
        regenerate_vcpus(dom.text, list, max, current, q, rule, r);
    }
    if let Some(n) = numa {
        numa_cover(dom.text, n, max, q, rule, r);
    }
}

/// Where a maximum above [`QEMU_MAX_VCPUS`] came from, for the refusal: the machine limit's
/// source when the policy took it (that file cannot be right), else the policy or the document.
fn maximum_origin(plan: &Plan, facts: &DomainFacts<'_>) -> String {
    match (&plan.vcpu_max, &facts.machine_limit) {
        (Some(_), Some(l)) if l.max_cpus > QEMU_MAX_VCPUS => format!(
            "the limit {} of machine type {} (from {}) cannot be a QEMU machine type's",
            l.max_cpus, l.machine, l.source
        ),
        (Some(_), _) => "it comes from the policy's vcpu.max".to_string(),
        (None, _) => "it is the document's own <vcpu> maximum".to_string(),
    }
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
    let enabled = crate::topology::enabled_vcpu_ids(list, c.max).count();
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
    let floor = crate::vcpu_limits::family_floor(arch, dom.machine());
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
