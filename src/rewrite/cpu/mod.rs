//! The `cpu.*` keys of a plan, and libvirt's own mode rules, applied to the desired `<cpu>`
//! (rules 2–5 of README's "What the rewrite does"), in this order:
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
//! Every function reads host facts from [`DomainFacts`] only, and records each change with its rule.

use super::desired::{Desired, DesiredFeature, DesiredModel};
use crate::change::{Action, BUILTIN_RULE, Change, Notes};
use crate::cpu::{Level, default_model};
use crate::domain::Domain;
use crate::domain_facts::DomainFacts;
use crate::finding::{Code, Finding};
use crate::libvirt::arch::is_x86;
use crate::libvirt::cpu::{CpuCheck, CpuMode, policy_absent, policy_present};
use crate::policy::Plan;

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

/// For a mode libvirt does not offer this guest ([`DomainFacts::mode_supported`] false), the nearest
/// one it does ([`crate::modes::fallbacks`]) and why, as libvirt's refusal and where the
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
    let default = CpuMode::parse(mode)
        .map_or(CpuCheck::None, CpuCheck::default_for)
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

/// A model or feature the policy names that libvirt's cpu_map does not define is the policy's
/// mistake (`cpu-model-unknown`, `cpu-feature-unknown`: errors; in the domain they are warnings).
fn check_policy_names(plan: &Plan, arch: &str, facts: &DomainFacts<'_>, n: &mut Notes) {
    if !is_x86(arch) {
        check_x86_names_off_x86(plan, arch, facts, n);
        return;
    }
    if let Some(m) = &plan.model {
        if facts.model_features(&m.value).is_none() {
            n.finding(
                Finding::error(
                    Code::CpuModelUnknown,
                    format!(
                        "CPU model '{}' is not defined in libvirt's cpu_map ({})",
                        m.value, facts.cpu_map_source
                    ),
                    "use a model `virsh cpu-models x86_64` lists",
                )
                .rule(&m.rule),
            );
        }
    }
    for set in [&plan.require, &plan.disable].into_iter().flatten() {
        for f in set.value.iter().filter(|f| !facts.feature_known(f)) {
            n.finding(
                Finding::error(
                    Code::CpuFeatureUnknown,
                    format!(
                        "CPU feature '{f}' is not one libvirt knows (x86_features.xml of {})",
                        facts.cpu_map_source
                    ),
                    "use libvirt's feature names (`virsh domcapabilities` lists them)",
                )
                .rule(&set.rule),
            );
        }
    }
}

/// An x86 model or feature (libvirt's x86 cpu_map) in a rule that matches a guest of another
/// arch: libvirt defines the domain and refuses to start it ("cannot translate CPU model
/// Haswell-noTSX to a supported model", "unknown CPU feature: vmx", libvirt 9.0 and 11.3), so it
/// is `cpu-model-arch` / `cpu-feature-arch`, errors, as `level-arch` is for `min_level`.
fn check_x86_names_off_x86(plan: &Plan, arch: &str, facts: &DomainFacts<'_>, n: &mut Notes) {
    let fix = "give the rule `match = { arch = \"x86_64\" }`, or write this arch's own names";
    if let Some(m) = plan
        .model
        .as_ref()
        .filter(|m| facts.model_features(&m.value).is_some())
    {
        let msg = format!(
            "CPU model '{}' is an x86 model (libvirt's cpu_map) and this guest is {arch}: libvirt would refuse to start it (\"cannot translate CPU model {} to a supported model\")",
            m.value, m.value
        );
        n.finding(Finding::error(Code::CpuModelArch, msg, fix).rule(&m.rule));
    }
    for set in [&plan.require, &plan.disable].into_iter().flatten() {
        for f in set.value.iter().filter(|f| facts.feature_known(f)) {
            let msg = format!(
                "CPU feature '{f}' is an x86 feature (x86_features.xml) and this guest is {arch}: libvirt would refuse to start it (\"unknown CPU feature: {f}\")"
            );
            n.finding(Finding::error(Code::CpuFeatureArch, msg, fix).rule(&set.rule));
        }
    }
}

/// A mode libvirt does not offer this guest (`host-model` on Arm, `host-passthrough` under TCG,
/// `host-model` for a foreign arch under TCG; [`DomainFacts::mode_supported`]) becomes the nearest one it
/// does ([`crate::modes::fallbacks`]), with or without a rule.
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

/// Two rules that require and disable the same feature: the policy contradicts itself.
fn report_require_disable_conflicts(plan: &Plan, n: &mut Notes) {
    let (Some(r), Some(x)) = (&plan.require, &plan.disable) else {
        return;
    };
    for f in r.value.iter().filter(|f| x.value.contains(f)) {
        n.finding(
            Finding::error(
                Code::PolicyConflict,
                format!(
                    "feature '{f}' is required by rule '{}' and disabled by rule '{}'",
                    r.rule, x.rule
                ),
                "remove the feature from one of the rules",
            )
            .rule(&x.rule),
        );
    }
}

/// ` (the cluster's baseline model, for N host(s): a, b from SOURCE)` when the plan's CPU is a
/// cluster's baseline, else "".
fn cluster_why(plan: &Plan) -> String {
    plan.cluster.as_ref().map_or_else(String::new, |c| {
        format!(
            " (the cluster's baseline model, for {} from {})",
            c.value.hosts_text(),
            c.value.source
        )
    })
}

/// ` (the cluster's baseline: WHAT)` for a feature in the baseline's `list`, else "".
fn cluster_feature_why(plan: &Plan, f: &str, list: &[String], what: &str) -> String {
    if plan.cluster.is_some() && list.iter().any(|x| x == f) {
        format!(" (the cluster's baseline: {what})")
    } else {
        String::new()
    }
}

/// `cpu.require`: each feature present, by the custom model (per cpu_map) or a
/// `<feature policy='require'>`.
fn apply_require(d: &mut Desired<'_, '_>, plan: &Plan, facts: &DomainFacts<'_>, n: &mut Notes) {
    let Some(r) = &plan.require else { return };
    let model_feats = d
        .mode_is(CpuMode::Custom)
        .then_some(d.model.as_ref())
        .flatten()
        .and_then(|m| facts.model_features(&m.text))
        .cloned();
    let from_cluster = plan
        .cluster
        .as_ref()
        .map(|c| &c.value.require[..])
        .unwrap_or_default();
    for f in &r.value {
        let have = d.feature_policy(f);
        let from_model = have.is_none() && model_feats.as_ref().is_some_and(|s| s.contains(f));
        if !from_model && !have.as_deref().is_some_and(policy_present) {
            d.set_feature(f, "require");
            let why = cluster_feature_why(plan, f, from_cluster, "every host has it");
            let rule = plan.feature_rule(f, r);
            n.change(feature_change(rule, f, have.as_deref(), "require", &why));
        }
    }
}

/// `cpu.disable`: each feature absent (a feature another rule requires is left to the conflict
/// finding).
fn apply_disable(d: &mut Desired<'_, '_>, plan: &Plan, n: &mut Notes) {
    let Some(x) = &plan.disable else { return };
    let from_cluster = plan
        .cluster
        .as_ref()
        .map(|c| &c.value.disable[..])
        .unwrap_or_default();
    for f in &x.value {
        if plan.requires(f) {
            continue;
        }
        let have = d.feature_policy(f);
        if !have.as_deref().is_some_and(policy_absent) {
            d.set_feature(f, "disable");
            let why = cluster_feature_why(plan, f, from_cluster, "a host lacks it");
            let rule = plan.feature_rule(f, x);
            n.change(feature_change(rule, f, have.as_deref(), "disable", &why));
        }
    }
}

/// Under a cluster's baseline, a feature the policy requires that not every host has would keep
/// the guest from running (or migrating) there: `cluster-feature`, an error.
fn check_cluster_features(plan: &Plan, n: &mut Notes) {
    let (Some(c), Some(r)) = (&plan.cluster, &plan.require) else {
        return;
    };
    for f in r.value.iter().filter(|f| !c.value.features.contains(f)) {
        n.finding(
            Finding::error(
                Code::ClusterFeature,
                format!(
                    "feature '{f}' is required by rule '{}', but not every host of the cluster ({}) has it: the guest could not run on the hosts that lack it",
                    r.rule,
                    c.value.hosts_text()
                ),
                "remove it from cpu.require, or take the hosts that lack it out of [host] cluster (`virt-cpu-policy baseline` shows each host's CPU)",
            )
            .rule(&r.rule),
        );
    }
}

/// Under a cluster's baseline, what the domain itself adds that not every host can run goes:
/// each `require`d or `force`d feature outside the baseline CPU (the policy's own are
/// `cluster-feature` errors instead), a `<vendor>` other than the hosts' own, and a `match` other
/// than `exact` (`strict` fails on every host with a feature beyond the guest's). libvirt's
/// `x86Compute` refuses each on the hosts concerned, and QEMU silently drops a missing feature
/// when `check` is not `full`.
fn fit_cluster(d: &mut Desired<'_, '_>, plan: &Plan, n: &mut Notes) {
    let Some(c) = &plan.cluster else { return };
    if !d.mode_is(CpuMode::Custom) {
        return;
    }
    let (cpu, rule) = (&c.value, c.rule.as_str());
    let hosts = cpu.hosts_text();
    let runs = |f: &DesiredFeature<'_, '_>| {
        !matches!(f.policy.as_str(), "require" | "force")
            || cpu.features.contains(&f.key)
            || plan.requires(&f.key)
    };
    let why = format!(
        "the cluster's baseline CPU lacks it: not every host ({hosts}) gives it to a migratable guest"
    );
    for f in d.retain_features(runs) {
        n.change(feature_removed(rule, &f.key, &f.name, &f.policy, &why));
    }
    let vendor = d.single("vendor").and_then(crate::xml::text_of);
    if vendor.is_some() && vendor != cpu.vendor {
        d.remove_single("vendor");
        let what = match &cpu.vendor {
            Some(v) => format!("<vendor> removed: the cluster's hosts ({hosts}) are {v}"),
            None => {
                format!("<vendor> removed: the cluster's hosts ({hosts}) are not all of one vendor")
            }
        };
        n.change(Change::new(rule, Action::Remove, "vendor", what).old(vendor));
    }
    let why = format!(
        "a guest of the cluster ({hosts}) must run on hosts with more features than its model"
    );
    reset_match(d, rule, &why, n);
}

/// A `<feature>` added or given another policy; `why` (with its leading space) ends the sentence.
fn feature_change(rule: &str, f: &str, have: Option<&str>, want: &str, why: &str) -> Change {
    let (action, what) = match have {
        Some(p) => (
            Action::Set,
            format!("<feature name='{f}'>: policy '{p}' -> '{want}'{why}"),
        ),
        None => (
            Action::Add,
            format!("<feature policy='{want}' name='{f}'/> added{why}"),
        ),
    };
    Change::new(rule, action, "feature", what)
        .name(f)
        .attribute("policy")
        .old(have)
        .new_value(want)
}

/// Write the machine's default model out when a custom `<cpu>` names none, so features can be
/// listed (libvirt: "Non-empty feature list specified without CPU model"): QEMU's `qemu64` on
/// x86_64, with `svm` disabled as libvirt does for its own implicit default CPU.
fn ensure_model(
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
fn apply_level(
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
