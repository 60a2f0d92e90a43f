//! The checks libvirt and QEMU will make, run on the rewritten domain (DESIGN.md section 6).
//!
//! Each check mirrors a rule of libvirt 9.0 / QEMU 7.2 and quotes the error text libvirt gives,
//! so an operator can match a finding to what `virsh define` or `virsh start` would have said.
//! Part 1 covers `<cpu>` and the arch/virt-type checks; checks never change the document.

use crate::cpu::Level;
use crate::domain::{Domain, child, is_libvirt_element, text_of};
use crate::finding::Finding;
use crate::host::Host;
use crate::policy::Plan;
use crate::rewrite::{guaranteed_features, policy_present};
use crate::vcpu::{Topology, VcpuCount, read_vcpu};
use roxmltree::Node;
use std::collections::BTreeSet;

/// libvirt's `<feature policy>` values (`src/conf/cpu_conf.c`, `virCPUFeaturePolicy`).
const FEATURE_POLICIES: [&str; 5] = ["force", "require", "optional", "disable", "forbid"];

/// Run every part-1 check on `dom` (the document as it will be written).
///
/// Returns findings in a fixed order: structure, mode, features, level.
#[must_use]
pub fn validate(dom: &Domain<'_>, plan: &Plan, host: &Host) -> Vec<Finding> {
    let mut out = Vec::new();
    if !dom.in_scope() {
        return out;
    }
    let cpus = dom.cpus();
    if cpus.len() > 1 {
        out.push(Finding::error(
            "cpu-multiple",
            format!("{} <cpu> elements: libvirt reads mode, model and features from the first only and silently ignores the rest (virt-xml-validate: \"Extra element cpu in interleave\")", cpus.len()),
            "merge them into one <cpu> (virt-cpu-policy rewrite does)",
        ));
    }
    let arch = dom.arch();
    let vt = dom.virt_type();
    validate_vcpus(dom, host, &mut out);
    let Some(cpu) = cpus.first().copied() else {
        check_level(dom, None, plan, host, &mut out);
        return out;
    };
    let mode = cpu.attribute("mode").unwrap_or("custom");
    if !matches!(
        mode,
        "custom" | "host-model" | "host-passthrough" | "maximum"
    ) {
        out.push(Finding::error(
            "cpu-mode-invalid",
            format!("Invalid mode attribute '{mode}' (libvirt accepts custom, host-model, host-passthrough, maximum)"),
            "set <cpu mode> to one of those",
        ));
        return out;
    }
    if arch == "aarch64" && vt == "kvm" && mode == "host-model" {
        out.push(Finding::error(
            "cpu-mode-unsupported",
            "CPU mode 'host-model' for aarch64 kvm domain on aarch64 host is not supported by hypervisor",
            "use mode='host-passthrough' (what Nova uses on aarch64)",
        ));
    }
    if vt == "qemu" && mode == "host-passthrough" {
        out.push(Finding::error(
            "cpu-mode-unsupported",
            format!("CPU mode 'host-passthrough' for {arch} qemu domain on {arch} host is not supported by hypervisor"),
            "use mode='maximum' for TCG guests",
        ));
    }
    if mode == "host-model" && cpu.attribute("match").is_some() {
        out.push(Finding::warning(
            "cpu-match-host-model",
            "<cpu match> has no meaning with mode='host-model'",
            "remove the match attribute",
        ));
    }
    if cpu.attribute("migratable").is_some() && !matches!(mode, "host-passthrough" | "maximum") {
        out.push(Finding::error(
            "cpu-migratable-mode",
            "Attribute migratable is only allowed for 'host-passthrough' / 'maximum' CPU mode",
            "remove the migratable attribute",
        ));
    }
    let model = child(cpu, "model").and_then(text_of);
    let features: Vec<Node<'_, '_>> = cpu
        .children()
        .filter(|c| is_libvirt_element(*c, "feature"))
        .collect();
    if mode == "custom" && model.is_none() && !features.is_empty() {
        out.push(Finding::error(
            "cpu-features-without-model",
            "Non-empty feature list specified without CPU model",
            "add a <model> (the machine's default is qemu64 on x86_64)",
        ));
    }
    if child(cpu, "vendor").is_some() && model.is_none() {
        out.push(Finding::error(
            "cpu-vendor-without-model",
            "CPU vendor specified without CPU model",
            "add a <model> or remove <vendor>",
        ));
    }
    let mut seen = BTreeSet::new();
    for f in &features {
        let Some(name) = f.attribute("name") else {
            out.push(Finding::error(
                "cpu-feature-invalid",
                "Missing CPU feature name",
                "give every <feature> a name attribute",
            ));
            continue;
        };
        let key = crate::cpu::normalize_feature(name).unwrap_or_else(|| name.to_string());
        if matches!(arch, "x86_64" | "i686") && !host.feature_known(&key) {
            out.push(Finding::warning(
                "cpu-feature-unknown",
                format!("CPU feature '{name}' is not one libvirt knows (x86_features.xml of {}); libvirt will refuse to start the guest", host.cpu_map_source()),
                "use libvirt's feature names (`virsh domcapabilities` lists them)",
            ));
        }
        if !seen.insert(name) {
            out.push(Finding::error(
                "cpu-feature-duplicate",
                format!("CPU feature '{name}' specified more than once"),
                "keep one <feature> per name",
            ));
        }
        if let Some(p) = f.attribute("policy") {
            if !FEATURE_POLICIES.contains(&p) && mode != "host-passthrough" && mode != "maximum" {
                out.push(Finding::error(
                    "cpu-feature-invalid",
                    format!("Invalid CPU feature policy '{p}' for feature '{name}'"),
                    "use force, require, optional, disable or forbid",
                ));
            }
        }
    }
    if let (Some(m), "custom") = (&model, mode) {
        if let Some(dc) = host.domcaps_for(arch, vt, dom.machine()) {
            if dc.model_usable(m) == Some(false) {
                out.push(Finding::warning(
                    "cpu-model-unusable",
                    format!("CPU model '{m}' is usable='no' for {vt} on this host ({}): features the host lacks fail the start (check='partial'/'full') or are dropped silently", dc.source),
                    "disable the features the host lacks, or choose a usable model",
                ));
            }
        }
    }
    check_level(dom, Some(cpu), plan, host, &mut out);
    out
}

/// The vCPU checks of libvirt 9.0 (`src/conf/domain_validate.c`, `src/qemu/qemu_validate.c`) and
/// QEMU: counts, topology, machine-type and KVM limits, the x86 rules above 255 vCPUs, `<vcpus>`,
/// NUMA cells and memory hotplug. Error texts are libvirt's.
#[allow(clippy::too_many_lines)]
fn validate_vcpus(dom: &Domain<'_>, host: &Host, out: &mut Vec<Finding>) {
    let root = dom.root();
    let arch = dom.arch();
    let vt = dom.virt_type();
    let count = match child(root, "vcpu").map(read_vcpu) {
        None => VcpuCount {
            max: 1,
            current: 1,
            current_written: false,
        },
        Some(Ok(c)) => c,
        Some(Err(m)) => {
            out.push(Finding::error(
                "vcpu-invalid",
                m,
                "write a positive integer",
            ));
            return;
        }
    };
    let max = count.max;
    if max == 0 {
        out.push(Finding::error(
            "vcpu-invalid",
            "<vcpu> is 0: a guest needs at least one vCPU",
            "write a positive integer",
        ));
        return;
    }
    // With a <vcpus> list libvirt takes the enabled entries as the current count and ignores
    // `current` (libvirt 9.0 accepts <vcpu current='5'>2</vcpu> with a valid list).
    let has_list = child(root, "vcpus").is_some();
    if count.current == 0 && !has_list {
        out.push(Finding::error(
            "vcpu-current",
            "vcpu 0 can't be offline (<vcpu current='0'>)",
            "set current to 1 or more",
        ));
    }
    if count.current > max && !has_list {
        out.push(Finding::error(
            "vcpu-current",
            format!(
                "maximum vCPU count must not be less than current vCPU count ({} > {max})",
                count.current
            ),
            "lower <vcpu current> or raise the maximum",
        ));
    }
    let x86 = matches!(arch, "x86_64" | "i686");
    if let Some(topo) = dom.cpus().first().and_then(|c| child(*c, "topology")) {
        match Topology::read(topo) {
            None => out.push(Finding::error(
                "topology-invalid",
                "<topology> has an attribute that is not a positive integer",
                "fix <topology>",
            )),
            Some(t) => {
                if t.product() != u64::from(max) {
                    out.push(Finding::error(
                        "topology-mismatch",
                        format!("CPU topology doesn't match maximum vcpu count (sockets × dies × clusters × cores × threads = {}, maximum {max})", t.product()),
                        "make the product equal the maximum (vcpu.topology reshapes it)",
                    ));
                }
                if x86 && topo.attribute("clusters").is_some() {
                    out.push(Finding::warning("topology-clusters", "<topology clusters> on x86: QEMU 9.0 and later refuse clusters on x86 machine types", "remove the clusters attribute"));
                }
            }
        }
    }
    let below_floor =
        crate::machine::family_floor(arch, dom.machine()).is_some_and(|floor| max <= floor);
    let limit = if below_floor {
        None
    } else {
        host.machine_limit(arch, vt, dom.machine(), dom.emulator().as_deref())
    };
    if let Some(l) = &limit {
        if max > l.max_cpus {
            out.push(Finding::error(
                "machine-vcpu-limit",
                format!("Maximum CPUs greater than specified machine type limit {} (machine type {}, from {}; maximum {max})", l.max_cpus, l.machine, l.source),
                format!("lower the maximum to {} or use a machine type with a higher limit", l.max_cpus),
            ));
        }
    }
    // Every KVM since Linux 4.x allows at least 240 vCPUs on the arches libvirt's QEMU driver runs
    // (x86 255 and up, arm64 512, s390x 248): below that, /dev/kvm is not asked.
    if vt == "kvm" && max > 240 {
        if let Some(k) = host.kvm_limit() {
            if max > k.value {
                out.push(Finding::error(
                    "kvm-vcpu-limit",
                    format!("maximum {max} vCPUs exceeds the maximum cpus supported by KVM ({}, from {})", k.value, k.source),
                    format!("lower the maximum to {}", k.value),
                ));
            }
        }
    }
    let devices = child(root, "devices");
    let iommu = devices.and_then(|d| child(d, "iommu"));
    let driver = iommu.and_then(|i| child(i, "driver"));
    let on = |n: &str| driver.and_then(|d| d.attribute(n)) == Some("on");
    let intel = iommu.and_then(|i| i.attribute("model")) == Some("intel");
    if x86 && max > crate::vcpu::X86_XAPIC_LIMIT {
        let machine = limit.as_ref().map_or(dom.machine(), |l| l.machine.as_str());
        if !crate::machine::is_q35(machine) && !crate::machine::is_q35(dom.machine()) {
            if limit.is_none() {
                out.push(Finding::error("x86-vcpu-q35", format!("more than 255 vCPUs are only supported on q35-based machine types (machine type {})", dom.machine()), "use a q35 machine type or at most 255 vCPUs"));
            }
        } else if !(intel && on("eim")) {
            out.push(Finding::error(
                "iommu-eim",
                "more than 255 vCPUs require extended interrupt mode enabled on the iommu device",
                "add <iommu model='intel'><driver intremap='on' eim='on'/></iommu> and <features><ioapic driver='qemu'/></features> (virt-cpu-policy does with vcpu.max)",
            ));
        }
    }
    if intel && !crate::machine::is_q35(dom.machine()) && x86 {
        let canonical = host.canonical_machine(arch, dom.machine());
        if !canonical.as_deref().is_some_and(crate::machine::is_q35) {
            out.push(Finding::error(
                "iommu-machine",
                "IOMMU device: 'intel' is only supported with Q35 machines",
                "use a q35 machine type or remove the Intel IOMMU",
            ));
        }
    }
    if intel && on("eim") && !on("intremap") {
        out.push(Finding::error(
            "iommu-intremap",
            "IOMMU eim requires interrupt remapping to be enabled",
            "set <driver intremap='on'>",
        ));
    }
    if intel && on("intremap") {
        let split = child(root, "features")
            .and_then(|f| child(f, "ioapic"))
            .and_then(|i| i.attribute("driver"))
            == Some("qemu");
        if !split {
            out.push(Finding::error(
                "ioapic-split",
                "IOMMU interrupt remapping requires split I/O APIC (ioapic driver='qemu')",
                "add <features><ioapic driver='qemu'/></features>",
            ));
        }
    }
    if let Some(list) = child(root, "vcpus") {
        let mut state: std::collections::BTreeMap<u32, (bool, Option<String>)> =
            std::collections::BTreeMap::new();
        for e in list.children().filter(|c| is_libvirt_element(*c, "vcpu")) {
            let Some(id) = e.attribute("id").and_then(|v| v.trim().parse::<u32>().ok()) else {
                out.push(Finding::error(
                    "vcpus-invalid",
                    "a <vcpus><vcpu> has no valid id",
                    "give every entry an id",
                ));
                continue;
            };
            if id >= max {
                out.push(Finding::error(
                    "vcpus-invalid",
                    format!("vcpu id '{id}' is out of range of maximum vcpu count"),
                    "remove the entry or raise the maximum",
                ));
                continue;
            }
            state.insert(
                id,
                (
                    e.attribute("enabled") == Some("yes"),
                    e.attribute("hotpluggable").map(str::to_string),
                ),
            );
        }
        for (id, (enabled, hot)) in &state {
            if *id == 0 && !enabled {
                out.push(Finding::error(
                    "vcpus-invalid",
                    "vcpu 0 can't be offline",
                    "enable vCPU 0",
                ));
            } else if *id == 0 && hot.as_deref() == Some("yes") {
                out.push(Finding::error(
                    "vcpus-invalid",
                    "vcpu0 can't be hotpluggable",
                    "set hotpluggable='no' on vCPU 0",
                ));
            } else if !enabled && hot.as_deref() == Some("no") {
                out.push(Finding::error(
                    "vcpus-invalid",
                    format!("vcpu '{id}' is both offline and not hotpluggable"),
                    "make it hotpluggable or enable it",
                ));
            }
        }
        // libvirt: online vCPUs that cannot be unplugged come first, by id.
        let mut hotplug_seen = false;
        for (id, (enabled, hot)) in &state {
            if !enabled {
                continue;
            }
            if hot.as_deref() == Some("yes") {
                hotplug_seen = true;
            } else if hotplug_seen {
                out.push(Finding::error(
                    "vcpus-order",
                    format!("online non-hotpluggable vcpus need to be ordered prior to hotplugable vcpus (vcpu '{id}')"),
                    "give the non-hotpluggable online vCPUs the lowest ids",
                ));
                break;
            }
        }
    }
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
        if let Some(v) = c.attribute("cpus") {
            match crate::vcpu::parse_cpuset(v, max.saturating_add(1 << 16)) {
                Some(s) => {
                    if !overlap_reported && s.iter().any(|id| covered.contains(id)) {
                        overlap_reported = true;
                        out.push(Finding::error(
                            "numa-overlap",
                            format!("NUMA cells {i} and an earlier one have overlapping vCPU ids"),
                            "give every vCPU to one cell only",
                        ));
                    }
                    covered.extend(s);
                }
                None => out.push(Finding::error(
                    "numa-invalid",
                    format!("NUMA cell cpus='{v}' is not a valid cpuset"),
                    "fix the cell's cpus",
                )),
            }
        }
    }
    if covered.iter().any(|i| *i >= max) {
        out.push(Finding::error(
            "numa-vcpus",
            "Number of CPUs in <numa> exceeds the <vcpu> count",
            "keep every cell's cpus below the maximum",
        ));
    } else if !cells.is_empty() && u32::try_from(covered.len()).ok() != Some(max) {
        out.push(Finding::warning("numa-coverage", format!("NUMA cells cover {} of {max} vCPUs; QEMU puts the others in node 0 and warns that this is deprecated", covered.len()), "assign every vCPU to a cell"));
    }
    if child(root, "maxMemory").is_some() && cells.is_empty() {
        out.push(Finding::error(
            "memory-hotplug-numa",
            "At least one numa node has to be configured when enabling memory hotplug",
            "add a <numa> cell, or remove <maxMemory>",
        ));
    }
}

fn explicit_features(cpu: Node<'_, '_>) -> Vec<(String, String)> {
    cpu.children()
        .filter(|c| is_libvirt_element(*c, "feature"))
        .filter_map(|f| {
            let name = f.attribute("name")?;
            let key = crate::cpu::normalize_feature(name).unwrap_or_else(|| name.to_string());
            Some((key, f.attribute("policy").unwrap_or("require").to_string()))
        })
        .collect()
}

fn check_level(
    dom: &Domain<'_>,
    cpu: Option<Node<'_, '_>>,
    plan: &Plan,
    host: &Host,
    out: &mut Vec<Finding>,
) {
    let Some(level) = &plan.min_level else {
        return;
    };
    if dom.arch() != "x86_64" {
        return;
    }
    let mode = cpu.and_then(|c| c.attribute("mode")).unwrap_or("custom");
    let explicit = cpu.map(explicit_features).unwrap_or_default();
    if mode == "custom" {
        let model = cpu
            .and_then(|c| child(c, "model"))
            .and_then(text_of)
            .unwrap_or_else(|| "qemu64".to_string());
        let feats = guaranteed_features(host.model_features(&model).as_ref(), &explicit);
        let reached = Level::highest(|f| feats.contains(f));
        if reached < Some(level.value) {
            let missing: Vec<&str> = level
                .value
                .features()
                .into_iter()
                .filter(|f| !feats.contains(*f))
                .collect();
            out.push(
                Finding::error(
                    "cpu-level",
                    format!(
                        "the guest CPU (model {model}) does not reach {}: missing {}",
                        level.value,
                        missing.join(", ")
                    ),
                    "require the missing features (virt-cpu-policy rewrite does)",
                )
                .rule(&level.rule),
            );
        }
        return;
    }
    // host-model / host-passthrough / maximum: the host decides. domcapabilities' host-model CPU is
    // what libvirt would give; under TCG, `maximum` emulates every psABI feature.
    if dom.virt_type() == "qemu" {
        return;
    }
    let Some(dc) = host.domcaps_for(dom.arch(), dom.virt_type(), dom.machine()) else {
        return;
    };
    let Some(hm) = &dc.host_model else {
        return;
    };
    let model_feats = hm.model.as_deref().and_then(|m| host.model_features(m));
    let mut host_explicit: Vec<(String, String)> = hm
        .require
        .iter()
        .map(|f| (f.clone(), "require".to_string()))
        .chain(
            hm.disable
                .iter()
                .map(|f| (f.clone(), "disable".to_string())),
        )
        .collect();
    host_explicit.extend(explicit.iter().filter(|(_, p)| !policy_present(p)).cloned());
    let feats = guaranteed_features(model_feats.as_ref(), &host_explicit);
    if Level::highest(|f| feats.contains(f)) < Some(level.value) {
        let missing: Vec<&str> = level
            .value
            .features()
            .into_iter()
            .filter(|f| !feats.contains(*f))
            .collect();
        out.push(
            Finding::warning(
                "host-level",
                format!(
                    "this host's {mode} CPU (per {}) does not reach {}: missing {}; KVM will not provide them",
                    dc.source,
                    level.value,
                    missing.join(", ")
                ),
                "run the guest on a host whose CPU and KVM provide them, or under TCG (type='qemu')",
            )
            .rule(&level.rule),
        );
    }
}
