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
use crate::guest_os::{Floor, GuestOs, OsSource};
use crate::libvirt::cpu_def::{CpuCheck, CpuMode, FeaturePolicy};
use crate::policy::Plan;
use roxmltree::Node;
use std::collections::BTreeSet;

/// The rule every finding of the floor is attributed to, before the OS's short name: `the floor
/// of rhel10.0`.
const FLOOR_RULE: &str = "the floor of ";

/// The rule the floor of `os` is attributed to: `the floor of rhel10.0`.
#[must_use]
pub fn floor_rule(os: &GuestOs) -> String {
    format!("{FLOOR_RULE}{}", os.short())
}

/// The rule a metric's `rule` label gives for `rule`: the floors of every OS as one,
/// `the floor of the guest's OS`, other rules as they are (the policy's names and libvirt's
/// codes: a closed set). A label's values must be a closed set (each value is a series); the OS
/// a guest names is free text from its domain, said in the journal, `check` and `audit`.
#[must_use]
pub fn bounded_rule(rule: &str) -> &str {
    if rule.starts_with(FLOOR_RULE) {
        "the floor of the guest's OS"
    } else {
        rule
    }
}

/// Whether finding `f` is about the floor of the guest's OS (`os-floor`, or its `not-compared`):
/// a question for a start only, a running guest's OS having booted on the CPU it keeps.
#[must_use]
pub fn is_floor_finding(f: &Finding) -> bool {
    f.code == Code::OsFloor
        || (f.code == Code::NotCompared
            && f.rule.as_deref().is_some_and(|r| r.starts_with(FLOOR_RULE)))
}

/// The check of the first `<cpu>` (`cpu`, None when there is none: QEMU's default, `qemu64`).
pub(super) fn check(
    dom: &Domain<'_>,
    cpu: Option<Node<'_, '_>>,
    plan: &Plan,
    facts: &DomainFacts<'_>,
    out: &mut Vec<Finding>,
) {
    match judge(dom, cpu, plan, facts) {
        Judged::Short(f) => out.push(*f),
        // A check the guest's boot makes (its kernel) that no fact here lets the tool make:
        // never "conforms" for it.
        Judged::Missing(why) => {
            if let Some((os, Some(floor))) = &plan.os {
                out.push(
                    Finding::warning(
                        Code::NotCompared,
                        format!(
                            "not compared: {} needs {} ({}); {why}",
                            os.short(),
                            floor.needs(),
                            floor.source
                        ),
                        "give the host's virsh domcapabilities (--caps, a <hostFacts>, or the daemon's snapshot), or run the tool on the host",
                    )
                    .rule(floor_rule(os)),
                );
            }
        }
        _ => {}
    }
}

/// What [`judge`] found: short of the floor, or how far it got.
enum Judged {
    /// Below the floor: the `os-floor` error.
    Short(Box<Finding>),
    /// The CPU has the floor (or the plan's rewrite gives it, and `cpu-level` says what is short).
    Reaches,
    /// A rule waives it (`cpu.os_floor = false`): the rule's name.
    Waived(String),
    /// Not judged: nothing to judge it by (no OS named, no floor known, not x86_64, QEMU's
    /// whole TCG CPU): why.
    Not(String),
    /// Not judged for want of a fact the judgement needs (this host's host-model or TCG CPU):
    /// why, naming it. A `not-compared` warning; `fleet` says `not-compared` there.
    Missing(String),
}

/// The floor of the guest's OS judged on the first `<cpu>` (`cpu`, None: QEMU's default).
fn judge(
    dom: &Domain<'_>,
    cpu: Option<Node<'_, '_>>,
    plan: &Plan,
    facts: &DomainFacts<'_>,
) -> Judged {
    let (os, floor) = match floor_to_judge(dom, plan) {
        Ok(judged) => judged,
        Err(not) => return not,
    };
    // The word as written, for the messages: [`answer`] judges a document whose mode libvirt
    // may not know (`cpu-mode-invalid` says so), and names that word.
    let mode = cpu
        .and_then(|c| c.attribute("mode"))
        .unwrap_or(CpuMode::Custom.as_str());
    let explicit = cpu.map(cpu_features).unwrap_or_default();
    match CpuMode::parse(mode) {
        Some(CpuMode::Custom) => judge_custom(cpu, os, floor, &explicit, plan, facts),
        known if dom.virt_type() == "kvm" || known == Some(CpuMode::HostModel) => {
            judge_host_given(mode, os, floor, &explicit, facts)
        }
        // maximum and host-passthrough under TCG: QEMU's whole TCG CPU, judged by the TCG checks.
        _ => Judged::Not(format!(
            "QEMU's whole TCG CPU ({mode} under TCG) is judged by the TCG checks, not against the floor"
        )),
    }
}

/// The guest's OS and the floor to judge it by, or why there is none to judge before the CPU
/// is looked at: no OS named, no floor known for it, a guest not x86-64 (the floors are x86-64
/// levels and features), or a rule's waiver (`cpu.os_floor = false`).
fn floor_to_judge<'p>(
    dom: &Domain<'_>,
    plan: &'p Plan,
) -> Result<(&'p GuestOs, &'static Floor), Judged> {
    let (os, floor) = match &plan.os {
        Some((os, Some(floor))) => (os, *floor),
        Some((os, None)) if os.source == OsSource::Libosinfo => {
            return Err(Judged::Not(format!(
                "no floor is known for {} (no row of the floors table names it)",
                os.short()
            )));
        }
        // A `<description>` names an OS only where a row's CloudStack name matches it: CloudStack's
        // guest OS name of an OS without a known floor (x86-64-v1 needs no row), or free text.
        Some((os, None)) => {
            return Err(Judged::Not(format!(
                "no floor is known for '{}' (the <description>, CloudStack's guest OS name where CloudStack wrote it: no row of the floors table names it; an OS that runs on x86-64-v1 needs none)",
                os.short()
            )));
        }
        None => {
            return Err(Judged::Not(
                "the domain names no OS (no libosinfo <os id> in <metadata>, no CloudStack guest OS name in <description> that the floors table knows)"
                    .into(),
            ));
        }
    };
    if dom.arch() != "x86_64" {
        return Err(Judged::Not(format!(
            "the floors are x86-64 levels and features: {} is not judged on an {} guest",
            os.short(),
            dom.arch()
        )));
    }
    if let Some(r) = plan.floor_waiver() {
        return Err(Judged::Waived(r.rule.clone()));
    }
    Ok((os, floor))
}

/// A custom CPU against the floor: its model's features (cpu_map) with the ones it lists. Short
/// of the floor is `os-floor`, unless the plan asks for the floor (the rewrite gives it, and the
/// rule's `cpu-level` says what is short); a CPU with the floor as written can still lose some
/// of it where QEMU drops what the host cannot give ([`given_short_of`]).
fn judge_custom(
    cpu: Option<Node<'_, '_>>,
    os: &GuestOs,
    floor: &Floor,
    explicit: &[(String, Option<FeaturePolicy>)],
    plan: &Plan,
    facts: &DomainFacts<'_>,
) -> Judged {
    let Some((model, feats)) = facts.custom_cpu_features(cpu, explicit) else {
        // `cpu-model-unknown` says so: not a second finding.
        return Judged::Not("the CPU model's features are not known (not in the cpu_map)".into());
    };
    let what = format!("this CPU (model {model})");
    let needs = floor.needs();
    let fix = format!(
        "give the guest a CPU with {needs}: `cpu.os_floor = true` on a rule that matches it (the default policy's) makes `virt-cpu-policy rewrite` write it; `cpu.os_floor = false` waives the floor"
    );
    match short_of(os, floor, &feats, &what, &fix) {
        // The plan asks for the floor: the rewrite gives it, and `cpu-level` says so.
        Some(_) if plan.asks_floor(floor) => Judged::Reaches,
        Some(f) => Judged::Short(Box::new(f)),
        None => given_short_of(cpu, os, floor, &feats, &what, facts),
    }
}

/// A CPU this host gives as it is (`mode`, the word as written: host-model, or any but custom
/// under KVM) against the floor: domcapabilities' host-model CPU with the features listed. No
/// rewrite changes what the host gives, so the fix is another host; without domcapabilities the
/// floor is not judged for want of that fact.
fn judge_host_given(
    mode: &str,
    os: &GuestOs,
    floor: &Floor,
    explicit: &[(String, Option<FeaturePolicy>)],
    facts: &DomainFacts<'_>,
) -> Judged {
    let Some((feats, source)) = facts.host_model_features(explicit, true) else {
        return Judged::Missing(format!(
            "this host's {mode} CPU is not known (no domcapabilities, nor QEMU's KVM host CPU in this machine's QEMU capability cache)"
        ));
    };
    let fix = format!(
        "run the guest on a host whose CPU gives {}: no rewrite changes what this host gives",
        floor.needs()
    );
    short_of(
        os,
        floor,
        &feats,
        &format!("this host's {mode} CPU (per {source})"),
        &fix,
    )
    .map_or(Judged::Reaches, |f| Judged::Short(Box::new(f)))
}

/// What an answer says of the guest's OS and its floor (`check --format json`'s `os`, the
/// `os floor:` line of its text; docs/os-floor.md).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct OsAnswer {
    /// libosinfo's OS id, or CloudStack's guest OS name a row of the floors table knows; None
    /// when the domain names no OS.
    pub id: Option<String>,
    /// `libosinfo` or `cloudstack`; None with no id.
    pub source: Option<&'static str>,
    /// What the OS needs of the CPU ([`Floor::needs`]: `x86-64-v3`, `sse4.2 + popcnt`); None
    /// when no row of the floors table names it.
    pub needs: Option<String>,
    /// `judged` (an `os-floor` error says when the CPU is below it), `waived` (a rule's
    /// `cpu.os_floor = false`) or `not-judged`.
    pub floor: &'static str,
    /// Why it was waived or not judged (the rule, or the fact missing); None when judged.
    pub why: Option<String>,
    /// Not judged for want of a fact the judgement needs (not said in JSON: `why` names it);
    /// `fleet` counts such a pair `not-compared`.
    #[serde(skip)]
    pub fact_missing: bool,
}

impl OsAnswer {
    /// The `os floor:` line of `check`'s text report.
    #[must_use]
    pub fn line(&self) -> String {
        let os = match (&self.id, &self.needs) {
            (Some(_), Some(needs)) => format!("{} needs {needs}", self.short()),
            _ => String::new(),
        };
        let kind = self.floor.replace('-', " ");
        match (kind.as_str(), &self.why) {
            ("judged", _) => format!("os floor: judged ({os})"),
            (kind, Some(why)) if os.is_empty() => format!("os floor: {kind}: {why}"),
            (kind, Some(why)) => format!("os floor: {kind} ({os}): {why}"),
            (kind, None) => format!("os floor: {kind}"),
        }
    }

    fn short(&self) -> String {
        let source = match self.source {
            Some("libosinfo") => OsSource::Libosinfo,
            _ => OsSource::Description,
        };
        GuestOs {
            id: self.id.clone().unwrap_or_default(),
            source,
        }
        .short()
    }
}

/// The guest's OS and whether its floor was judged on `dom` (the document as it will be
/// written) with `plan` and `facts`, as the `os-floor` check judges it.
#[must_use]
pub fn answer(dom: &Domain<'_>, plan: &Plan, facts: &DomainFacts<'_>) -> OsAnswer {
    let cpu = dom.cpus().first().copied();
    let mut fact_missing = false;
    let (floor, why) = match judge(dom, cpu, plan, facts) {
        Judged::Short(_) | Judged::Reaches => ("judged", None),
        Judged::Waived(rule) => (
            "waived",
            Some(format!("rule '{rule}' sets cpu.os_floor = false")),
        ),
        Judged::Not(why) => ("not-judged", Some(why)),
        Judged::Missing(why) => {
            fact_missing = true;
            ("not-judged", Some(why))
        }
    };
    let named = plan
        .os
        .as_ref()
        .filter(|(os, f)| os.source == OsSource::Libosinfo || f.is_some());
    OsAnswer {
        id: named.map(|(os, _)| os.id.clone()),
        source: named.map(|(os, _)| match os.source {
            OsSource::Libosinfo => "libosinfo",
            OsSource::Description => "cloudstack",
        }),
        needs: named.and_then(|(_, f)| f.map(Floor::needs)),
        floor,
        why,
        fact_missing,
    }
}

/// A custom CPU with the floor as written, as the host gives it: QEMU drops at start what it
/// cannot give, so the guest has only that of it.
///
/// * Under TCG with `check='none'` (libvirt compares nothing; under `partial` it refuses what
///   TCG lacks, `tcg-cpu-missing`): what this host's TCG gives
///   ([`crate::tcg_facts::TcgFacts::host_cpu`]).
/// * Under KVM (libvirt's start check compares with the host's own CPUID, which may have a
///   feature KVM cannot give: `pni`, `popcnt` on a nested host; the live XML then disables
///   them): what KVM's host-model CPU gives ([`DomainFacts::host_model_features`]). Under
///   `check='full'` libvirt refuses such a start itself (`kvm-check-full`).
///
/// When what the host gives is not known, neither is whether the guest keeps its floor.
fn given_short_of(
    cpu: Option<Node<'_, '_>>,
    os: &GuestOs,
    floor: &Floor,
    feats: &BTreeSet<String>,
    what: &str,
    facts: &DomainFacts<'_>,
) -> Judged {
    let check = |vt| {
        cpu.map_or(CpuCheck::default_for(CpuMode::Custom, vt), |c| {
            super::tcg::check_of(c, CpuMode::Custom, vt)
        })
    };
    let (gives, how, fix) = if facts.tcg.x86_tcg {
        if check("qemu") != CpuCheck::None {
            return Judged::Reaches;
        }
        let Some((gives, source)) = facts.tcg.host_cpu.clone() else {
            return Judged::Missing(
                "this host's TCG CPU is not known (no domcapabilities for x86_64 qemu): what QEMU drops at start under check='none' is not known".into(),
            );
        };
        (
            gives,
            format!(
                "as this host's TCG gives it (per {source}; QEMU drops the rest at start under check='none')"
            ),
            "run the guest under KVM on a host whose CPU has them, or on a QEMU whose TCG emulates them",
        )
    } else if facts.virt_type == "kvm" && check("kvm") != CpuCheck::Full {
        let Some((gives, source)) = facts.host_model_features(&[], true) else {
            return Judged::Missing(
                "what KVM gives is not known (no kvm domcapabilities, nor QEMU's KVM host CPU in this machine's QEMU capability cache): QEMU drops at start what KVM cannot give".into(),
            );
        };
        (
            gives,
            format!(
                "as KVM gives it (per the host-model CPU of {source}; QEMU drops the rest at start)"
            ),
            "run the guest on a host whose CPU and KVM give them (virsh domcapabilities: the host-model CPU), or under TCG on a QEMU that emulates them",
        )
    } else {
        return Judged::Reaches;
    };
    let kept: BTreeSet<String> = feats.intersection(&gives).cloned().collect();
    short_of(os, floor, &kept, &format!("{what} {how}"), fix)
        .map_or(Judged::Reaches, |f| Judged::Short(Box::new(f)))
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
        .rule(floor_rule(os)),
    )
}
