//! `os-floor`: the guest's CPU against what the guest's OS needs to boot (the OS its domain
//! names, the floor a row of `src/cpu/os_floors.toml` gives: [`crate::guest_os`]). Judged
//! whatever the rules say, unless a rule waives it (`cpu.os_floor = false`):
//!
//! * a custom CPU whose model and features miss the floor: `os-floor`, unless the plan asks for
//!   the floor (`cpu.os_floor = true`: the rewrite gives it, and the rule's `cpu-level` says
//!   what is short);
//! * a custom CPU that has it as written but runs under TCG with `check='none'`, whose TCG does
//!   not emulate all of it: QEMU drops the rest at start;
//! * host-model, and host-passthrough under KVM: what this host gives (domcapabilities), which
//!   no rewrite changes.

use crate::cpu::Level;
use crate::domain::{Domain, cpu_features};
use crate::domain_facts::DomainFacts;
use crate::finding::{Code, Finding};
use crate::guest_os::{Floor, GuestOs};
use crate::libvirt::cpu::{CpuCheck, CpuMode};
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
    if dom.arch() != "x86_64" || plan.os_floor.as_ref().is_some_and(|r| !r.value) {
        return;
    }
    let mode = cpu.and_then(|c| c.attribute("mode")).unwrap_or("custom");
    let explicit = cpu.map(cpu_features).unwrap_or_default();
    let f = |feats: &BTreeSet<String>, what: String, fix: String| {
        short_of(os, floor, feats, &what, &fix)
    };
    let finding = if mode == CpuMode::Custom.as_str() {
        let Some((model, feats)) = super::cpu::custom_cpu_features(cpu, &explicit, facts) else {
            return;
        };
        let what = format!("this CPU (model {model})");
        let needs = floor.needs();
        if let Some(finding) = f(
            &feats,
            what.clone(),
            format!(
                "give the guest a CPU with {needs}: `cpu.os_floor = true` on a rule that matches it (the default policy's) makes `virt-cpu-policy rewrite` write it; `cpu.os_floor = false` waives the floor"
            ),
        ) {
            // The plan asks for the floor: the rewrite gives it, and `cpu-level` says so.
            (!plan.asks_floor(floor)).then_some(finding)
        } else {
            tcg_short_of(cpu, os, floor, &feats, &what, facts)
        }
    } else if dom.virt_type() == "kvm" || mode == CpuMode::HostModel.as_str() {
        let Some(feats) = super::cpu::host_model_features(facts, &explicit) else {
            return;
        };
        let source = facts.domcaps.map_or("", |d| d.source.as_str());
        f(
            &feats,
            format!("this host's {mode} CPU (per {source})"),
            format!(
                "run the guest on a host whose CPU gives {}: no rewrite changes what this host gives",
                floor.needs()
            ),
        )
    } else {
        // maximum and host-passthrough under TCG: QEMU's whole TCG CPU, judged by the TCG checks.
        None
    };
    out.extend(finding);
}

/// A custom CPU with the floor as written, under TCG with `check='none'` (libvirt compares
/// nothing, QEMU drops what its TCG does not emulate): short of the floor as this host's TCG
/// gives it ([`crate::qemu::TcgFacts::host_cpu`]).
fn tcg_short_of(
    cpu: Option<Node<'_, '_>>,
    os: &GuestOs,
    floor: &Floor,
    feats: &BTreeSet<String>,
    what: &str,
    facts: &DomainFacts<'_>,
) -> Option<Finding> {
    let (gives, source) = facts.tcg.host_cpu.as_ref()?;
    let check = cpu.map_or(CpuCheck::None, |c| {
        super::tcg::check_of(c, CpuMode::Custom, "qemu")
    });
    if !facts.tcg.x86_tcg || check != CpuCheck::None {
        return None;
    }
    let emulated: BTreeSet<String> = feats.intersection(gives).cloned().collect();
    short_of(
        os,
        floor,
        &emulated,
        &format!(
            "{what} as this host's TCG gives it (per {source}; QEMU drops the rest at start under check='none')"
        ),
        "run the guest under KVM on a host whose CPU has them, or on a QEMU whose TCG emulates them",
    )
}

/// The `os-floor` error when `feats` miss the floor of `os`: the OS, what it needs and the
/// vendor's source, the level `what` reaches, the missing features, what happens; None when
/// nothing is missing.
fn short_of(
    os: &GuestOs,
    floor: &Floor,
    feats: &BTreeSet<String>,
    what: &str,
    fix: &str,
) -> Option<Finding> {
    let missing = floor.missing(|f| feats.contains(f));
    if missing.is_empty() {
        return None;
    }
    let reaches = Level::highest(|f| feats.contains(f)).map_or("no x86-64 level", Level::as_str);
    Some(
        Finding::error(
            Code::OsFloor,
            format!(
                "{} needs {} ({}); {what} reaches {reaches}: missing {}: {}",
                os.short(),
                floor.needs(),
                floor.source,
                missing.join(", "),
                floor.what
            ),
            fix,
        )
        .rule(format!("the floor of {}", os.short())),
    )
}
