//! `cpu.model = "baseline"`: a plan's placeholder turned into the cluster's CPU.
//!
//! The step sits between [`Policy::plan_for`] and [`crate::facts::Facts::resolve`]: after it the
//! plan names the baseline's real model, and its `require`/`disable` hold the baseline's features
//! besides the policy's own, so the facts, the rewrite, the validator and the hook see an ordinary
//! custom CPU. [`Plan::cluster`] keeps the cluster's CPU for the explanations and for the checks
//! that nothing the policy adds (a level, a feature) is missing on one of the hosts.
//!
//! The cluster is `[host] cluster` ([`Host::cluster`]): one host per facts file, as
//! `virt-cpu-policy baseline` reads them. Its CPU is libvirt's baseline of the hosts' CPUs with
//! `migratable` set (a cluster CPU is for guests that migrate, and a `migratable='no'` feature
//! such as `invtsc` would block that) and a vendor mix answered vendor-neutrally
//! ([`super::ClusterOptions`]). It is computed once per run ([`Host::cluster_cpu`]) and only
//! when a plan asks for it.

use super::{ClusterOptions, baseline_from_files};
use crate::cpu::Level;
use crate::domain::Domain;
use crate::error::Result;
use crate::host::Host;
use crate::libvirt::cpu_map::DEFAULT_CPU_MAP;
use crate::policy::{BASELINE_MODEL, ClusterCpu, Plan, Policy, Set};

/// The plan for `dom` ([`Policy::plan_for`]) with `cpu.model = "baseline"` resolved
/// ([`resolve`]).
///
/// # Errors
/// As [`resolve`].
pub fn plan_for(policy: &Policy, dom: &Domain<'_>, host: &Host) -> Result<Plan> {
    resolve(policy.plan_for(dom), host)
}

/// Computes the cluster's CPU now when a rule of `policy` asks for it, so a command that judges
/// many guests (`audit`) fails once, with one message, rather than once per guest. Nothing is
/// read when no rule says `cpu.model = "baseline"`.
///
/// # Errors
/// As [`resolve`].
pub fn check(policy: &Policy, host: &Host) -> Result<()> {
    let asks = policy
        .rules
        .iter()
        .any(|r| r.cpu.model.as_deref() == Some(BASELINE_MODEL));
    if asks {
        host.cluster_cpu(cluster_cpu)?;
    }
    Ok(())
}

/// `plan` with a `"baseline"` model replaced by the cluster's: its model, its `require` and
/// `disable` features added to the plan's (the policy's own lists win where they disagree: a
/// feature the policy disables is not required, one it requires is not disabled). A plan with
/// another model is returned as it is, and the cluster is not read.
///
/// # Errors
/// [`crate::Error::Cluster`] when the cluster's CPU cannot be computed ([`cluster_cpu`]).
pub fn resolve(mut plan: Plan, host: &Host) -> Result<Plan> {
    let Some(model) = plan.model.as_ref().filter(|m| m.value == BASELINE_MODEL) else {
        return Ok(plan);
    };
    let rule = model.rule.clone();
    let cpu = host.cluster_cpu(cluster_cpu)?.clone();
    let own =
        |s: &Option<Set<Vec<String>>>| s.as_ref().map(|s| s.value.clone()).unwrap_or_default();
    let (own_require, own_disable) = (own(&plan.require), own(&plan.disable));
    let merge = |from_cluster: &[String], own: &[String], against: &[String]| -> Vec<String> {
        let mut v: Vec<String> = from_cluster
            .iter()
            .filter(|f| !against.contains(f))
            .cloned()
            .collect();
        for f in own {
            if !v.contains(f) {
                v.push(f.clone());
            }
        }
        v
    };
    let require = merge(&cpu.require, &own_require, &own_disable);
    let disable = merge(&cpu.disable, &own_disable, &own_require);
    // The key keeps the rule that set it; the baseline's features name their own rule through
    // Plan::feature_rule.
    for (slot, value) in [(&mut plan.require, require), (&mut plan.disable, disable)] {
        if !value.is_empty() {
            let rule = slot
                .as_ref()
                .map_or_else(|| rule.clone(), |s| s.rule.clone());
            *slot = Some(Set { value, rule });
        }
    }
    plan.model = Some(Set {
        value: cpu.model.clone(),
        rule: rule.clone(),
    });
    plan.cluster = Some(Set { value: cpu, rule });
    Ok(plan)
}

/// The cluster's CPU from `host`'s `[host] cluster` files and cpu_map (the `compute` of
/// [`Host::cluster_cpu`]).
///
/// # Errors
/// One sentence naming the policy and the file or the reason: no `[host] cluster`, no cpu_map
/// directory (the built-in model table has no CPUID data), a facts file that is missing,
/// unreadable or not host facts, an unknown model or feature, no CPU common to the hosts, or
/// hosts without a baseline (aarch64).
pub fn cluster_cpu(host: &Host) -> std::result::Result<ClusterCpu, String> {
    let Some(files) = &host.cluster else {
        return Err(
            "no [host] cluster names the hosts' facts files (`[host] cluster = [\"DIR or files\"]`)"
                .into(),
        );
    };
    let source = &files.source;
    let Some(map) = &host.cpu_map_dir else {
        return Err(format!(
            "{source}: libvirt's cpu_map is not at {DEFAULT_CPU_MAP} (libvirt not installed?): give [host] cpu_map or --cpu-map; a cluster's baseline is computed on libvirt's CPUID data, which the built-in model table lacks"
        ));
    };
    let opts = ClusterOptions {
        migratable: true,
        strict_vendor: false,
    };
    let report =
        baseline_from_files(&files.value, map, &opts).map_err(|e| format!("{source}: {e}"))?;
    let Some(b) = &report.baseline else {
        return Err(format!(
            "{source}: the hosts are {}: no custom CPU model is migration-safe there, so the cluster has no baseline; give these guests cpu.mode = \"host-passthrough\" and migrate them only inside a group of identical hosts (`virt-cpu-policy baseline` lists the groups)",
            report.arch
        ));
    };
    let blocked = Level::ALL
        .into_iter()
        .filter(|l| Some(*l) > report.level)
        .map(|l| {
            let hosts = report
                .blocking(l)
                .into_iter()
                .map(|(h, lacks)| format!("{h} (missing {})", lacks.join(", ")))
                .collect();
            (l, hosts)
        })
        .collect();
    Ok(ClusterCpu {
        model: b.cpu.model.clone(),
        require: b.cpu.require.clone(),
        disable: b.cpu.disable.clone(),
        vendor: b.cpu.vendor.clone(),
        features: report.features.clone(),
        level: report.level,
        blocked,
        hosts: report.hosts.iter().map(|h| h.name.clone()).collect(),
        source: source.clone(),
    })
}
