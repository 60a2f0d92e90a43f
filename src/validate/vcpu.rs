//! The vCPU checks of libvirt 9.0 (`src/conf/domain_validate.c`, `src/qemu/qemu_validate.c`) and
//! QEMU: counts, topology, machine-type and KVM limits, the x86 rules above 255 vCPUs, `<vcpus>`,
//! NUMA cells and memory hotplug. Error texts are libvirt's.

use crate::domain::Domain;
use crate::domain_facts::{DomainFacts, KVM_FLOOR, VersionRule};
use crate::finding::{Code, Finding};
use crate::libvirt::arch::is_x86;
use crate::topology::{Topology, VcpuCount, X86_XAPIC_LIMIT, parse_cpuset, read_vcpu};
use crate::vcpu_limits::{family_floor, is_q35};
use crate::xml::{child, is_libvirt_element};
use roxmltree::Node;
use std::collections::{BTreeMap, BTreeSet};

/// Every vCPU check, in libvirt's order.
pub(super) fn check(dom: &Domain<'_>, facts: &DomainFacts<'_>, out: &mut Vec<Finding>) {
    let Some(count) = check_counts(dom, out) else {
        return;
    };
    let max = count.max;
    check_topology(dom, max, facts, out);
    check_limits(dom, max, facts, out);
    super::tcg::check_vcpus(dom, max, count.current, facts, out);
    super::tcg::check_eim(dom, facts, out);
    super::x2apic_iommu::check_device(dom, max, facts, out);
    if let Some(list) = child(dom.root(), "vcpus") {
        check_vcpus_list(list, max, out);
    }
    check_numa(dom, max, facts, out);
}

/// `<vcpu>`: a positive maximum, `current` between 1 and the maximum. With a `<vcpus>` list
/// libvirt takes the enabled entries as the current count and ignores `current` (libvirt 9.0
/// accepts `<vcpu current='5'>2</vcpu>` with a valid list). None when the maximum is unusable.
fn check_counts(dom: &Domain<'_>, out: &mut Vec<Finding>) -> Option<VcpuCount> {
    let root = dom.root();
    let count = match child(root, "vcpu").map(read_vcpu) {
        None => VcpuCount {
            max: 1,
            current: 1,
            current_written: false,
        },
        Some(Ok(c)) => c,
        Some(Err(m)) => {
            out.push(Finding::error(
                Code::VcpuInvalid,
                m,
                "write a positive integer",
            ));
            return None;
        }
    };
    let max = count.max;
    if max == 0 {
        out.push(Finding::error(
            Code::VcpuInvalid,
            "<vcpu> is 0: a guest needs at least one vCPU",
            "write a positive integer",
        ));
        return None;
    }
    let has_list = child(root, "vcpus").is_some();
    if count.current == 0 && !has_list {
        out.push(Finding::error(
            Code::VcpuCurrent,
            "vcpu 0 can't be offline (<vcpu current='0'>)",
            "set current to 1 or more",
        ));
    }
    if count.current > max && !has_list {
        out.push(Finding::error(
            Code::VcpuCurrent,
            format!(
                "maximum vCPU count must not be less than current vCPU count ({} > {max})",
                count.current
            ),
            "lower <vcpu current> or raise the maximum",
        ));
    }
    Some(count)
}

/// sockets × dies × clusters × cores × threads must equal the maximum (`clusters` only where
/// libvirt reads it, 10.1.0 and later); on x86 QEMU refuses more than one cluster.
fn check_topology(dom: &Domain<'_>, max: u32, facts: &DomainFacts<'_>, out: &mut Vec<Finding>) {
    let Some(topo) = dom.cpus().first().and_then(|c| child(*c, "topology")) else {
        return;
    };
    let clusters_read = facts.applies(VersionRule::Clusters);
    let t = match Topology::read(topo, clusters_read) {
        Ok(t) => t,
        Err(why) => {
            out.push(Finding::error(
                Code::TopologyInvalid,
                why,
                "give <topology> sockets, cores and threads as positive integers",
            ));
            return;
        }
    };
    if t.product() != u64::from(max) {
        let product = if clusters_read {
            "sockets × dies × clusters × cores × threads"
        } else {
            "sockets × dies × cores × threads"
        };
        out.push(Finding::error(
            Code::TopologyMismatch,
            format!("CPU topology doesn't match maximum vcpu count ({product} = {}, maximum {max})", t.product()),
            "make the product equal the maximum (a rule with vcpu.topology = \"sockets\" or \"cores\" reshapes it)",
        ));
    }
    let written = topo.attribute("clusters").filter(|c| c.trim() != "1");
    match (is_x86(dom.arch()), written, clusters_read) {
        (true, Some(_), true) if t.clusters > 1 => out.push(Finding::error(
            Code::TopologyClusters,
            format!("clusters > 1 not supported by this machine's CPU topology (QEMU, at start; <topology clusters='{}'> on x86, read by {})", t.clusters, facts.libvirt_rules()),
            "remove the clusters attribute or set it to 1",
        )),
        (true, Some(c), false) => out.push(Finding::warning(
            Code::TopologyClusters,
            format!("<topology clusters='{c}'> is ignored by {} (libvirt reads it from 10.1.0 on, and QEMU then refuses more than one cluster on x86)", facts.libvirt_rules()),
            "remove the clusters attribute",
        )),
        _ => {}
    }
}

/// The machine type's limit (not looked up when every type of the family allows the maximum),
/// KVM's limit, and above 255 x86 vCPUs q35 and what [`super::x2apic_iommu`] asks.
fn check_limits(dom: &Domain<'_>, max: u32, facts: &DomainFacts<'_>, out: &mut Vec<Finding>) {
    // The family's floor says nothing of a GIC that takes fewer vCPUs than the machine type.
    let below_floor = crate::domain_facts::gic_limit_of(dom).is_none()
        && family_floor(dom.arch(), dom.machine()).is_some_and(|floor| max <= floor);
    let limit = facts.machine_limit.as_ref().filter(|_| !below_floor);
    if let Some(l) = limit {
        if max > l.max_cpus {
            let gic =
                crate::domain_facts::gic_limit_of(dom).is_some_and(|g| g.max_cpus == l.max_cpus);
            out.push(if gic {
                // QEMU's refusal at start, not libvirt's at define.
                Finding::error(
                    Code::GicVcpuLimit,
                    format!("Number of SMP CPUs requested ({max}) exceeds max CPUs supported by machine 'mach-virt' ({}) (from {})", l.max_cpus, l.source),
                    format!("lower the maximum to {} or give the guest GICv3 (<features><gic version='3'/></features>)", l.max_cpus),
                )
            } else {
                Finding::error(
                    Code::MachineVcpuLimit,
                    format!("Maximum CPUs greater than specified machine type limit {} (machine type {}, from {}; maximum {max})", l.max_cpus, l.machine, l.source),
                    format!("lower the maximum to {} or use a machine type with a higher limit", l.max_cpus),
                )
            });
        }
    }
    if let (Some(k), "kvm", true) = (&facts.kvm_limit, dom.virt_type(), max > KVM_FLOOR) {
        if max > k.value {
            out.push(Finding::error(
                Code::KvmVcpuLimit,
                format!(
                    "maximum {max} vCPUs exceeds the maximum cpus supported by KVM ({}, from {})",
                    k.value, k.source
                ),
                format!("lower the maximum to {}", k.value),
            ));
        }
    }
    if !is_x86(dom.arch()) || max <= X86_XAPIC_LIMIT {
        return;
    }
    let machine = limit.map_or(dom.machine(), |l| l.machine.as_str());
    if !is_q35(machine) && !is_q35(dom.machine()) {
        if limit.is_none() {
            out.push(Finding::error(Code::X86VcpuQ35, format!("more than 255 vCPUs are only supported on q35-based machine types (machine type {})", dom.machine()), "use a q35 machine type or at most 255 vCPUs"));
        }
        return;
    }
    super::x2apic_iommu::check_many_vcpus(dom, max, facts, out);
}

/// `<vcpus>`: ids below the maximum, vCPU 0 online and not hotpluggable, offline ones
/// hotpluggable, online non-hotpluggable ones first.
fn check_vcpus_list(list: Node<'_, '_>, max: u32, out: &mut Vec<Finding>) {
    let mut state: BTreeMap<u32, (bool, Option<String>)> = BTreeMap::new();
    for e in list.children().filter(|c| is_libvirt_element(*c, "vcpu")) {
        let Some(id) = e.attribute("id").and_then(|v| v.trim().parse::<u32>().ok()) else {
            out.push(Finding::error(
                Code::VcpusInvalid,
                "a <vcpus><vcpu> has no valid id",
                "give every entry an id",
            ));
            continue;
        };
        if id >= max {
            out.push(Finding::error(
                Code::VcpusInvalid,
                format!("vcpu id '{id}' is out of range of maximum vcpu count"),
                "remove the entry or raise the maximum",
            ));
            continue;
        }
        let enabled = e.attribute("enabled") == Some("yes");
        state.insert(
            id,
            (enabled, e.attribute("hotpluggable").map(str::to_string)),
        );
    }
    for (id, (enabled, hot)) in &state {
        let hot = hot.as_deref();
        let bad = match (*id, enabled, hot) {
            (0, false, _) => Some(("vcpu 0 can't be offline".to_string(), "enable vCPU 0")),
            (0, true, Some("yes")) => Some((
                "vcpu0 can't be hotpluggable".to_string(),
                "set hotpluggable='no' on vCPU 0",
            )),
            (_, false, Some("no")) => Some((
                format!("vcpu '{id}' is both offline and not hotpluggable"),
                "make it hotpluggable or enable it",
            )),
            _ => None,
        };
        if let Some((message, fix)) = bad {
            out.push(Finding::error(Code::VcpusInvalid, message, fix));
        }
    }
    check_vcpus_order(&state, out);
}

/// libvirt: online vCPUs that cannot be unplugged come first, by id.
fn check_vcpus_order(state: &BTreeMap<u32, (bool, Option<String>)>, out: &mut Vec<Finding>) {
    let mut hotplug_seen = false;
    for (id, (enabled, hot)) in state {
        if !enabled {
            continue;
        }
        if hot.as_deref() == Some("yes") {
            hotplug_seen = true;
        } else if hotplug_seen {
            out.push(Finding::error(
                Code::VcpusOrder,
                format!("online non-hotpluggable vcpus need to be ordered prior to hotplugable vcpus (vcpu '{id}')"),
                "give the non-hotpluggable online vCPUs the lowest ids",
            ));
            return;
        }
    }
}

/// NUMA cells: valid cpusets, no vCPU in two cells, none past the maximum, every vCPU in a cell
/// (a warning: QEMU puts the rest in node 0); `<maxMemory>` needs a cell (before libvirt 9.6.0,
/// which adds one itself: [`VersionRule::AutoNumaForMemoryHotplug`]).
fn check_numa(dom: &Domain<'_>, max: u32, facts: &DomainFacts<'_>, out: &mut Vec<Finding>) {
    let cells: Vec<Node<'_, '_>> = dom
        .cpus()
        .iter()
        .filter_map(|c| child(*c, "numa"))
        .flat_map(|n| {
            n.children()
                .filter(|c| is_libvirt_element(*c, "cell"))
                .collect::<Vec<_>>()
        })
        .collect();
    let mut covered = BTreeSet::new();
    let mut overlap_reported = false;
    for (i, c) in cells.iter().enumerate() {
        let Some(v) = c.attribute("cpus") else {
            continue;
        };
        let Some(s) = parse_cpuset(v, max.saturating_add(1 << 16)) else {
            out.push(Finding::error(
                Code::NumaInvalid,
                format!("NUMA cell cpus='{v}' is not a valid cpuset"),
                "fix the cell's cpus",
            ));
            continue;
        };
        if !overlap_reported && s.iter().any(|id| covered.contains(id)) {
            overlap_reported = true;
            out.push(Finding::error(
                Code::NumaOverlap,
                format!("NUMA cells {i} and an earlier one have overlapping vCPU ids"),
                "give every vCPU to one cell only",
            ));
        }
        covered.extend(s);
    }
    if covered.iter().any(|i| *i >= max) {
        out.push(Finding::error(
            Code::NumaVcpus,
            "Number of CPUs in <numa> exceeds the <vcpu> count",
            "keep every cell's cpus below the maximum",
        ));
    } else if !cells.is_empty() && u32::try_from(covered.len()).ok() != Some(max) {
        out.push(Finding::warning(Code::NumaCoverage, format!("NUMA cells cover {} of {max} vCPUs; QEMU puts the others in node 0 and warns that this is deprecated", covered.len()), "assign every vCPU to a cell"));
    }
    let auto_numa = facts.applies(VersionRule::AutoNumaForMemoryHotplug);
    if child(dom.root(), "maxMemory").is_some() && cells.is_empty() && !auto_numa {
        out.push(Finding::error(
            Code::MemoryHotplugNuma,
            "At least one numa node has to be configured when enabling memory hotplug",
            "add a <numa> cell, or remove <maxMemory>",
        ));
    }
}
