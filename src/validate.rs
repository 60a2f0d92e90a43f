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
        let feats = guaranteed_features(host.cpu_map.model_features(&model), &explicit);
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
    let model_feats = hm
        .model
        .as_deref()
        .and_then(|m| host.cpu_map.model_features(m));
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
    let feats = guaranteed_features(model_feats, &host_explicit);
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
