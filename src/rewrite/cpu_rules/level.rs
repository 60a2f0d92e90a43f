//! `cpu.min_level`: the psABI level's features present in the guest CPU (with the companions a
//! real CPU always has), and the default model written out so features can be listed.

use super::feature_change;
use crate::change::{Action, Change, Notes};
use crate::cpu::{Level, default_model};
use crate::domain_facts::DomainFacts;
use crate::finding::{Code, Finding};
use crate::libvirt::cpu_def::{CpuMode, policy_present};
use crate::policy::Plan;
use crate::rewrite::desired::{Desired, DesiredModel};

/// Write the machine's default model out when a custom `<cpu>` names none, so features can be
/// listed (libvirt: "Non-empty feature list specified without CPU model"): QEMU's `qemu64` on
/// x86_64, with `svm` disabled as libvirt does for its own implicit default CPU.
pub(in crate::rewrite) fn ensure_model(
    d: &mut Desired<'_, '_>,
    arch: &str,
    rule: &str,
    facts: &DomainFacts<'_>,
    n: &mut Notes,
) {
    if d.has_model() || !d.mode_is(CpuMode::Custom) {
        return;
    }
    let Some(model) = default_model(arch) else {
        return;
    };
    // An empty `<model fallback='allow'/>` (host-model writes one) keeps its fallback.
    let fallback = d.model.take().and_then(|m| m.fallback);
    d.model = Some(DesiredModel {
        text: model.to_string(),
        fallback,
        src: None,
    });
    n.change(
        Change::new(rule, Action::Add, "model", format!("<model>{model}</model> added: the domain names no model, so QEMU would use its default {model}; it is written out so features can be listed (libvirt refuses features without a model)"))
            .new_value(model),
    );
    let has_svm = facts
        .model_features(model)
        .is_some_and(|s| s.contains("svm"));
    if has_svm && d.feature("svm").is_none() {
        d.set_feature("svm", "disable");
        n.change(feature_change(rule, "svm", None, "disable", &format!(": libvirt's {model} lists svm (AMD-V), which KVM on Intel hosts cannot give (\"Host CPU does not provide required features: svm\"); libvirt disables it for its own implicit default CPU, and the guest keeps the same CPU under KVM and TCG")));
    }
}

/// `cpu.min_level`: the level's features present in the guest CPU.
pub(super) fn apply_level(
    d: &mut Desired<'_, '_>,
    level: Level,
    rule: &str,
    plan: &Plan,
    arch: &str,
    facts: &DomainFacts<'_>,
    n: &mut Notes,
) {
    if arch != "x86_64" {
        n.finding(
            Finding::error(
                Code::LevelArch,
                format!("cpu.min_level {level} applies to x86_64 guests, but this guest's arch is '{arch}'"),
                "add `match = { arch = \"x86_64\" }` to the rule",
            )
            .rule(rule),
        );
        return;
    }
    report_level_conflicts(level, rule, plan, n);
    if let Some(c) = plan
        .cluster
        .as_ref()
        .filter(|c| c.value.level < Some(level))
    {
        // Requiring the level's features would make a CPU some host cannot run.
        let reached = c
            .value
            .level
            .map_or_else(|| "not even x86-64-v1".to_string(), |l| l.to_string());
        let blockers = c
            .value
            .blocked
            .iter()
            .find(|(l, _)| *l == level)
            .map(|(_, hosts)| hosts.join(", "))
            .unwrap_or_default();
        n.finding(
            Finding::error(
                Code::ClusterLevel,
                format!(
                    "cpu.min_level {level} of rule '{rule}' is above what every host of the cluster reaches ({reached}): {blockers}; the guest could not run on those hosts"
                ),
                format!(
                    "lower cpu.min_level to what the cluster reaches, or take those hosts out of [host] cluster ({})",
                    c.value.source
                ),
            )
            .rule(rule),
        );
        return;
    }
    if !d.mode_is(CpuMode::Custom) {
        reenable_level_features(d, level, rule, n);
        return;
    }
    ensure_model(d, arch, rule, facts, n);
    let Some(model) = d.model.as_ref().map(|m| m.text.clone()) else {
        return;
    };
    // A model cpu_map does not know has no features to count on: nothing is invented for it
    // (validation names the model; libvirt refuses to start it).
    let Some(model_feats) = facts.model_features(&model) else {
        return;
    };
    let model_feats = Some(model_feats);
    let added = require_level_features(d, level, rule, &model, model_feats, n);
    require_companions(d, &added, rule, model_feats, n);
}

/// A rule disabling a feature another rule's level needs.
fn report_level_conflicts(level: Level, rule: &str, plan: &Plan, n: &mut Notes) {
    let Some(x) = &plan.disable else { return };
    for f in level
        .features()
        .iter()
        .filter(|f| x.value.iter().any(|v| v == *f))
    {
        n.finding(
            Finding::error(
                Code::PolicyConflict,
                format!("feature '{f}' is disabled by rule '{}' but cpu.min_level {level} of rule '{rule}' needs it", x.rule),
                "remove the feature from cpu.disable or lower cpu.min_level",
            )
            .rule(&x.rule),
        );
    }
}

/// Outside custom mode the guest's features come from the host: the document can only make sure
/// none of the level's features is switched off; whether the host has them is a host check.
fn reenable_level_features(d: &mut Desired<'_, '_>, level: Level, rule: &str, n: &mut Notes) {
    for f in level.features() {
        let have = d.feature_policy(f);
        if have.as_deref().is_some_and(|p| !policy_present(p)) {
            d.set_feature(f, "require");
            let why = format!(" (re-enabled: {level} needs it; the policy wins over the domain)");
            n.change(feature_change(rule, f, have.as_deref(), "require", &why));
        }
    }
}

/// Each level feature the custom model lacks (per cpu_map) or the domain switches off gets
/// `<feature policy='require'>`; returns the features added.
fn require_level_features(
    d: &mut Desired<'_, '_>,
    level: Level,
    rule: &str,
    model: &str,
    model_feats: Option<&std::collections::BTreeSet<String>>,
    n: &mut Notes,
) -> Vec<&'static str> {
    let mut added = Vec::new();
    for f in level.features() {
        let have = d.feature_policy(f);
        let present = match have.as_deref() {
            Some(p) => policy_present(p),
            None => model_feats.is_some_and(|s| s.contains(f)),
        };
        if present {
            continue;
        }
        d.set_feature(f, "require");
        added.push(f);
        let why = if have.is_some() {
            format!(" (re-enabled: {level} needs it; the policy wins over the domain)")
        } else {
            format!(" ({level} needs it and libvirt's {model} does not have it)")
        };
        n.change(feature_change(rule, f, have.as_deref(), "require", &why));
    }
    added
}

/// (feature, companion, why): when a level makes the rewrite require `feature` on a model that
/// lacks it, `companion` is required too. XSAVEOPT came with XSAVE on every CPU that has AVX (Intel
/// since Sandy Bridge, AMD since Bulldozer; libvirt's models with `xsave` all list `xsaveopt`),
/// and Linux 6.1 stops at FPU initialisation under QEMU 7.2's TCG with `xsave` but no `xsaveopt`
/// (seen: tests/guest/run).
const COMPANIONS: [(&str, &str, &str); 1] = [(
    "xsave",
    "xsaveopt",
    "every CPU with AVX has it, and Linux stops at FPU initialisation without it under TCG",
)];

/// Features every real CPU with a level feature also has, which guests rely on together.
fn require_companions(
    d: &mut Desired<'_, '_>,
    added: &[&str],
    rule: &str,
    model_feats: Option<&std::collections::BTreeSet<String>>,
    n: &mut Notes,
) {
    for (with, companion, why) in COMPANIONS {
        let in_model = model_feats.is_some_and(|s| s.contains(companion));
        if added.contains(&with) && d.feature(companion).is_none() && !in_model {
            d.set_feature(companion, "require");
            let why = format!(" (with {with}: {why})");
            n.change(feature_change(rule, companion, None, "require", &why));
        }
    }
}
