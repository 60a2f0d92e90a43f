//! The rewrite: turn a [`Plan`] into the smallest edit of the domain text.
//!
//! Steps, in the order the rules give them:
//! 1. fold every top-level `<cpu>` into the first (a later element's attributes and children
//!    override the earlier ones', features merge by name, `<numa>` is kept once);
//! 2. set mode, model, fallback and check from the plan; drop what the mode forbids (a model under
//!    `host-passthrough`/`maximum`, `match` under `host-model`, `migratable` outside
//!    `host-passthrough`/`maximum`);
//! 3. fix the modes libvirt refuses for the arch and virt type (aarch64 KVM has no `host-model`,
//!    TCG has no `host-passthrough`);
//! 4. apply `require` and `disable`;
//! 5. guarantee `min_level`: for a custom model, add `<feature policy='require'>` for each level
//!    feature the model (per libvirt's cpu_map) does not give; write the machine's default model out
//!    when there is none.
//!
//! The new `<cpu>` replaces the first one's bytes only when something in it changes; children that
//! stay are copied byte for byte, and the other `<cpu>` elements are deleted with their lines.
//! Everything outside is untouched, so a conforming domain comes out identical and
//! `rewrite(rewrite(x)) == rewrite(x)`.

use crate::cpu::{Level, normalize_feature};
use crate::domain::{Domain, child, text_of};
use crate::edit::{
    Edits, Item, child_indent, document_quote, end_tag_start, escape_attr, escape_text,
    is_self_closing, line_indent, newline, node_with_line, quote_of, render_element,
    start_tag_attr_end, start_tag_end, with_attrs,
};
use crate::edit::{is_blank, raw_range};
use crate::error::{Error, Result};
use crate::finding::{Finding, Severity};
use crate::host::Host;
use crate::policy::{Mode, Plan, Policy};
use crate::validate;
use crate::vcpu;
use roxmltree::Node;
use serde::Serialize;
use std::collections::BTreeSet;

/// The name under which the arch/virt-type mode fixes are explained (they are not a policy rule:
/// libvirt refuses the alternative).
pub const BUILTIN_RULE: &str = "built-in: libvirt rules";

/// One change the rewrite made (or, in audit mode and under `check`, would make).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    /// The policy rule that caused it, or [`BUILTIN_RULE`].
    pub rule: String,
    /// What changed, in libvirt's element and attribute names.
    pub what: String,
}

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
}

impl Outcome {
    /// Whether any finding is an error.
    #[must_use]
    pub fn has_errors(&self) -> bool {
        self.findings.iter().any(|f| f.severity == Severity::Error)
    }
}

/// libvirt's `<feature policy>` values that make a feature present in the guest.
#[must_use]
pub fn policy_present(policy: &str) -> bool {
    matches!(policy, "require" | "force")
}

/// libvirt's `<feature policy>` values that make a feature absent.
#[must_use]
pub fn policy_absent(policy: &str) -> bool {
    matches!(policy, "disable" | "forbid")
}

/// The features a custom CPU is guaranteed to have: the model's (from cpu_map, `None` when the
/// model is unknown) plus the ones listed as `require`/`force`, minus every other listed policy
/// (`disable`, `forbid`, and `optional`, which only enables a feature when the host has it).
///
/// `explicit` holds (libvirt feature name, policy) pairs; a later pair overrides an earlier one.
#[must_use]
pub fn guaranteed_features(
    model_features: Option<&BTreeSet<String>>,
    explicit: &[(String, String)],
) -> BTreeSet<String> {
    let mut set: BTreeSet<String> = model_features.cloned().unwrap_or_default();
    for (name, policy) in explicit {
        if policy_present(policy) {
            set.insert(name.clone());
        } else {
            set.remove(name);
        }
    }
    set
}

/// The QEMU default CPU model libvirt uses when a domain names none, by guest arch (QEMU
/// `target/i386/cpu.h`: `qemu64` for x86_64, `qemu32` for i686).
#[must_use]
pub fn default_model(arch: &str) -> Option<&'static str> {
    match arch {
        "x86_64" => Some("qemu64"),
        "i686" => Some("qemu32"),
        _ => None,
    }
}

struct Feat<'a, 't> {
    key: String,
    name: String,
    policy: String,
    /// The first `<feature>` of the first `<cpu>` with this name, kept in place.
    f_node: Option<Node<'a, 't>>,
}

struct ModelD<'a, 't> {
    text: String,
    fallback: Option<String>,
    src: Option<Node<'a, 't>>,
}

/// Children that occur once; a later `<cpu>`'s replaces the first one's.
const SINGLES: [&str; 4] = ["vendor", "topology", "cache", "maxphysaddr"];

struct Desired<'a, 't> {
    attrs: Vec<(String, String)>,
    model: Option<ModelD<'a, 't>>,
    singles: Vec<(String, Node<'a, 't>)>,
    numa: Option<Node<'a, 't>>,
    features: Vec<Feat<'a, 't>>,
    extras: Vec<Node<'a, 't>>,
    /// New markup for the kept `<topology>` (a changed vCPU maximum reshapes it).
    topology_markup: Option<String>,
    /// New markup for the kept `<numa>` (cells follow a changed vCPU maximum).
    numa_markup: Option<String>,
    /// Feature names listed more than once within one `<cpu>` (libvirt refuses that).
    duplicates: Vec<String>,
    /// Elements that occur once (`model`, `topology`...) written more than once in one `<cpu>`.
    repeated: Vec<String>,
}

impl Desired<'_, '_> {
    fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
    fn set_attr(&mut self, name: &str, value: &str) {
        if let Some(a) = self.attrs.iter_mut().find(|(n, _)| n == name) {
            a.1 = value.to_string();
        } else {
            self.attrs.push((name.to_string(), value.to_string()));
        }
    }
    fn remove_attr(&mut self, name: &str) -> Option<String> {
        let i = self.attrs.iter().position(|(n, _)| n == name)?;
        Some(self.attrs.remove(i).1)
    }
    fn mode(&self) -> String {
        self.attr("mode").unwrap_or("custom").to_string()
    }
    fn feature(&self, key: &str) -> Option<&Feat<'_, '_>> {
        self.features.iter().find(|f| f.key == key)
    }
    fn set_feature(&mut self, key: &str, policy: &str) -> Option<String> {
        if let Some(f) = self.features.iter_mut().find(|f| f.key == key) {
            let old = std::mem::replace(&mut f.policy, policy.to_string());
            return Some(old);
        }
        self.features.push(Feat {
            key: key.to_string(),
            name: key.to_string(),
            policy: policy.to_string(),
            f_node: None,
        });
        None
    }
    fn single(&self, name: &str) -> Option<Node<'_, '_>> {
        self.singles
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| *s)
    }
}

fn feature_key(name: &str) -> String {
    normalize_feature(name).unwrap_or_else(|| name.to_string())
}

/// Fold all `<cpu>` elements into one desired state (rule 1).
fn merge<'a, 't>(cpus: &[Node<'a, 't>], findings: &mut Vec<Finding>) -> Desired<'a, 't> {
    let mut d = Desired {
        attrs: Vec::new(),
        model: None,
        singles: Vec::new(),
        numa: None,
        features: Vec::new(),
        extras: Vec::new(),
        topology_markup: None,
        numa_markup: None,
        duplicates: Vec::new(),
        repeated: Vec::new(),
    };
    let text_key = |n: Node<'_, '_>| -> String {
        let doc_text = n.document().input_text();
        doc_text[n.range()].split_whitespace().collect::<String>()
    };
    for (i, cpu) in cpus.iter().enumerate() {
        let first = i == 0;
        for a in cpu.attributes() {
            if a.namespace().is_none() {
                d.set_attr(a.name(), a.value());
            }
        }
        for c in cpu.children().filter(Node::is_element) {
            if c.tag_name().namespace().is_some() {
                if !first {
                    d.extras.push(c);
                }
                continue;
            }
            match c.tag_name().name() {
                "model" => {
                    if d.model.as_ref().and_then(|m| m.src).is_some_and(|m| m.parent() == c.parent()) {
                        d.repeated.push("model".into());
                    }
                    d.model = Some(ModelD {
                        text: text_of(c).unwrap_or_default(),
                        fallback: c.attribute("fallback").map(str::to_string),
                        src: Some(c),
                    });
                }
                "feature" => {
                    let Some(name) = c.attribute("name") else {
                        if !first {
                            d.extras.push(c);
                        }
                        continue;
                    };
                    let key = feature_key(name);
                    let policy = c.attribute("policy").unwrap_or("require").to_string();
                    if let Some(f) = d.features.iter_mut().find(|f| f.key == key) {
                        let same_cpu = f.f_node.is_some_and(|n| n.parent() == c.parent())
                            || (f.f_node.is_none() && !first);
                        if same_cpu && !d.duplicates.contains(&key) {
                            d.duplicates.push(key.clone());
                        }
                        f.policy = policy;
                    } else {
                        d.features.push(Feat {
                            key,
                            name: name.to_string(),
                            policy,
                            f_node: first.then_some(c),
                        });
                    }
                }
                "numa" => match d.numa {
                    Some(prev) if text_key(prev) != text_key(c) => findings.push(Finding::error(
                        "cpu-numa-conflict",
                        "two different <numa> elements in separate <cpu> elements; libvirt would use one and ignore the other",
                        "keep a single <numa> in the domain's <cpu>",
                    )),
                    Some(_) => {}
                    None => d.numa = Some(c),
                },
                name if SINGLES.contains(&name) => {
                    if let Some(s) = d.singles.iter_mut().find(|(n, _)| n == name) {
                        if s.1.parent() == c.parent() {
                            d.repeated.push(name.to_string());
                        }
                        s.1 = c;
                    } else {
                        d.singles.push((name.to_string(), c));
                    }
                }
                _ => {
                    if !first {
                        d.extras.push(c);
                    }
                }
            }
        }
    }
    d
}

struct Ctx {
    changes: Vec<Change>,
    findings: Vec<Finding>,
}

impl Ctx {
    fn change(&mut self, rule: &str, what: impl Into<String>) {
        self.changes.push(Change {
            rule: rule.to_string(),
            what: what.into(),
        });
    }
}

/// Apply plan rules 2–5 to the desired state.
#[allow(clippy::too_many_lines)]
fn apply_plan(d: &mut Desired<'_, '_>, plan: &Plan, dom: &Domain<'_>, host: &Host, ctx: &mut Ctx) {
    let arch = dom.arch();
    let vt = dom.virt_type();
    // Rule 2: mode and model.
    if let Some(m) = &plan.mode {
        let want = m.value.as_str();
        let have = d.mode();
        let explicit_custom = plan.model.is_some() && want == "custom";
        if have != want && !(explicit_custom && d.attr("mode").is_none()) {
            d.set_attr("mode", want);
            ctx.change(&m.rule, format!("<cpu mode>: '{have}' -> '{want}'"));
        }
    }
    if let Some(m) = &plan.model {
        let have = d.model.as_ref().map(|m| m.text.clone());
        if have.as_deref() != Some(m.value.as_str()) {
            let fallback = d.model.as_ref().and_then(|m| m.fallback.clone());
            d.model = Some(ModelD {
                text: m.value.clone(),
                fallback,
                src: None,
            });
            ctx.change(
                &m.rule,
                format!(
                    "<model>: {} -> {}",
                    have.unwrap_or_else(|| "(none)".into()),
                    m.value
                ),
            );
        }
    }
    let x86 = matches!(arch, "x86_64" | "i686");
    if let (Some(m), true) = (&plan.model, x86) {
        if host.model_features(&m.value).is_none() {
            ctx.findings.push(
                Finding::error(
                    "cpu-model-unknown",
                    format!(
                        "CPU model '{}' is not defined in libvirt's cpu_map ({})",
                        m.value,
                        host.cpu_map_source()
                    ),
                    "use a model `virsh cpu-models x86_64` lists",
                )
                .rule(&m.rule),
            );
        }
    }
    if x86 {
        for set in [&plan.require, &plan.disable].into_iter().flatten() {
            for f in set.value.iter().filter(|f| !host.feature_known(f)) {
                ctx.findings.push(
                    Finding::error(
                        "cpu-feature-unknown",
                        format!(
                            "CPU feature '{f}' is not one libvirt knows (x86_features.xml of {})",
                            host.cpu_map_source()
                        ),
                        "use libvirt's feature names (`virsh domcapabilities` lists them)",
                    )
                    .rule(&set.rule),
                );
            }
        }
    }
    // Rule 3: modes libvirt refuses for this arch and virt type.
    let mode = d.mode();
    if arch == "aarch64" && vt == "kvm" && mode == "host-model" {
        d.set_attr("mode", "host-passthrough");
        ctx.change(
            BUILTIN_RULE,
            "<cpu mode>: 'host-model' -> 'host-passthrough' (libvirt: \"CPU mode 'host-model' for aarch64 kvm domain on aarch64 host is not supported by hypervisor\")",
        );
    }
    if vt == "qemu" && d.mode() == "host-passthrough" {
        d.set_attr("mode", "maximum");
        ctx.change(
            BUILTIN_RULE,
            format!("<cpu mode>: 'host-passthrough' -> 'maximum' (TCG has no host CPU to pass through; libvirt refuses host-passthrough for a {arch} qemu domain, maximum gives every feature TCG emulates)"),
        );
    }
    let mode = d.mode();
    let mode_rule = plan
        .mode
        .as_ref()
        .map_or(BUILTIN_RULE.to_string(), |m| m.rule.clone());
    // What the mode forbids.
    if matches!(mode.as_str(), "host-passthrough" | "maximum") {
        if let Some(m) = d.model.take() {
            ctx.change(
                &mode_rule,
                format!("<model>{}</model> removed: {mode} takes no model", m.text),
            );
        }
        if let Some(i) = d.singles.iter().position(|(n, _)| n == "vendor") {
            d.singles.remove(i);
            ctx.change(
                &mode_rule,
                format!("<vendor> removed: {mode} takes no vendor"),
            );
        }
    }
    if matches!(mode.as_str(), "host-model" | "host-passthrough" | "maximum") {
        if let Some(v) = d.remove_attr("match") {
            ctx.change(
                &mode_rule,
                format!("<cpu match='{v}'> removed: it applies to custom models only"),
            );
        }
    }
    if !matches!(mode.as_str(), "host-passthrough" | "maximum") {
        if let Some(v) = d.remove_attr("migratable") {
            ctx.change(
                &mode_rule,
                format!("<cpu migratable='{v}'> removed: libvirt allows it only with host-passthrough and maximum"),
            );
        }
    }
    if let Some(c) = &plan.check {
        if d.attr("check") != Some(c.value.as_str()) {
            d.set_attr("check", c.value.as_str());
            ctx.change(&c.rule, format!("<cpu check='{}'>", c.value.as_str()));
        }
    }
    // Rule 4: require and disable.
    if let (Some(r), Some(x)) = (&plan.require, &plan.disable) {
        for f in r.value.iter().filter(|f| x.value.contains(f)) {
            ctx.findings.push(
                Finding::error(
                    "policy-conflict",
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
    if let Some(r) = &plan.require {
        let model_feats = (d.mode() == "custom")
            .then_some(d.model.as_ref())
            .flatten()
            .and_then(|m| host.model_features(&m.text));
        for f in &r.value {
            let have = d.feature(f).map(|f| f.policy.clone());
            let from_model = have.is_none() && model_feats.as_ref().is_some_and(|s| s.contains(f));
            if !from_model && !have.as_deref().is_some_and(policy_present) {
                d.set_feature(f, "require");
                ctx.change(&r.rule, feature_change(f, have.as_deref(), "require"));
            }
        }
    }
    if let Some(x) = &plan.disable {
        for f in &x.value {
            if plan.require.as_ref().is_some_and(|r| r.value.contains(f)) {
                continue;
            }
            let have = d.feature(f).map(|f| f.policy.clone());
            if !have.as_deref().is_some_and(policy_absent) {
                d.set_feature(f, "disable");
                ctx.change(&x.rule, feature_change(f, have.as_deref(), "disable"));
            }
        }
    }
    if let Some(r) = plan.require.as_ref().or(plan.disable.as_ref()) {
        if d.model.is_none() && !d.features.is_empty() {
            ensure_model(d, dom.arch(), &r.rule, host, ctx);
        }
    }
    // Rule 5: the psABI level.
    if let Some(level) = &plan.min_level {
        apply_level(d, level.value, &level.rule, plan, dom, host, ctx);
    }
    if let Some(m) = &plan.mode {
        if x86 && d.mode() == "custom" && d.model.is_none() {
            ctx.findings.push(
                Finding::warning(
                    "cpu-model-default",
                    "<cpu mode='custom'> without a model: the guest gets QEMU's default model (qemu64 on x86_64, x86-64-v1 only)",
                    "give cpu.model or cpu.min_level in the policy",
                )
                .rule(&m.rule),
            );
        }
    }
    // Fallback last: it needs the model a level may have written.
    if let Some(f) = &plan.fallback {
        if let Some(m) = d.model.as_mut() {
            if m.fallback.as_deref() != Some(f.value.as_str()) {
                m.fallback = Some(f.value.as_str().to_string());
                m.src = None;
                ctx.change(&f.rule, format!("<model fallback='{}'>", f.value.as_str()));
            }
        }
    }
}

/// Write the machine's default model out when a custom `<cpu>` names none, so features can be
/// listed (libvirt: "Non-empty feature list specified without CPU model"): QEMU's `qemu64` on
/// x86_64, with `svm` disabled as libvirt does for its own implicit default CPU.
fn ensure_model(d: &mut Desired<'_, '_>, arch: &str, rule: &str, host: &Host, ctx: &mut Ctx) {
    if d.model.is_some() || d.mode() != "custom" {
        return;
    }
    let Some(model) = default_model(arch) else {
        return;
    };
    d.model = Some(ModelD {
        text: model.to_string(),
        fallback: None,
        src: None,
    });
    ctx.change(
        rule,
        format!("<model>{model}</model> added: the domain names no model, so QEMU would use its default {model}; it is written out so features can be listed (libvirt refuses features without a model)"),
    );
    let has_svm = host
        .model_features(model)
        .is_some_and(|s| s.contains("svm"));
    if has_svm && d.feature("svm").is_none() {
        d.set_feature("svm", "disable");
        ctx.change(
            rule,
            format!("<feature policy='disable' name='svm'/> added: libvirt's {model} lists svm (AMD-V), which KVM on Intel hosts cannot give (\"Host CPU does not provide required features: svm\"); libvirt disables it for its own implicit default CPU, and the guest keeps the same CPU under KVM and TCG"),
        );
    }
}

fn feature_change(f: &str, have: Option<&str>, want: &str) -> String {
    match have {
        Some(p) => format!("<feature name='{f}'>: policy '{p}' -> '{want}'"),
        None => format!("<feature policy='{want}' name='{f}'/> added"),
    }
}

fn apply_level(
    d: &mut Desired<'_, '_>,
    level: Level,
    rule: &str,
    plan: &Plan,
    dom: &Domain<'_>,
    host: &Host,
    ctx: &mut Ctx,
) {
    let arch = dom.arch();
    if arch != "x86_64" {
        ctx.findings.push(
            Finding::error(
                "level-arch",
                format!("cpu.min_level {level} applies to x86_64 guests, but this guest's arch is '{arch}'"),
                "add `match = { arch = \"x86_64\" }` to the rule",
            )
            .rule(rule),
        );
        return;
    }
    if let Some(x) = &plan.disable {
        for f in level
            .features()
            .iter()
            .filter(|f| x.value.iter().any(|v| v == *f))
        {
            ctx.findings.push(
                Finding::error(
                    "policy-conflict",
                    format!("feature '{f}' is disabled by rule '{}' but cpu.min_level {level} of rule '{rule}' needs it", x.rule),
                    "remove the feature from cpu.disable or lower cpu.min_level",
                )
                .rule(&x.rule),
            );
        }
    }
    let mode = d.mode();
    let level_feats = level.features();
    if mode != "custom" {
        // The guest's features come from the host: the document can only make sure none of the
        // level's features is switched off; whether the host has them is a host check.
        for f in &level_feats {
            let have = d.feature(f).map(|f| f.policy.clone());
            if have.as_deref().is_some_and(|p| !policy_present(p)) {
                d.set_feature(f, "require");
                ctx.change(
                    rule,
                    format!(
                        "{} (re-enabled: {level} needs it; the policy wins over the domain)",
                        feature_change(f, have.as_deref(), "require")
                    ),
                );
            }
        }
        return;
    }
    ensure_model(d, arch, rule, host, ctx);
    let Some(model) = d.model.as_ref().map(|m| m.text.clone()) else {
        return;
    };
    let model_feats = host.model_features(&model);
    if model_feats.is_none() {
        ctx.findings.push(
            Finding::warning(
                "cpu-model-unknown",
                format!("CPU model '{model}' is not in libvirt's cpu_map ({}); every {level} feature is required explicitly", host.cpu_map_source()),
                "use a model libvirt knows (`virsh cpu-models x86_64`)",
            )
            .rule(rule),
        );
    }
    let mut added: Vec<&str> = Vec::new();
    for f in &level_feats {
        let have = d.feature(f).map(|f| f.policy.clone());
        let in_model = model_feats.as_ref().is_some_and(|s| s.contains(*f));
        let present = match have.as_deref() {
            Some(p) => policy_present(p),
            None => in_model,
        };
        if !present {
            d.set_feature(f, "require");
            added.push(f);
            let why = if have.is_some() {
                format!("re-enabled: {level} needs it; the policy wins over the domain")
            } else {
                format!("{level} needs it and libvirt's {model} does not have it")
            };
            ctx.change(
                rule,
                format!("{} ({why})", feature_change(f, have.as_deref(), "require")),
            );
        }
    }
    // Features every real CPU with a level feature also has, which guests rely on together.
    for (with, companion, why) in COMPANIONS {
        let have = d.feature(companion).map(|f| f.policy.clone());
        let in_model = model_feats.as_ref().is_some_and(|s| s.contains(companion));
        if added.contains(&with) && have.is_none() && !in_model {
            d.set_feature(companion, "require");
            ctx.change(
                rule,
                format!(
                    "{} (with {with}: {why})",
                    feature_change(companion, None, "require")
                ),
            );
        }
    }
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

/// Rewrite one domain document under `policy`, with `host` facts.
///
/// The returned [`Outcome::output`] is the input itself when the domain is out of scope, already
/// conforms, or the policy's mode is audit; otherwise the rewritten document. Findings of
/// severity error mean the document cannot be made to conform (the command line exits 1 and
/// writes nothing).
///
/// # Errors
/// [`Error`] for input that cannot be judged: malformed XML, a DTD, not a `<domain>`.
pub fn rewrite(text: &str, what: &str, policy: &Policy, host: &Host) -> Result<Outcome> {
    let dom = Domain::parse(text, what)?;
    rewrite_parsed(&dom, what, policy, host)
}

/// [`rewrite`] of a document already parsed (the hook parses once and both validates the input
/// and rewrites it).
///
/// # Errors
/// As [`rewrite`], for the output.
pub fn rewrite_parsed(
    dom: &Domain<'_>,
    what: &str,
    policy: &Policy,
    host: &Host,
) -> Result<Outcome> {
    let text = dom.text;
    let name = dom.name();
    if !dom.in_scope() {
        return Ok(Outcome {
            note: Some(format!(
                "domain type '{}' is not handled (only kvm and qemu are); passed through unchanged",
                dom.virt_type()
            )),
            name,
            in_scope: false,
            output: text.to_string(),
            changed: false,
            changes: Vec::new(),
            findings: Vec::new(),
        });
    }
    let plan = policy.plan_for(dom);
    let mut ctx = Ctx {
        changes: Vec::new(),
        findings: Vec::new(),
    };
    let cpus = dom.cpus();
    let mut desired = merge(&cpus, &mut ctx.findings);
    if cpus.len() > 1 {
        ctx.change(
            BUILTIN_RULE,
            format!("{} <cpu> elements folded into the first (libvirt reads only the first one's mode, model and features)", cpus.len()),
        );
    }
    for e in &desired.repeated {
        ctx.change(
            BUILTIN_RULE,
            format!("<{e}> given more than once in one <cpu>: the last one kept"),
        );
    }
    for f in &desired.duplicates {
        let p = desired.feature(f).map_or("require", |f| f.policy.as_str());
        ctx.change(
            BUILTIN_RULE,
            format!("<feature name='{f}'> listed more than once: kept once, with the last policy '{p}' (libvirt: \"CPU feature '{f}' specified more than once\")"),
        );
    }
    apply_plan(&mut desired, &plan, dom, host, &mut ctx);
    let v = vcpu::apply(dom, &plan, host, desired.single("topology"), desired.numa);
    desired.topology_markup = v.topology_markup;
    desired.numa_markup = v.numa_markup;
    ctx.changes.extend(v.changes);
    ctx.findings.extend(v.findings);
    let mut edits = emit(dom, &cpus, &desired).map_err(|e| Error::Xml {
        what: what.to_string(),
        message: e,
    })?;
    edits.extend(v.edits);
    let rewritten = edits.apply(text).map_err(|e| Error::Xml {
        what: what.to_string(),
        message: e.to_string(),
    })?;
    let changed = rewritten != text;
    if !changed {
        ctx.changes.clear();
    } else if ctx.changes.is_empty() {
        // Every edit has a reason; this one catches a reshaping no rule above names.
        ctx.change(BUILTIN_RULE, "<cpu> rewritten into the shape libvirt reads");
    }
    // Validate what would be written (the input itself when nothing changes).
    let mut findings = ctx.findings;
    // A refusal from planning (topology `keep`, say) and validation of the unchanged result say
    // the same thing: keep the planning one, which names the rule.
    let planned: Vec<&'static str> = findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .map(|f| f.code)
        .collect();
    // Validate what will be written; unchanged, that is the parsed input (no second parse).
    let validated = if changed {
        Domain::parse(&rewritten, "the rewritten domain")
            .map(|out| validate::validate(&out, &plan, host))
    } else {
        Ok(validate::validate(dom, &plan, host))
    };
    match validated {
        Ok(v) => findings.extend(v.into_iter().filter(|f| !planned.contains(&f.code))),
        Err(e) => findings.push(Finding::error(
            "internal",
            format!("the rewritten document does not parse: {e}"),
            "report this as a bug",
        )),
    }
    for p in host.cpu_map_problems() {
        findings.push(Finding::warning(
            "cpu-map-unreadable",
            p,
            "repair or reinstall libvirt's cpu_map files",
        ));
    }
    findings.dedup();
    let output = if policy.mode == Mode::Audit {
        text.to_string()
    } else {
        rewritten
    };
    Ok(Outcome {
        name,
        in_scope: true,
        output,
        changed,
        changes: ctx.changes,
        findings,
        note: None,
    })
}

/// What a body item is, for placing new ones.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Model,
    Single,
    Feature,
    Numa,
    Other,
}

fn emit(
    dom: &Domain<'_>,
    cpus: &[Node<'_, '_>],
    d: &Desired<'_, '_>,
) -> std::result::Result<Edits, String> {
    let text = dom.text;
    let mut edits = Edits::new();
    let q = match cpus.first() {
        Some(f) => quote_of(text, *f, document_quote(text, &dom.doc)),
        None => document_quote(text, &dom.doc),
    };
    let first = cpus.first().copied();
    // Body items: the first <cpu>'s children in their own order (kept, replaced in place or
    // dropped), then what is new, placed where libvirt writes it: model first, vendor and
    // topology/cache/maxphysaddr next, features after the last feature, numa and unknown children
    // of later <cpu> elements last.
    let first_children: Vec<Node<'_, '_>> = first
        .map(|f| f.children().filter(|c| !is_blank(text, *c)).collect())
        .unwrap_or_default();
    // New features follow the attribute order of the features already there (libvirt writes
    // `policy` first; Nova and some tools write `name` first).
    let name_first = cpus
        .iter()
        .flat_map(|c| c.children())
        .find(|c| crate::domain::is_libvirt_element(*c, "feature"))
        .and_then(|f| {
            let mut names = f.attributes().map(|a| a.name());
            let first = names.find(|n| *n == "name" || *n == "policy")?;
            Some(first == "name")
        })
        .unwrap_or(false);
    let feature_item = |f: &Feat<'_, '_>| match f.f_node {
        Some(node) if node.attribute("policy").unwrap_or("require") == f.policy => {
            Item::Verbatim(node.range())
        }
        Some(node) => Item::Markup(with_attrs(text, node, &[("policy", f.policy.as_str())], q)),
        None if name_first => Item::Markup(format!(
            "<feature name={q}{}{q} policy={q}{}{q}/>",
            escape_attr(&f.name),
            escape_attr(&f.policy)
        )),
        None => Item::Markup(format!(
            "<feature policy={q}{}{q} name={q}{}{q}/>",
            escape_attr(&f.policy),
            escape_attr(&f.name)
        )),
    };
    let model_item = |m: &ModelD<'_, '_>| match m.src {
        Some(src) => Item::Verbatim(src.range()),
        None => Item::Markup(model_markup(m, q)),
    };
    let single_item = |name: &str, src: Node<'_, '_>| match (&d.topology_markup, name) {
        (Some(m), "topology") => Item::Markup(m.clone()),
        _ => Item::Verbatim(src.range()),
    };
    let numa_item = |n: Node<'_, '_>| match &d.numa_markup {
        Some(m) => Item::Markup(m.clone()),
        None => Item::Verbatim(n.range()),
    };
    let mut items: Vec<(Kind, Item)> = Vec::new();
    let mut placed_model = false;
    let mut placed_singles: Vec<&str> = Vec::new();
    let mut placed_numa = false;
    for c in &first_children {
        let name = c.tag_name().name();
        let ours = c.is_element() && c.tag_name().namespace().is_none();
        if ours && name == "model" {
            if !placed_model {
                placed_model = true;
                if let Some(m) = &d.model {
                    items.push((Kind::Model, model_item(m)));
                }
            }
        } else if ours && SINGLES.contains(&name) {
            if !placed_singles.contains(&name) {
                placed_singles.push(SINGLES.iter().find(|s| **s == name).copied().unwrap_or(""));
                if let Some(src) = d.single(name) {
                    items.push((Kind::Single, single_item(name, src)));
                }
            }
        } else if ours && name == "feature" && c.attribute("name").is_some() {
            if let Some(f) = d.features.iter().find(|f| f.f_node == Some(*c)) {
                items.push((Kind::Feature, feature_item(f)));
            }
        } else if ours && name == "numa" {
            if !placed_numa {
                placed_numa = true;
                if let Some(n) = d.numa {
                    items.push((Kind::Numa, numa_item(n)));
                }
            }
        } else {
            items.push((Kind::Other, Item::Verbatim(raw_range(text, *c))));
        }
    }
    let pos_after = |items: &[(Kind, Item)], kinds: &[Kind]| -> Option<usize> {
        items
            .iter()
            .rposition(|(k, _)| kinds.contains(k))
            .map(|i| i + 1)
    };
    if let (false, Some(m)) = (placed_model, &d.model) {
        items.insert(0, (Kind::Model, model_item(m)));
    }
    for name in SINGLES {
        if placed_singles.contains(&name) {
            continue;
        }
        if let Some(src) = d.single(name) {
            let at = pos_after(&items, &[Kind::Model, Kind::Single]).unwrap_or(0);
            items.insert(at, (Kind::Single, single_item(name, src)));
        }
    }
    for f in d.features.iter().filter(|f| f.f_node.is_none()) {
        let at = pos_after(&items, &[Kind::Feature])
            .or_else(|| items.iter().position(|(k, _)| *k == Kind::Numa))
            .unwrap_or(items.len());
        items.insert(at, (Kind::Feature, feature_item(f)));
    }
    if let (false, Some(n)) = (placed_numa, d.numa) {
        items.push((Kind::Numa, numa_item(n)));
    }
    for e in &d.extras {
        items.push((Kind::Other, Item::Verbatim(e.range())));
    }
    let items: Vec<Item> = items.into_iter().map(|(_, i)| i).collect();
    let mut body_changed = false;
    // Did the body change? Compare with the first <cpu>'s own non-blank children.
    if items.len() != first_children.len() {
        body_changed = true;
    } else {
        for (it, c) in items.iter().zip(&first_children) {
            match it {
                Item::Verbatim(r) if *r == raw_range(text, *c) => {}
                _ => body_changed = true,
            }
        }
    }
    // Start tag.
    let start_tag = match first {
        Some(f) => start_tag_with(text, f, &d.attrs, q),
        None => {
            let mut s = String::from("<cpu");
            for (n, v) in &d.attrs {
                s.push_str(&format!(" {n}={q}{}{q}", escape_attr(v)));
            }
            s
        }
    };
    match first {
        Some(f) => {
            let orig_start = &text[f.range().start..start_tag_attr_end(text, f)];
            if orig_start != start_tag || body_changed {
                let body = if body_changed {
                    None
                } else if is_self_closing(text, f) {
                    Some(String::new())
                } else {
                    Some(
                        text[start_tag_end(text, f)
                            ..end_tag_start(text, f).unwrap_or(f.range().end)]
                            .to_string(),
                    )
                };
                let new = match body {
                    Some(b) if is_self_closing(text, f) && b.is_empty() => {
                        let tail = &text[start_tag_attr_end(text, f)..f.range().end];
                        format!("{start_tag}{tail}")
                    }
                    Some(b) => {
                        let gap = &text[start_tag_attr_end(text, f)..start_tag_end(text, f)];
                        format!("{start_tag}{gap}{b}</cpu>")
                    }
                    None if !text[f.range()].contains('\n') && !is_self_closing(text, f) => {
                        // Written on one line (CloudStack writes `<cpu><topology .../></cpu>`):
                        // it stays on one line.
                        let mut s = format!("{start_tag}>");
                        for it in &items {
                            match it {
                                Item::Verbatim(r) => s.push_str(text[r.clone()].trim()),
                                Item::Markup(m) => s.push_str(m),
                            }
                        }
                        s.push_str("</cpu>");
                        s
                    }
                    None => {
                        let ind = line_indent(text, f.range().start).to_string();
                        let cind = child_indent(text, f);
                        render_element(text, "cpu", &start_tag, &items, &ind, &cind)
                    }
                };
                edits.replace(f.range(), new);
            }
            for later in &cpus[1..] {
                edits.delete(node_with_line(text, *later));
            }
        }
        None => {
            if items.is_empty() && d.attrs.is_empty() {
                return Ok(edits);
            }
            let root = dom.root();
            let ind = child_indent(text, root);
            let cind = format!("{ind}{}", indent_step(text, root, &ind));
            let el = render_element(text, "cpu", &start_tag, &items, &ind, &cind);
            let nl = newline(text);
            let anchor_after = child(root, "features")
                .or_else(|| child(root, "cputune"))
                .or_else(|| child(root, "os"));
            if let Some(a) = anchor_after {
                edits.insert(a.range().end, format!("{nl}{ind}{el}"));
            } else if let Some(b) = child(root, "clock").or_else(|| child(root, "devices")) {
                edits.insert(b.range().start, format!("{el}{nl}{ind}"));
            } else if let Some(last) = root.last_element_child() {
                edits.insert(last.range().end, format!("{nl}{ind}{el}"));
            } else if let Some(end) = end_tag_start(text, root) {
                edits.insert(end, format!("{ind}{el}{nl}"));
            } else {
                return Err("the <domain> element is empty; cannot add a <cpu> to it".into());
            }
        }
    }
    Ok(edits)
}

fn indent_step(text: &str, root: Node<'_, '_>, ind: &str) -> String {
    let own = line_indent(text, root.range().start);
    ind.strip_prefix(own)
        .filter(|s| !s.is_empty())
        .unwrap_or("  ")
        .to_string()
}

fn model_markup(m: &ModelD<'_, '_>, q: char) -> String {
    match &m.fallback {
        Some(fb) => format!(
            "<model fallback={q}{}{q}>{}</model>",
            escape_attr(fb),
            escape_text(&m.text)
        ),
        None => format!("<model>{}</model>", escape_text(&m.text)),
    }
}

/// The first `<cpu>`'s start tag (without its closing `>` or `/>`) carrying `attrs`: kept
/// attributes keep their bytes, changed ones get a new value, removed ones go with the whitespace
/// before them, new ones are appended.
fn start_tag_with(text: &str, f: Node<'_, '_>, attrs: &[(String, String)], q: char) -> String {
    let base = f.range().start;
    let end = start_tag_attr_end(text, f);
    let mut e = Edits::new();
    for a in f.attributes().filter(|a| a.namespace().is_none()) {
        match attrs.iter().find(|(n, _)| n == a.name()) {
            Some((_, v)) if v == a.value() => {}
            Some((_, v)) => e.replace(
                a.range_value().start - base..a.range_value().end - base,
                escape_attr(v),
            ),
            None => {
                let r = a.range();
                let ws = text[..r.start].len() - text[..r.start].trim_end().len();
                e.delete(r.start - ws - base..r.end - base);
            }
        }
    }
    let mut tail = String::new();
    for (n, v) in attrs {
        if !f
            .attributes()
            .any(|a| a.name() == n && a.namespace().is_none())
        {
            tail.push_str(&format!(" {n}={q}{}{q}", escape_attr(v)));
        }
    }
    e.insert(end - base, tail);
    e.apply(&text[base..end])
        .unwrap_or_else(|_| text[base..end].to_string())
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
}
