//! `os-floor`: the guest's CPU against what the guest's OS needs to boot (the OS its domain
//! names, the floor a row of `src/cpu/os_floors.toml` gives: [`crate::guest_os`]). Judged
//! whatever the rules say; where the plan already asks for the floor (`cpu.os_floor = true`) a
//! CPU below it is the rule's `cpu-level` and this says nothing more.

use crate::cpu::Level;
use crate::domain::{Domain, cpu_features};
use crate::domain_facts::DomainFacts;
use crate::finding::{Code, Finding};
use crate::libvirt::cpu::CpuMode;
use crate::policy::Plan;
use roxmltree::Node;
use std::collections::BTreeSet;

/// The check of the first `<cpu>` (`cpu`, None when there is none: QEMU's default, `qemu64`).
pub(super) fn check(
    dom: &Domain<'_>,
    cpu: Option<Node<'_, '_>>,
    plan: &Plan,
    facts: &DomainFacts<'_>,
    out: &mut Vec<Finding>,
) {
    let Some((os, Some(floor))) = &plan.os else {
        return;
    };
    if dom.arch() != "x86_64" {
        return;
    }
    // The plan asks for the floor already: its own findings say what is short of it.
    let level_asked = floor
        .level
        .is_none_or(|l| plan.min_level.as_ref().is_some_and(|m| m.value >= l));
    if level_asked && floor.require.iter().all(|f| plan.requires(f)) {
        return;
    }
    let mode = cpu.and_then(|c| c.attribute("mode")).unwrap_or("custom");
    let explicit = cpu.map(cpu_features).unwrap_or_default();
    let (feats, what): (BTreeSet<String>, String) = if mode == CpuMode::Custom.as_str() {
        let Some((model, feats)) = super::cpu::custom_cpu_features(cpu, &explicit, facts) else {
            return;
        };
        (feats, format!("this CPU (model {model})"))
    } else if dom.virt_type() == "kvm" || mode == CpuMode::HostModel.as_str() {
        // host-model, host-passthrough under KVM: what the host gives (domcapabilities).
        let Some(feats) = super::cpu::host_model_features(facts, &explicit) else {
            return;
        };
        let source = facts.domcaps.map_or("", |d| d.source.as_str());
        (feats, format!("this host's {mode} CPU (per {source})"))
    } else {
        // maximum and host-passthrough under TCG: what this QEMU emulates, judged by the TCG
        // checks.
        return;
    };
    let mut missing: Vec<String> = floor
        .level
        .map(Level::features)
        .unwrap_or_default()
        .into_iter()
        .filter(|f| !feats.contains(*f))
        .map(str::to_string)
        .collect();
    missing.extend(
        floor
            .require
            .iter()
            .filter(|f| !feats.contains(*f))
            .cloned(),
    );
    if missing.is_empty() {
        return;
    }
    let reaches = Level::highest(|f| feats.contains(f)).map_or("no x86-64 level", Level::as_str);
    out.push(Finding::error(
        Code::OsFloor,
        format!(
            "{} needs {} ({}); {what} reaches {reaches}: missing {}: {}",
            os.short(),
            floor.needs(),
            floor.source,
            missing.join(", "),
            floor.what
        ),
        format!(
            "give the guest a CPU with {} (`cpu.os_floor = true` in the policy raises it, as the default policy does; `virt-cpu-policy rewrite` then writes it)",
            floor.needs()
        ),
    ));
}
