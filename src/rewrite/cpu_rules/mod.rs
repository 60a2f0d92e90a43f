//! The `cpu.*` keys of a plan, and libvirt's own mode rules, applied to the desired `<cpu>`
//! (rules 2–5 of docs/rewrite.md), in this order:
//!
//! 1. mode and model ([`set_mode`], [`set_model`]), after checking the policy's names against
//!    libvirt's cpu_map ([`check_policy_names`]);
//! 2. the modes libvirt refuses for the arch and virt type ([`fix_unsupported_mode`]);
//! 3. what the mode forbids ([`drop_what_mode_forbids`]) and `check` ([`set_check`]);
//! 4. `require` and `disable` ([`apply_require`], [`apply_disable`]), and for a cluster's
//!    baseline (`cpu.model = "baseline"`) that every host has what the policy requires
//!    ([`check_cluster_features`]);
//! 5. the psABI level ([`apply_level`]), then `fallback`, which needs the model a level may
//!    have written ([`set_fallback`]).
//!
//! Every function reads host facts from [`DomainFacts`] only, and records each change with its
//! rule.

mod features;
mod level;

pub(super) use features::feature_change;
pub(super) use level::ensure_model;

use super::desired::{Desired, DesiredModel};
use crate::change::{Action, BUILTIN_RULE, Change, Notes};
use crate::domain::Domain;
use crate::domain_facts::DomainFacts;
use crate::finding::{Code, Finding};
use crate::libvirt::arch::is_x86;
use crate::libvirt::cpu_def::{CpuCheck, CpuMode};
use crate::policy::Plan;
use features::{
    apply_disable, apply_require, check_cluster_features, check_policy_names, cluster_why,
    fit_cluster, report_require_disable_conflicts,
};
use level::apply_level;

/// Apply the plan's `cpu.*` keys and libvirt's mode rules to `d`.
pub(crate) fn apply(
    d: &mut Desired<'_, '_>,
    plan: &Plan,
    dom: &Domain<'_>,
    facts: &DomainFacts<'_>,
    n: &mut Notes,
) {
    leave_custom_by_fold(d, plan, n);
    set_mode(d, plan, facts, n);
    set_model(d, plan, n);
    check_policy_names(plan, dom.arch(), facts, n);
    fix_unsupported_mode(d, facts, n);
    drop_what_mode_forbids(d, plan, n);
    set_check(d, plan, n);
    report_require_disable_conflicts(plan, n);
    check_cluster_features(plan, n);
    apply_require(d, plan, facts, n);
    apply_disable(d, plan, n);
    fit_cluster(d, plan, n);
    // Features need a model under custom: the rule that lists them, or the one that made the
    // mode custom (a host-model `<cpu>` with features and an empty `<model fallback=.../>`).
    let custom_rule = plan.mode.as_ref().filter(|m| m.value == CpuMode::Custom);
    if let Some(r) = plan.require.as_ref().or(plan.disable.as_ref()) {
        if !d.has_model() && !d.features.is_empty() {
            ensure_model(d, dom.arch(), &r.rule, facts, n);
        }
    }
    if let Some(m) = custom_rule {
        if !d.has_model() && !d.features.is_empty() {
            ensure_model(d, dom.arch(), &m.rule, facts, n);
        }
    }
    if let Some(level) = &plan.min_level {
        apply_level(d, level.value, &level.rule, plan, dom.arch(), facts, n);
    }
    warn_custom_without_model(d, plan, dom.arch(), n);
    set_fallback(d, plan, n);
}

/// `cpu.mode`. A model in the policy implies custom, which a `<cpu>` without `mode` already is.
/// A mode libvirt does not offer this guest is replaced by its fallback here, so the domain gets
/// one change, to the mode it will run with ([`supported_fallback`]).
fn set_mode(d: &mut Desired<'_, '_>, plan: &Plan, facts: &DomainFacts<'_>, n: &mut Notes) {
    let Some(m) = &plan.mode else { return };
    let asked = m.value;
    let (want, why) = match supported_fallback(asked, facts) {
        Some((f, why)) => (f, format!(" (the policy asks for {asked};{why})")),
        None => (asked, String::new()),
    };
    let (have, was_custom) = (d.mode(), d.mode_is(CpuMode::Custom));
    let explicit_custom = plan.model.is_some() && want == CpuMode::Custom;
    if have != want.as_str() && !(explicit_custom && d.attr("mode").is_none()) {
        d.set_attr("mode", want.as_str());
        n.change(mode_change(&m.rule, &have, want.as_str(), &why));
        if was_custom {
            leave_custom(d, plan, &m.rule, want, n);
        }
    }
}

/// An appended `<cpu>` whose mode overrides the first one's `custom` leaves custom as a policy's
/// mode does: the first `<cpu>`'s description (model, vendor, features, `check`) goes, so the
/// same CPU written as one `<cpu>` gives the same document. What the later `<cpu>` itself
/// writes is the operator's override and stays.
fn leave_custom_by_fold(d: &mut Desired<'_, '_>, plan: &Plan, n: &mut Notes) {
    let now = d.mode();
    let first_mode = d.first.map(crate::domain::cpu_mode);
    if first_mode != Some(Some(CpuMode::Custom)) || d.mode_is(CpuMode::Custom) {
        return;
    }
    let rule = BUILTIN_RULE;
    let why = format!("it described the first <cpu>'s custom CPU, and {now} takes this host's");
    drop_description(d, plan, rule, &why, Part::FirstCpu, n);
    let first_check = d.first.and_then(|c| c.attribute("check"));
    if first_check.is_some() && d.attr("check") == first_check {
        reset_check(d, plan, rule, &now, n);
    }
}

/// For a mode libvirt does not offer this guest ([`DomainFacts::mode_supported`] false), the
/// nearest one it does ([`crate::modes::fallbacks`]) and why, as libvirt's refusal and where the
/// verdict came from; None when the mode is offered, unknown, or has no offered fallback.
fn supported_fallback(mode: CpuMode, facts: &DomainFacts<'_>) -> Option<(CpuMode, String)> {
    if facts.mode_supported(mode) != Some(false) {
        return None;
    }
    let new = *crate::modes::fallbacks(mode)
        .iter()
        .find(|m| facts.mode_supported(**m) == Some(true))?;
    let why = format!(
        " libvirt: \"{}\"; per {}",
        facts.mode_refusal(mode),
        facts.modes_source()
    );
    Some((new, why))
}

/// Leaving `custom` for a host-based mode: the model, its vendor, its features and its `check`
/// described the old custom CPU (a definition imported from another host carries that host's
/// expanded CPU); under host-model libvirt would apply those features on top of this host's CPU,
/// so they go, and the policy's own `require`/`disable` (rule 4) are what remains. What does not
/// describe the model stays: topology, NUMA, cache, maxphysaddr.
fn leave_custom(d: &mut Desired<'_, '_>, plan: &Plan, rule: &str, want: CpuMode, n: &mut Notes) {
    let why = format!("it described the old custom CPU, and {want} takes this host's");
    drop_description(d, plan, rule, &why, Part::Whole, n);
    reset_check(d, plan, rule, want.as_str(), n);
}

/// The old custom CPU's `check` becomes `mode`'s default ([`CpuCheck::default_for`]; `none`
/// for a mode libvirt does not know), unless the policy sets one.
fn reset_check(d: &mut Desired<'_, '_>, plan: &Plan, rule: &str, mode: &str, n: &mut Notes) {
    // `mode` is never custom here: the virt type does not matter.
    let default = CpuMode::parse(mode)
        .map_or(CpuCheck::None, |m| CpuCheck::default_for(m, "kvm"))
        .as_str();
    if let (None, Some(c)) = (&plan.check, d.attr("check").map(str::to_string)) {
        if c != default {
            d.set_attr("check", default);
            let what = format!(
                "<cpu check='{c}'> -> '{default}': the old custom CPU's check; libvirt's default for {mode}"
            );
            n.change(
                Change::new(rule, Action::Set, "cpu", what)
                    .attribute("check")
                    .old(Some(c))
                    .new_value(default),
            );
        }
    }
}

/// Which part of the desired `<cpu>` an old CPU description is taken from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    /// All of it, the model included: a policy's mode leaves custom.
    Whole,
    /// All of it but the model, which is replaced in place (its `fallback` stays).
    ModelReplaced,
    /// Only what the first `<cpu>` wrote: an appended `<cpu>` left custom, and what it writes
    /// itself is the operator's override.
    FirstCpu,
}

/// The old CPU's description, removed with `why`: its model (unless replaced), `<vendor>` and
/// every `<feature>` the policy itself does not name, from the `part` concerned.
fn drop_description(
    d: &mut Desired<'_, '_>,
    plan: &Plan,
    rule: &str,
    why: &str,
    part: Part,
    n: &mut Notes,
) {
    let first_only = part == Part::FirstCpu;
    let model_goes = match part {
        Part::Whole => true,
        Part::ModelReplaced => false,
        Part::FirstCpu => d.model_in_first(),
    };
    if let Some(m) = model_goes.then(|| d.model.take()).flatten() {
        let what = format!("<model>{}</model> removed: {why}", m.text);
        n.change(Change::new(rule, Action::Remove, "model", what).old(Some(m.text)));
    }
    if !first_only || d.in_first(d.single("vendor")) {
        if let Some(v) = d.remove_single("vendor") {
            let what = format!("<vendor> removed: {why}");
            n.change(Change::new(rule, Action::Remove, "vendor", what).old(crate::xml::text_of(v)));
        }
    }
    for f in d.retain_features(|f| (first_only && f.later) || plan.names_feature(&f.key)) {
        n.change(feature_removed(rule, &f.key, &f.name, &f.policy, why));
    }
}

fn feature_removed(rule: &str, key: &str, name: &str, policy: &str, why: &str) -> Change {
    let what = format!("<feature policy='{policy}' name='{name}'/> removed: {why}");
    Change::new(rule, Action::Remove, "feature", what)
        .name(key)
        .attribute("policy")
        .old(Some(policy))
}

/// `match` other than libvirt's default `exact` becomes `exact`, with `why`: `strict` (no host
/// feature beyond the guest's) and `minimum` were chosen against the old model.
fn reset_match(d: &mut Desired<'_, '_>, rule: &str, why: &str, n: &mut Notes) {
    let Some(old) = d
        .attr("match")
        .filter(|m| *m != "exact")
        .map(str::to_string)
    else {
        return;
    };
    d.set_attr("match", "exact");
    let what = format!("<cpu match='{old}'> -> 'exact': {why}");
    n.change(
        Change::new(rule, Action::Set, "cpu", what)
            .attribute("match")
            .old(Some(old))
            .new_value("exact"),
    );
}

fn mode_change(rule: &str, have: &str, want: &str, why: &str) -> Change {
    Change::new(
        rule,
        Action::Set,
        "cpu",
        format!("<cpu mode>: '{have}' -> '{want}'{why}"),
    )
    .attribute("mode")
    .old(Some(have))
    .new_value(want)
}

/// `cpu.model`: the model is replaced; its `fallback` stays. Another model's description goes
/// with it, as when leaving `custom`: its `<vendor>`, a `match` other than `exact`, and every
/// `<feature>` the policy does not name (a definition imported from another host carries that
/// host's expanded CPU; its features on top of the new model would make a CPU the policy did not
/// ask for, and one a cluster's hosts may lack).
fn set_model(d: &mut Desired<'_, '_>, plan: &Plan, n: &mut Notes) {
    let Some(m) = &plan.model else { return };
    let have = d.model.as_ref().map(|m| m.text.clone());
    if have.as_deref() == Some(m.value.as_str()) {
        return;
    }
    let fallback = d.model.as_ref().and_then(|m| m.fallback.clone());
    d.model = Some(DesiredModel {
        text: m.value.clone(),
        fallback,
        src: None,
    });
    let action = if have.is_some() {
        Action::Set
    } else {
        Action::Add
    };
    let what = format!(
        "<model>: {} -> {}{}",
        have.as_deref().unwrap_or("(none)"),
        m.value,
        cluster_why(plan)
    );
    n.change(
        Change::new(&m.rule, action, "model", what)
            .old(have.clone())
            .new_value(&m.value),
    );
    if let Some(old) = have {
        let why = format!(
            "it described the old model {old}, and the policy gives {}",
            m.value
        );
        reset_match(d, &m.rule, &why, n);
        drop_description(d, plan, &m.rule, &why, Part::ModelReplaced, n);
    }
}

/// A mode libvirt does not offer this guest (`host-model` on Arm, `host-passthrough` under TCG,
/// `host-model` for a foreign arch under TCG; [`DomainFacts::mode_supported`]) becomes the nearest
/// one it does ([`crate::modes::fallbacks`]), with or without a rule.
fn fix_unsupported_mode(d: &mut Desired<'_, '_>, facts: &DomainFacts<'_>, n: &mut Notes) {
    let Some(mode) = d.mode_kind() else { return };
    if let Some((new, why)) = supported_fallback(mode, facts) {
        d.set_attr("mode", new.as_str());
        n.change(mode_change(
            BUILTIN_RULE,
            mode.as_str(),
            new.as_str(),
            &format!(" ({})", why.trim_start()),
        ));
    }
}

/// A model and vendor mean nothing under `host-passthrough`/`maximum`, `match` only applies to
/// custom models, and libvirt allows `migratable` only with `host-passthrough`/`maximum`.
fn drop_what_mode_forbids(d: &mut Desired<'_, '_>, plan: &Plan, n: &mut Notes) {
    let mode = d.mode();
    let rule = plan
        .mode
        .as_ref()
        .map_or(BUILTIN_RULE.to_string(), |m| m.rule.clone());
    let passthrough_like = matches!(
        d.mode_kind(),
        Some(CpuMode::HostPassthrough | CpuMode::Maximum)
    );
    if passthrough_like {
        if let Some(m) = d.model.take() {
            let what = format!("<model>{}</model> removed: {mode} takes no model", m.text);
            n.change(Change::new(&rule, Action::Remove, "model", what).old(Some(m.text)));
        }
        if let Some(v) = d.remove_single("vendor") {
            let what = format!("<vendor> removed: {mode} takes no vendor");
            n.change(
                Change::new(&rule, Action::Remove, "vendor", what).old(crate::xml::text_of(v)),
            );
        }
    }
    if d.mode_kind().is_some_and(CpuMode::is_host_based) {
        if let Some(v) = d.remove_attr("match") {
            let what = format!("<cpu match='{v}'> removed: it applies to custom models only");
            n.change(attr_removed(&rule, "match", v, what));
        }
    }
    if !passthrough_like {
        // libvirt: "CPU cache mode 'passthrough' can only be used with 'host-passthrough' /
        // 'maximum' CPUs" (9.0 and 11.3, at define).
        let cache_passthrough = d
            .single("cache")
            .is_some_and(|c| c.attribute("mode") == Some("passthrough"));
        if cache_passthrough {
            d.remove_single("cache");
            let what = format!(
                "<cache mode='passthrough'/> removed: libvirt allows it only with host-passthrough and maximum, not {mode}"
            );
            n.change(
                Change::new(&rule, Action::Remove, "cache", what)
                    .attribute("mode")
                    .old(Some("passthrough")),
            );
        }
        if let Some(v) = d.remove_attr("migratable") {
            let what = format!(
                "<cpu migratable='{v}'> removed: libvirt allows it only with host-passthrough and maximum"
            );
            n.change(attr_removed(&rule, "migratable", v, what));
        }
    }
}

fn attr_removed(rule: &str, attribute: &'static str, old: String, what: String) -> Change {
    Change::new(rule, Action::Remove, "cpu", what)
        .attribute(attribute)
        .old(Some(old))
}

/// `cpu.check`.
fn set_check(d: &mut Desired<'_, '_>, plan: &Plan, n: &mut Notes) {
    let Some(c) = &plan.check else { return };
    let want = c.value.as_str();
    let have = d.attr("check").map(str::to_string);
    if have.as_deref() != Some(want) {
        d.set_attr("check", want);
        n.change(
            Change::new(&c.rule, Action::Set, "cpu", format!("<cpu check='{want}'>"))
                .attribute("check")
                .old(have)
                .new_value(want),
        );
    }
}

/// `<cpu mode='custom'>` without a model gives QEMU's default model, x86-64-v1 only.
fn warn_custom_without_model(d: &Desired<'_, '_>, plan: &Plan, arch: &str, n: &mut Notes) {
    let Some(m) = &plan.mode else { return };
    if is_x86(arch) && d.mode_is(CpuMode::Custom) && d.model.is_none() {
        n.finding(
            Finding::warning(
                Code::CpuModelDefault,
                "<cpu mode='custom'> without a model: the guest gets QEMU's default model (qemu64 on x86_64, x86-64-v1 only)",
                "give cpu.model or cpu.min_level in the policy",
            )
            .rule(&m.rule),
        );
    }
}

/// `cpu.fallback`, last: it needs the model a level may have written.
fn set_fallback(d: &mut Desired<'_, '_>, plan: &Plan, n: &mut Notes) {
    let Some(f) = &plan.fallback else { return };
    let Some(m) = d.model.as_mut() else { return };
    let want = f.value.as_str();
    if m.fallback.as_deref() != Some(want) {
        let old = m.fallback.replace(want.to_string());
        m.src = None;
        n.change(
            Change::new(
                &f.rule,
                Action::Set,
                "model",
                format!("<model fallback='{want}'>"),
            )
            .attribute("fallback")
            .old(old)
            .new_value(want),
        );
    }
}
