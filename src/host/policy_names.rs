//! A policy checked against a host's libvirt before it is used: every CPU model and feature name
//! its rules ask for is one this host's libvirt knows (its cpu_map), every model KVM can give
//! here (its domcapabilities' `usable`), and every selector can match a guest of this host.
//!
//! The policy's own parse already refuses what is wrong in any host's eyes (an unknown key, a
//! wrong type, a level or mode libvirt does not have: [`crate::policy::Policy::parse`]). What is
//! checked here depends on the host: libvirt refuses a guest naming a model its cpu_map does not
//! define at start ("Unknown CPU model Nehalm") and a feature it does not know at define
//! ("unknown CPU feature: sse42"), so a policy naming one would make every guest it matches
//! fail, the policy's mistake and not the guests'. `virt-cpu-policy policy check`, `host
//! --policy`, the hook (as its `on_error`) and the daemon's reload ask it.

use super::Host;
use crate::finding::Severity;
use crate::libvirt::domcaps::Usable;
use crate::policy::{Policy, Rule};

/// One mistake of a policy on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyProblem {
    /// An error (the policy cannot be used here: a guest it matches would be refused) or a
    /// warning (it can, but does not do what it says: a selector that matches nothing, a model
    /// KVM cannot give in full).
    pub severity: Severity,
    /// The rule's `name`.
    pub rule: String,
    /// The key: `cpu.model`, `cpu.require`, `cpu.disable`, `match.arch`, `match.virt_type`,
    /// `match.machine`.
    pub key: &'static str,
    /// One sentence: what is wrong, in libvirt's words where it has some.
    pub message: String,
}

impl std::fmt::Display for PolicyProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: rule '{}': {}: {}",
            self.severity.as_str(),
            self.rule,
            self.key,
            self.message
        )
    }
}

/// The known name nearest to `name`, when one is near enough to be the one meant: the same
/// but for case (libvirt's names are case-sensitive: `nehalem` is not `Nehalem`), else at most
/// one edit in three characters (Levenshtein distance: `Nehalm`, `Skylake-Sever`, `ssse4.2`).
#[must_use]
pub fn nearest<'a>(name: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let lower = name.to_ascii_lowercase();
    let limit = (name.chars().count() / 3).max(1);
    known
        .into_iter()
        .filter(|k| *k != name)
        .map(|k| {
            let d = if k.to_ascii_lowercase() == lower {
                0
            } else {
                strsim::levenshtein(&lower, &k.to_ascii_lowercase())
            };
            (d, k)
        })
        .filter(|(d, _)| *d <= limit)
        .min()
        .map(|(_, k)| k)
}

/// libvirt's QEMU driver's virt types (`<domain type>`).
const VIRT_TYPES: [&str; 2] = ["kvm", "qemu"];

/// `" (did you mean X?)"`, or nothing.
fn did_you_mean(near: Option<&str>) -> String {
    near.map_or_else(String::new, |n| format!(" (did you mean {n}?)"))
}

/// Whether a rule's `match.arch` can match an x86 guest: its models and features are x86 names
/// (libvirt's x86 cpu_map) only then.
fn may_be_x86(rule: &Rule) -> bool {
    rule.matches
        .arch
        .as_ref()
        .is_none_or(|p| ["x86_64", "i686"].iter().any(|a| p.matches(a)))
}

impl Host {
    /// The mistakes of `policy` on this host, rule by rule in file order ([`PolicyProblem`]);
    /// empty when it can be used as it is. Model names are looked up in this host's cpu_map
    /// (else the built-in copy of libvirt 9.0's), feature names in libvirt's list of x86
    /// features and this host's `x86_features.xml`; a model the KVM domcapabilities mark
    /// `usable='no'` is a warning naming the features KVM cannot give (its blockers).
    #[must_use]
    pub fn policy_problems(&self, policy: &Policy) -> Vec<PolicyProblem> {
        self.problems(policy, true)
    }

    /// [`Host::policy_problems`]; the warnings only when `warnings` (the selectors ask every
    /// machine type this host's QEMU has: files the hook does not read at every start).
    fn problems(&self, policy: &Policy, warnings: bool) -> Vec<PolicyProblem> {
        let mut out = Vec::new();
        let mut models: Option<Vec<String>> = None;
        for rule in &policy.rules {
            let problem = |severity, key, message: String| PolicyProblem {
                severity,
                rule: rule.name.clone(),
                key,
                message,
            };
            if let Some(p) = rule
                .matches
                .arch
                .as_ref()
                .filter(|p| !crate::libvirt::arch::KNOWN.iter().any(|a| p.matches(a)))
            {
                out.push(problem(
                    Severity::Error,
                    "match.arch",
                    format!(
                        "'{}' matches no arch libvirt knows (x86_64, i686, aarch64, armv7l, ppc64le, s390x...): the rule never applies to any guest{}",
                        p.as_str(),
                        did_you_mean(nearest(p.as_str(), crate::libvirt::arch::KNOWN))
                    ),
                ));
                continue;
            }
            if warnings {
                self.selector_problems(rule, &mut out);
            }
            if !may_be_x86(rule) {
                continue;
            }
            if let Some(model) = rule.cpu.model.as_deref().filter(|m| *m != "baseline") {
                if self.model_features(model).is_none() {
                    let known = models.get_or_insert_with(|| self.model_names());
                    out.push(problem(
                        Severity::Error,
                        "cpu.model",
                        format!(
                            "'{model}' is not a CPU model of libvirt's cpu_map ({}): libvirt refuses every guest given it (\"Unknown CPU model {model}\"){}",
                            self.cpu_map_source(),
                            did_you_mean(nearest(model, known.iter().map(String::as_str)))
                        ),
                    ));
                } else if let Some(w) = self.kvm_unusable(model).filter(|_| warnings) {
                    out.push(problem(Severity::Warning, "cpu.model", w));
                }
            }
            let lists = [
                ("cpu.require", rule.cpu.require.as_deref()),
                ("cpu.disable", rule.cpu.disable.as_deref()),
            ];
            for (key, list) in lists {
                for f in list.unwrap_or_default() {
                    if !self.feature_known(f) {
                        out.push(problem(
                            Severity::Error,
                            key,
                            format!(
                                "'{f}' is not a CPU feature libvirt knows: libvirt refuses every guest given it (\"unknown CPU feature: {f}\"){}",
                                did_you_mean(nearest(f, crate::cpu::x86_feature_spellings()))
                            ),
                        ));
                    }
                }
            }
        }
        out
    }

    /// The errors of [`Host::policy_problems`] alone, one line each: the policy cannot be used
    /// here when there is any (the hook takes it as its `on_error`, the daemon keeps the policy
    /// it had).
    #[must_use]
    pub fn policy_errors(&self, policy: &Policy) -> Vec<String> {
        self.problems(policy, false)
            .into_iter()
            .filter(|p| p.severity == Severity::Error)
            .map(|p| format!("rule '{}': {}: {}", p.rule, p.key, p.message))
            .collect()
    }

    /// Every model name of this host's cpu_map (the built-in table's when it has none).
    fn model_names(&self) -> Vec<String> {
        self.full_cpu_map()
            .unwrap_or_else(|_| crate::libvirt::cpu_map::CpuMap::builtin())
            .model_names()
            .into_iter()
            .map(str::to_string)
            .collect()
    }

    /// The warning for `model` when a KVM domcapabilities of this host marks it `usable='no'`.
    fn kvm_unusable(&self, model: &str) -> Option<String> {
        let dc = self.domcaps.iter().find(|d| {
            d.virt_type == "kvm" && d.models.iter().any(|(m, u)| m == model && *u == Usable::No)
        })?;
        let blockers = dc
            .blockers
            .get(model)
            .filter(|b| !b.is_empty())
            .map_or_else(|| "some of its features".to_string(), |b| b.join(", "));
        Some(format!(
            "KVM on this host marks '{model}' usable='no' (per {}): it cannot give {blockers}; libvirt starts such a guest under check='partial' and QEMU drops them (check reports it per guest as cpu-level or cpu-model-unusable)",
            dc.source
        ))
    }

    /// `match.arch`, `match.virt_type` and `match.machine` globs that match nothing this host
    /// runs: the rule never applies (a typo, `kmv`), a warning.
    fn selector_problems(&self, rule: &Rule, out: &mut Vec<PolicyProblem>) {
        let m = &rule.matches;
        let mut warn = |key, message: String| {
            out.push(PolicyProblem {
                severity: Severity::Warning,
                rule: rule.name.clone(),
                key,
                message,
            });
        };
        if let Some(p) = &m.virt_type {
            if !VIRT_TYPES.iter().any(|v| p.matches(v)) {
                warn(
                    "match.virt_type",
                    format!(
                        "'{}' matches no virt type of libvirt's QEMU driver (kvm, qemu): the rule never applies{}",
                        p.as_str(),
                        did_you_mean(nearest(p.as_str(), VIRT_TYPES))
                    ),
                );
            }
        }
        // The capabilities' machine types, and as found those of libvirt's QEMU capability
        // cache (every emulator's).
        let cached = self.qemu_cache_all();
        let machines: Vec<&crate::libvirt::capabilities::MachineType> =
            self.machines.iter().chain(cached.iter()).collect();
        let mut arches: Vec<&str> = machines.iter().map(|t| t.arch.as_str()).collect();
        arches.sort_unstable();
        if let Some(p) = &m.arch {
            if !arches.is_empty() && !arches.iter().any(|a| p.matches(a)) {
                let mut known = arches.clone();
                known.dedup();
                warn(
                    "match.arch",
                    format!(
                        "'{}' matches no arch this host's QEMU runs ({}): the rule never applies here{}",
                        p.as_str(),
                        known.join(", "),
                        did_you_mean(nearest(p.as_str(), known.iter().copied()))
                    ),
                );
            }
        }
        if let Some(p) = &m.machine {
            let names = machines
                .iter()
                .flat_map(|t| std::iter::once(t.name.as_str()).chain(t.canonical.as_deref()));
            let mut names = names.peekable();
            if names.peek().is_some() && !names.any(|n| p.matches(n)) {
                warn(
                    "match.machine",
                    format!(
                        "'{}' matches no machine type this host's QEMU has (virsh capabilities): the rule never applies here",
                        p.as_str()
                    ),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nearest_name_is_the_one_meant() {
        let models = [
            "Nehalem",
            "Nehalem-IBRS",
            "Haswell",
            "Skylake-Server",
            "qemu64",
        ];
        assert_eq!(nearest("Nehalm", models), Some("Nehalem"));
        assert_eq!(nearest("nehalem", models), Some("Nehalem"));
        assert_eq!(nearest("Skylake-Sever", models), Some("Skylake-Server"));
        assert_eq!(nearest("QEMU64", models), Some("qemu64"));
        assert_eq!(nearest("Zen5", models), None);
        assert_eq!(
            nearest("Nehalem", models),
            None,
            "a known name needs no other"
        );
    }
}
