//! The rewrite: the smallest edit of a domain's text that makes it conform to the policy.
//!
//! One direction, one step per module:
//! 1. `desired`: every top-level `<cpu>` folded into one desired `<cpu>`;
//! 2. `cpu`: the plan's `cpu.*` keys and libvirt's mode rules applied to it;
//! 3. `vcpu`: the plan's `vcpu.*` keys: the maximum and what follows it (`<vcpu>`,
//!    `<topology>`, `<vcpus>`, NUMA cells, IOMMU), and for an x86 TCG guest `apic`: a maximum
//!    this QEMU runs (clamped below APIC ID 255, or with x2APIC required in the guest CPU);
//! 4. `emit`: the desired `<cpu>` written back as splices on the original text;
//! 5. [`crate::validate`] on the result.
//!
//! The plan, with a `cpu.model = "baseline"` turned into the cluster's CPU, and the host facts
//! come first, once ([`Pipeline`]); no step asks the host anything.
//! Everything outside an edited element is untouched, so a conforming domain comes out identical
//! and `rewrite(rewrite(x)) == rewrite(x)`.

mod cpu_rules;
mod desired;
mod emit;
mod vcpu;

pub use vcpu::reshape;

use crate::change::{Action, BUILTIN_RULE, Change, Notes};
use crate::domain::Domain;
use crate::domain_facts::DomainFacts;
use crate::error::{Error, Result};
use crate::finding::{Code, Finding, Severity};
use crate::host::Host;
use crate::libvirt::cpu_def::CpuMode;
use crate::pipeline::Pipeline;
use crate::policy::{Mode, Plan, Policy};
use crate::validate;
use crate::xml::{child, text_of, written_value};
use roxmltree::Node;
use serde::Serialize;

/// The result of rewriting one document.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    /// `<name>` of the domain.
    pub name: String,
    /// Whether the domain's type is one the tool rewrites (`kvm`, `qemu`).
    pub in_scope: bool,
    /// The text to write: the rewritten document, or the input itself (audit mode, out of scope,
    /// already conforming).
    #[serde(skip)]
    pub output: String,
    /// Whether the rewritten document differs from the input (in audit mode: would differ).
    pub changed: bool,
    /// What changed and why.
    pub changes: Vec<Change>,
    /// Errors and warnings about the result.
    pub findings: Vec<Finding>,
    /// A note for out-of-scope domains.
    pub note: Option<String>,
    /// The guest's OS and whether its CPU floor was judged ([`crate::validate::os_answer`]);
    /// None out of scope.
    pub os: Option<crate::validate::OsAnswer>,
}

impl Outcome {
    /// Whether any finding is an error.
    #[must_use]
    pub fn has_errors(&self) -> bool {
        self.findings.iter().any(|f| f.severity == Severity::Error)
    }

    /// The outcome of a domain of a type the tool does not handle (`xen`, `lxc`...): passed
    /// through unchanged, with a note.
    #[must_use]
    pub fn out_of_scope(dom: &Domain<'_>) -> Outcome {
        Outcome {
            note: Some(format!(
                "domain type '{}' is not handled (only kvm and qemu are); passed through unchanged",
                dom.virt_type()
            )),
            name: dom.name(),
            in_scope: false,
            output: dom.text.to_string(),
            changed: false,
            changes: Vec::new(),
            findings: Vec::new(),
            os: None,
        }
    }
}

/// Rewrite one domain document under `policy`, with `host` facts.
///
/// The returned [`Outcome::output`] is the input itself when the domain is out of scope, already
/// conforms, or the policy's mode is audit; otherwise the rewritten document. Findings of
/// severity error mean the document cannot be made to conform (the command line exits 1 and
/// writes nothing).
///
/// # Errors
/// [`Error`] for input that cannot be judged: malformed XML, a DTD, not a `<domain>`; and
/// [`Error::Cluster`] when the plan's `cpu.model = "baseline"` has no answer.
pub fn rewrite(text: &str, what: &str, policy: &Policy, host: &Host) -> Result<Outcome> {
    let dom = Domain::parse(text, what)?;
    if !dom.in_scope() {
        return Ok(Outcome::out_of_scope(&dom));
    }
    rewrite_pipeline(&Pipeline::new(&dom, policy, host)?, what, policy)
}

/// [`rewrite`] of a domain already planned, with its facts (the hook validates the input and
/// rewrites it with the same plan and facts; `audit` reads its columns from them).
///
/// # Errors
/// As [`rewrite`], for the output.
pub fn rewrite_pipeline(p: &Pipeline<'_, '_>, what: &str, policy: &Policy) -> Result<Outcome> {
    let (dom, plan, facts) = (&p.dom, &p.plan, &p.facts);
    if !dom.in_scope() {
        return Ok(Outcome::out_of_scope(dom));
    }
    let text = dom.text;
    let mut notes = Notes::default();
    let cpus = dom.cpus();
    let mut desired = desired::merge(&cpus, &mut notes.findings);
    explain_merge(&desired, &cpus, &mut notes);
    cpu_rules::apply(&mut desired, plan, dom, facts, &mut notes);
    // Only an x86 TCG guest's maximum can need x2APIC in its CPU (rewrite/vcpu/x2apic.rs).
    let x2apic = facts.tcg.x86_tcg && vcpu::x2apic::desired_has_x2apic(&desired, dom.arch(), facts);
    let topology = desired.single("topology");
    let v = vcpu::apply(dom, plan, facts, topology, desired.numa, x2apic);
    desired.topology_markup = v.topology_markup;
    desired.numa_markup = v.numa_markup;
    notes.extend(v.notes);
    if let Some(need) = &v.x2apic {
        vcpu::x2apic::require_x2apic(&mut desired, need, dom.arch(), facts, &mut notes);
    }
    let xml_error = |message: String| Error::Xml {
        what: what.to_string(),
        message,
    };
    let mut edits = emit::emit(dom, &cpus, &desired).map_err(xml_error)?;
    edits.extend(v.edits);
    let rewritten = edits.apply(text).map_err(|e| xml_error(e.to_string()))?;
    let changed = rewritten != text;
    if !changed {
        notes.changes.clear();
    } else if notes.changes.is_empty() {
        // Every edit has a reason; this one catches a reshaping no rule above names.
        notes.change(Change::new(
            BUILTIN_RULE,
            Action::Set,
            "cpu",
            "<cpu> rewritten into the shape libvirt reads",
        ));
    }
    let (mut findings, os) = validate_result(dom, &rewritten, changed, plan, facts, notes.findings);
    if changed {
        findings.extend(passthrough_warning(dom, &rewritten));
    }
    // The stack's known hazards of a start on this host (the rewrite changes no release).
    let refused = crate::hazards::When::refused_by_capabilities(
        findings
            .iter()
            .filter(|f| f.severity == crate::finding::Severity::Error)
            .map(|f| f.code),
    );
    findings.extend(crate::validate::hazard::on_this_host(
        dom,
        false,
        facts.hazard_releases,
        refused,
    ));
    let output = if policy.mode == Mode::Audit {
        text.to_string()
    } else {
        rewritten
    };
    Ok(Outcome {
        name: dom.name(),
        in_scope: true,
        output,
        changed,
        changes: notes.changes,
        findings,
        note: None,
        os,
    })
}

/// The warning when the rewrite makes a KVM guest's CPU host-passthrough (a policy's `cpu.mode`,
/// or an orchestrator's appended `<cpu mode='host-passthrough'>` folded into the one libvirt
/// reads): such a guest sees its host's CPU as is and migrates live only to hosts of the same
/// CPU and microcode (libvirt's formatdomain: "the guest may hang or crash" between hosts not
/// identical in hardware), which the operator should know before it is written.
fn passthrough_warning(dom: &Domain<'_>, rewritten: &str) -> Option<Finding> {
    let mode_of = |d: &Domain<'_>| d.cpus().first().and_then(|c| crate::domain::cpu_mode(*c));
    let passthrough = Some(CpuMode::HostPassthrough);
    if dom.virt_type() != "kvm"
        || mode_of(dom) == passthrough
        || !rewritten.contains(CpuMode::HostPassthrough.as_str())
    {
        return None;
    }
    let out = Domain::parse(rewritten, "the rewritten domain").ok()?;
    let fix = if crate::libvirt::arch::is_x86(dom.arch()) {
        "keep such guests on hosts of one CPU (`virt-cpu-policy fleet --pairs` names each pair's passthrough-group), or give them host-model or a named model to migrate anywhere the model runs"
    } else {
        "keep such guests on hosts of one CPU (`virt-cpu-policy fleet --pairs` names each pair's passthrough-group): KVM has no host-model on this arch"
    };
    (mode_of(&out) == passthrough).then(|| {
        Finding::warning(
            Code::PassthroughGroup,
            "the rewrite makes the guest's CPU host-passthrough: it sees this host's CPU as is, and migrates live only to hosts of the same CPU and microcode (libvirt: between hosts not identical in hardware the guest may hang or crash)",
            fix,
        )
    })
}

/// The folding of several `<cpu>` elements, of a child written twice and of a feature listed
/// twice, each explained.
fn explain_merge(desired: &desired::Desired<'_, '_>, all: &[Node<'_, '_>], notes: &mut Notes) {
    let cpus = all.len();
    if cpus > 1 {
        let what = format!(
            "{cpus} <cpu> elements folded into the first (libvirt reads only the first one's mode, model and features)"
        );
        notes.change(
            Change::new(BUILTIN_RULE, Action::Fold, "cpu", what)
                .old(Some(cpus.to_string()))
                .new_value("1"),
        );
        explain_fold(desired, all[0], notes);
    }
    if let (Some(raw), Some(m)) = (&desired.padded_model, &desired.model) {
        let what = format!(
            "<model>{raw}</model> -> <model>{}</model>: libvirt takes the name as written, spaces included (\"Unknown CPU model {raw}\")",
            m.text
        );
        notes.change(
            Change::new(BUILTIN_RULE, Action::Set, "model", what)
                .old(Some(raw.as_str()))
                .new_value(&m.text),
        );
    }
    for r in &desired.repeated {
        let (e, kept, dropped) = (r.element, &r.kept, &r.dropped);
        let what = format!(
            "<{e}> given more than once in one <cpu>: the first ({kept}) kept, as libvirt reads it; {dropped} dropped"
        );
        notes.change(
            Change::new(BUILTIN_RULE, Action::Fold, e, what)
                .old(Some(dropped))
                .new_value(kept),
        );
    }
    for (f, before) in &desired.duplicates {
        let p = desired.feature(f).map_or("require", |f| f.policy.as_str());
        let what = format!(
            "<feature name='{f}'> listed more than once: kept once, with the last policy '{p}' (libvirt: \"CPU feature '{f}' specified more than once\")"
        );
        notes.change(
            Change::new(BUILTIN_RULE, Action::Fold, "feature", what)
                .name(f)
                .attribute("policy")
                .old(Some(before))
                .new_value(p),
        );
    }
}

/// The `<cpu>` attributes a change names (`attribute` is one of a known set).
const CPU_ATTRIBUTES: [&str; 5] = [
    "mode",
    "match",
    "check",
    "migratable",
    "deprecated_features",
];

/// What the fold changes in the CPU libvirt reads, the first `<cpu>`'s: each attribute, the
/// model, a single child and a feature policy a later `<cpu>` overrides or adds, old as the first
/// `<cpu>` has it (libvirt's default `custom` for an absent mode).
fn explain_fold(desired: &desired::Desired<'_, '_>, first: Node<'_, '_>, notes: &mut Notes) {
    let later = " (from a later <cpu>, which libvirt ignored)";
    let fold = |element, what: String| Change::new(BUILTIN_RULE, Action::Fold, element, what);
    for (name, value) in &desired.attrs {
        let old = first
            .attribute(name.as_str())
            .or((name == "mode").then_some(CpuMode::Custom.as_str()));
        if old != Some(value.as_str()) {
            let was = old.map_or_else(|| "(none)".to_string(), |o| format!("'{o}'"));
            let what = format!("<cpu {name}>: {was} -> '{value}'{later}");
            let mut c = fold("cpu", what).old(old).new_value(value);
            c.attribute = CPU_ATTRIBUTES.into_iter().find(|a| a == name);
            notes.change(c);
        }
    }
    let first_model = child(first, "model");
    if let Some(m) = &desired.model {
        let old = first_model.and_then(text_of);
        if old.as_deref() != Some(m.text.as_str()) && desired.padded_model.is_none() {
            let what = format!(
                "<model>: {} -> {}{later}",
                old.as_deref().unwrap_or("(none)"),
                m.text
            );
            notes.change(fold("model", what).old(old).new_value(&m.text));
        }
    }
    for (name, node) in &desired.singles {
        if node.parent() == Some(first) {
            continue;
        }
        let element = desired::SINGLES
            .into_iter()
            .find(|s| s == name)
            .unwrap_or("cpu");
        let old = child(first, name).map(written_value);
        let new = written_value(*node);
        let what = format!(
            "<{name}>: {} -> {new}{later}",
            old.as_deref().unwrap_or("(none)")
        );
        notes.change(fold(element, what).old(old).new_value(new));
    }
    for f in &desired.features {
        let old = f.node.map(|n| n.attribute("policy").unwrap_or("require"));
        if old == Some(f.policy.as_str()) || (old.is_some() && desired.is_duplicate(&f.key)) {
            continue;
        }
        let what = format!(
            "<feature name='{}'>: policy '{}' -> '{}'{later}",
            f.key,
            old.unwrap_or("(none)"),
            f.policy
        );
        let c = fold("feature", what).name(&f.key).attribute("policy");
        notes.change(c.old(old).new_value(&f.policy));
    }
}

/// The findings of planning, then validation's of what will be written (the input itself when
/// nothing changes: no second parse), then cpu_map problems; and the guest's OS floor as judged
/// on it (None when the rewrite does not parse). A refusal from planning (topology
/// `keep`, say) and validation of the unchanged result say the same thing: the planning one,
/// which names the rule, is kept.
fn validate_result(
    dom: &Domain<'_>,
    rewritten: &str,
    changed: bool,
    plan: &Plan,
    facts: &DomainFacts<'_>,
    mut findings: Vec<Finding>,
) -> (Vec<Finding>, Option<crate::validate::OsAnswer>) {
    let mut planned: Vec<Code> = findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .map(|f| f.code)
        .collect();
    if planned.contains(&Code::ClusterLevel) {
        // The level was left unreached on purpose (a host of the cluster lacks it): the planning
        // finding says why, and validation's "require the missing features" would be wrong.
        planned.push(Code::CpuLevel);
    }
    // The checks and the OS's floor, on the document as it will be written.
    let judged = |d: &Domain<'_>| {
        (
            // The input unchanged and a running guest's live XML: judged where it runs.
            validate::validate_as(d, plan, facts, !changed && d.is_live()),
            validate::os_answer(d, plan, facts),
        )
    };
    let validated = if changed {
        Domain::parse(rewritten, "the rewritten domain").map(|out| judged(&out))
    } else {
        Ok(judged(dom))
    };
    let os = match validated {
        Ok((v, os)) => {
            findings.extend(v.into_iter().filter(|f| !planned.contains(&f.code)));
            Some(os)
        }
        Err(e) => {
            findings.push(Finding::error(
                Code::Internal,
                format!("the rewritten document does not parse: {e}"),
                "report this as a bug",
            ));
            None
        }
    };
    for p in &facts.cpu_map_problems {
        findings.push(Finding::warning(
            Code::CpuMapUnreadable,
            p.clone(),
            "repair or reinstall libvirt's cpu_map files",
        ));
    }
    findings.dedup();
    (findings, os)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::HostOptions;

    fn run(xml: &str, policy: &str) -> Outcome {
        let p = Policy::parse(policy, "test").unwrap();
        let h = Host::discover(&HostOptions::default()).unwrap();
        rewrite(xml, "test", &p, &h).unwrap()
    }

    const V2: &str =
        "[[rule]]\nname = \"v2\"\nmatch = { arch = \"x86_64\" }\ncpu.min_level = \"x86-64-v2\"\n";

    #[test]
    fn bare_cpu_gets_default_model_and_level() {
        let x = "<domain type='kvm'>\n  <os>\n    <type arch='x86_64'>hvm</type>\n  </os>\n  <cpu>\n    <topology sockets='1' cores='2' threads='1'/>\n  </cpu>\n</domain>\n";
        let o = run(x, V2);
        assert!(o.output.contains("<model>qemu64</model>"), "{}", o.output);
        for f in ["lahf_lm", "popcnt", "sse4.1", "sse4.2", "ssse3"] {
            assert!(
                o.output
                    .contains(&format!("<feature policy='require' name='{f}'/>")),
                "{f}: {}",
                o.output
            );
        }
        assert!(o.output.contains("<feature policy='disable' name='svm'/>"));
        assert!(
            o.output
                .contains("    <topology sockets='1' cores='2' threads='1'/>\n")
        );
        let again = run(&o.output, V2);
        assert_eq!(again.output, o.output);
        assert!(!again.changed);
    }

    #[test]
    fn conforming_is_identical_and_other_types_pass() {
        let x = "<domain type=\"kvm\"><os><type arch=\"x86_64\">hvm</type></os><cpu mode=\"custom\"><model>Nehalem</model></cpu></domain>";
        let o = run(x, V2);
        assert_eq!(o.output, x);
        assert!(!o.changed);
        let x = "<domain type='xen'><os><type arch='x86_64'>hvm</type></os><cpu/></domain>";
        let o = run(x, V2);
        assert_eq!(o.output, x);
        assert!(!o.in_scope);
    }

    #[test]
    fn second_cpu_folds_into_first() {
        let x = "<domain type='qemu'>\n  <os><type arch='x86_64'>hvm</type></os>\n  <cpu mode='host-passthrough'/>\n  <cpu>\n    <numa>\n      <cell id='0' cpus='0-1' memory='1024'/>\n    </numa>\n  </cpu>\n</domain>";
        let o = run(x, V2);
        assert_eq!(o.output.matches("<cpu").count(), 1, "{}", o.output);
        assert!(o.output.contains("mode='maximum'"), "{}", o.output);
        assert!(o.output.contains("<numa>"));
        assert_eq!(run(&o.output, V2).output, o.output);
    }

    #[test]
    fn changes_are_structured() {
        let x = "<domain type='kvm'><os><type arch='x86_64'>hvm</type></os><cpu><model>Penryn</model></cpu><cpu mode='host-model'/></domain>";
        let o = run(x, V2);
        let fold = o.changes.iter().find(|c| c.action == Action::Fold).unwrap();
        assert_eq!((fold.element, fold.old.as_deref()), ("cpu", Some("2")));
        // libvirt ran this guest with the first <cpu>'s custom Penryn: the later host-model is
        // a change, recorded as the fold's, once.
        let mode: Vec<_> = o
            .changes
            .iter()
            .filter(|c| c.attribute == Some("mode"))
            .collect();
        assert_eq!(mode.len(), 1, "{:?}", o.changes);
        assert_eq!(
            (
                mode[0].action,
                mode[0].old.as_deref(),
                mode[0].new.as_deref()
            ),
            (Action::Fold, Some("custom"), Some("host-model"))
        );
    }
}
