//! `cpu.require` and `cpu.disable`, the names the policy gives (libvirt's cpu_map must define
//! them, and for the guest's arch), and under a cluster's baseline what every host must have.

use super::{feature_removed, reset_match};
use crate::change::{Action, Change, Notes};
use crate::domain_facts::DomainFacts;
use crate::finding::{Code, Finding};
use crate::libvirt::arch::is_x86;
use crate::libvirt::cpu_def::{CpuMode, policy_absent, policy_present};
use crate::policy::Plan;
use crate::rewrite::desired::{Desired, DesiredFeature};

/// A model or feature the policy names that libvirt's cpu_map does not define is the policy's
/// mistake (`cpu-model-unknown`, `cpu-feature-unknown`: errors; in the domain they are warnings).
pub(super) fn check_policy_names(plan: &Plan, arch: &str, facts: &DomainFacts<'_>, n: &mut Notes) {
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

/// Two rules that require and disable the same feature: the policy contradicts itself.
pub(super) fn report_require_disable_conflicts(plan: &Plan, n: &mut Notes) {
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
/// cluster's baseline, else ""; with `; left out of the baseline: ...` when features KVM never
/// gives a guest were left out of it (hosts known only by their physical CPU).
pub(super) fn cluster_why(plan: &Plan) -> String {
    plan.cluster.as_ref().map_or_else(String::new, |c| {
        let left_out = c
            .value
            .kvm_left_out
            .as_ref()
            .map_or_else(String::new, |k| format!("; {}", k.sentence()));
        format!(
            " (the cluster's baseline model, for {} from {}{left_out})",
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
pub(super) fn apply_require(
    d: &mut Desired<'_, '_>,
    plan: &Plan,
    facts: &DomainFacts<'_>,
    n: &mut Notes,
) {
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
pub(super) fn apply_disable(d: &mut Desired<'_, '_>, plan: &Plan, n: &mut Notes) {
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
pub(super) fn check_cluster_features(plan: &Plan, n: &mut Notes) {
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
pub(super) fn fit_cluster(d: &mut Desired<'_, '_>, plan: &Plan, n: &mut Notes) {
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
pub(in crate::rewrite) fn feature_change(
    rule: &str,
    f: &str,
    have: Option<&str>,
    want: &str,
    why: &str,
) -> Change {
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
