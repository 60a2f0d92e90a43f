//! The libvirt qemu hook: check guests where libvirt lets a hook check them.
//!
//! libvirt runs `/etc/libvirt/hooks/qemu.d/*` for every guest operation with the domain XML on
//! stdin (libvirt `docs/hooks.rst`). A hook cannot change `<cpu>` or `<vcpu>` (stdout is ignored
//! at start, and on migrate/restore libvirt refuses any ABI change), so this
//! hook only decides: exit 0 lets libvirt go on, exit 1 with one line on stderr refuses, and
//! libvirt shows that line to the user ("Hook script execution failed: ... unexpected exit status
//! 1: ...").
//!
//! * `prepare begin`: the policy and libvirt's rules on the XML about to start;
//! * `started begin`: the *live* XML, where libvirt lists the features QEMU could not give as
//!   `policy='disable'` — the only place silent feature loss can be caught;
//! * `migrate begin`, `restore begin`: whether this host can run the incoming guest;
//! * anything else: exit 0 at once, stdin drained, no policy read.
//!
//! The hook never calls libvirt (a deadlock is likely), never writes to stdout (on migrate and
//! restore libvirt would take it as new XML) and never logs domain XML (it carries secrets).

use crate::change::{BUILTIN_RULE, Change};
use crate::cpu::Level;
use crate::destination::{Arrival, CpuCompare, CpuMapCache, Judgement, judge};
use crate::domain::{Domain, cpu_features};
use crate::error::Error;
use crate::finding::{Code, Finding, Severity};
use crate::host::{Host, HostOptions};
use crate::libvirt::cpu_def::{FeaturePolicy, guaranteed_features};
use crate::log::{Decision, Fields};
use crate::pipeline::Pipeline;
use crate::policy::{Mode, OnError, OnViolation, Plan, Policy, on_error_hint};
use crate::rewrite::rewrite_pipeline;
use crate::verdict::Verdict;
use crate::xml::{child, decode, text_of};
use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Where the daemon leaves its host-fact snapshot (`virsh capabilities` and domcapabilities),
/// read by the hook as host facts (the hook must not ask libvirt: libvirt's `docs/hooks.rst`).
pub const SNAPSHOT_DIR: &str = "/var/lib/virt-cpu-policy";

/// The phases of a guest's life the hook checks (libvirt's OPERATION SUB-OPERATION pairs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// `prepare begin`.
    Prepare,
    /// `started begin`.
    Started,
    /// `migrate begin` (this host is the destination).
    Migrate,
    /// `restore begin`.
    Restore,
}

impl Phase {
    /// The phase of an OPERATION SUB-OPERATION pair, or None for operations the hook passes.
    #[must_use]
    pub fn of(operation: &str, sub_operation: &str) -> Option<Phase> {
        match (operation, sub_operation) {
            ("prepare", "begin") => Some(Phase::Prepare),
            ("started", "begin") => Some(Phase::Started),
            ("migrate", "begin") => Some(Phase::Migrate),
            ("restore", "begin") => Some(Phase::Restore),
            _ => None,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Phase::Prepare => "prepare",
            Phase::Started => "started",
            Phase::Migrate => "migrate",
            Phase::Restore => "restore",
        }
    }
}

/// What the hook decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Let libvirt go on (exit 0).
    Allow,
    /// Refuse with this one line (exit 1), already in the form
    /// `virt-cpu-policy: guest 'NAME': WHAT (rule 'RULE'); fix: HOW`.
    Refuse(String),
}

/// What the hook decided, with the kind of decision it logged for it (the journal's
/// `MESSAGE_ID`, and what [`crate::hook_decisions`] counts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decided {
    /// The answer to libvirt.
    pub answer: Answer,
    /// The decision logged; None for a guest outside the policy's scope, let through without a
    /// decision (nothing logged, nothing counted).
    pub kind: Option<Decision>,
}

impl Decided {
    /// `kind`, logged, with its answer: a refusal with `line` when the kind refuses.
    fn logged(kind: Decision, line: String) -> Decided {
        let answer = if kind.refuses() {
            Answer::Refuse(line)
        } else {
            Answer::Allow
        };
        Decided {
            answer,
            kind: Some(kind),
        }
    }

    /// A guest the policy does not cover: allowed, no decision.
    fn out_of_scope() -> Decided {
        Decided {
            answer: Answer::Allow,
            kind: None,
        }
    }
}

impl HookOptions {
    /// The state directory: the daemon's snapshot and the hook's own state (decision counts,
    /// the cluster CPU seen): `snapshot_dir`, else [`SNAPSHOT_DIR`].
    #[must_use]
    pub fn state_dir(&self) -> &Path {
        self.snapshot_dir
            .as_deref()
            .unwrap_or(Path::new(SNAPSHOT_DIR))
    }
}

/// Inputs the hook takes besides the XML.
#[derive(Debug, Clone, Default)]
pub struct HookOptions {
    /// Policy file; None: the installed policy or the built-in one.
    pub policy: Option<PathBuf>,
    /// Extra host-fact files (`--caps`).
    pub caps: Vec<PathBuf>,
    /// The daemon's snapshot directory; None: [`SNAPSHOT_DIR`].
    pub snapshot_dir: Option<PathBuf>,
    /// libvirt's QEMU capability cache: None the default, an empty path disables it.
    pub qemu_cache: Option<PathBuf>,
    /// KVM's vCPU limit, instead of asking /dev/kvm.
    pub kvm_max_vcpus: Option<crate::host::Sourced<u32>>,
    /// The host's libvirt version, instead of libvirt's QEMU capability cache.
    pub libvirt_version: Option<crate::host::Sourced<crate::libvirt::version::LibvirtVersion>>,
    /// The host's QEMU version, instead of libvirt's QEMU capability cache.
    pub qemu_version: Option<crate::host::Sourced<crate::libvirt::version::QemuVersion>>,
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The refusal line libvirt shows.
#[must_use]
pub fn refusal(guest: &str, what: &str, rule: &str, fix: &str) -> String {
    one_line(&format!(
        "virt-cpu-policy: guest '{guest}': {what} (rule '{rule}'); fix: {fix}"
    ))
}

/// Run the hook for `guest` in `phase` with the domain XML in `xml`: [`decide`]'s answer.
#[must_use]
pub fn run(guest: &str, phase: Phase, xml: &[u8], opts: &HookOptions) -> Answer {
    decide(guest, phase, xml, opts).answer
}

/// Decide for `guest` in `phase` with the domain XML in `xml`, and log the decision
/// ([`crate::log::decision`]).
///
/// Never panics on bad input: the tool's own failures (policy unreadable or invalid, XML that does
/// not parse, broken host facts) follow `[hook] on_error`, and `mode = "audit"` never refuses.
#[must_use]
pub fn decide(guest: &str, phase: Phase, xml: &[u8], opts: &HookOptions) -> Decided {
    let policy = match Policy::load(opts.policy.as_deref()) {
        Ok(p) => p,
        Err(e) => {
            let path = opts
                .policy
                .clone()
                .unwrap_or_else(|| PathBuf::from(crate::policy::SYSTEM_POLICY));
            // Only a regular file is read again: a FIFO would block every guest start.
            let on_error = crate::readfile::read_regular(&path, 1024 * 1024)
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .and_then(|t| on_error_hint(&t))
                .unwrap_or_default();
            return tool_failure(
                guest,
                phase,
                on_error,
                false,
                &e,
                &format!("correct {}", path.display()),
            );
        }
    };
    let audit = policy.mode == Mode::Audit;
    let fail =
        |e: &Error, fix: &str| tool_failure(guest, phase, policy.hook.on_error, audit, e, fix);
    let text = match decode(xml, "the domain XML") {
        Ok(t) => t,
        Err(e) => return fail(&e, "report the XML libvirt passed as a bug"),
    };
    let mut caps = opts.caps.clone();
    caps.extend(crate::readfile::xml_files(opts.state_dir()));
    let host_opts = HostOptions {
        qemu_cache: opts.qemu_cache.clone(),
        kvm_max_vcpus: opts.kvm_max_vcpus.clone(),
        libvirt_version: opts.libvirt_version.clone(),
        qemu_version: opts.qemu_version.clone(),
        skip_machine_support: true,
        ..HostOptions::from_policy(&policy, &caps, None, None)
    };
    let host = match Host::discover(&host_opts) {
        Ok(h) => h,
        Err(e) => return fail(&e, "repair the host-fact files named in the policy"),
    };
    // A policy naming what this host's libvirt does not know would refuse every guest it
    // matches: the policy's mistake, the tool's failure (`on_error`), never the guest's.
    let broken = host.policy_errors(&policy);
    if !broken.is_empty() {
        let e = Error::Policy {
            path: policy.source.clone(),
            errors: broken,
        };
        return fail(
            &e,
            "correct the policy (`virt-cpu-policy policy check` names each mistake)",
        );
    }
    let verdict = match phase {
        Phase::Prepare => prepare(guest, text, &policy, &host),
        Phase::Started => started(guest, text, &policy, &host),
        Phase::Migrate | Phase::Restore => destination(guest, phase, text, &policy, &host),
    };
    if let Some(cpu) = host.cluster_cpu_computed() {
        crate::cluster::watch::tell(opts.state_dir(), cpu);
    }
    match verdict {
        Err(e @ Error::Cluster(_)) => fail(
            &e,
            "repair the cluster's host-facts files named in [host] cluster (or publish them again with virt-cpu-policyd --publish)",
        ),
        Err(e) => fail(&e, "report the XML libvirt passed as a bug"),
        Ok(v) => v,
    }
}

fn tool_failure(
    guest: &str,
    phase: Phase,
    on_error: OnError,
    audit: bool,
    e: &Error,
    fix: &str,
) -> Decided {
    let line = refusal(
        guest,
        &format!("the hook cannot check this guest: {}", e.one_line()),
        crate::change::HOOK_ERROR_RULE,
        fix,
    );
    let (kind, decision) = match (on_error, audit) {
        (OnError::Deny, false) => (Decision::HookErrorRefused, "refuse (on_error = deny)"),
        (_, true) => (Decision::HookErrorAllowed, "allow (audit mode)"),
        (OnError::Allow, false) => (Decision::HookErrorAllowed, "allow (on_error = allow)"),
    };
    let fields = Fields {
        guest,
        operation: phase.as_str(),
        verdict: kind.hook_verdict(),
        rule: Some(crate::change::HOOK_ERROR_RULE),
        code: Some(e.code()),
        decision,
    };
    crate::log::decision(kind, tracing::Level::ERROR, &fields, &e.one_line());
    Decided::logged(kind, line)
}

/// Log an allowed guest (nothing wrong found) and allow it.
fn allowed(guest: &str, phase: Phase, reason: &str) -> Decided {
    let kind = Decision::HookAllowed;
    let fields = Fields {
        guest,
        operation: phase.as_str(),
        verdict: kind.hook_verdict(),
        decision: kind.hook_verdict(),
        ..Fields::default()
    };
    crate::log::decision(kind, tracing::Level::INFO, &fields, reason);
    Decided::logged(kind, String::new())
}

/// A guest that does not conform: `on_violation` decides (audit mode never refuses). `rule` and
/// `code` name what it breaks, for the log.
fn violation(
    guest: &str,
    phase: Phase,
    policy: &Policy,
    line: String,
    rule: &str,
    code: Option<&str>,
) -> Decided {
    let (kind, decision) = if policy.mode == Mode::Audit {
        (Decision::HookViolationAllowed, "allow (audit mode)")
    } else if policy.hook.on_violation == OnViolation::Deny {
        (
            Decision::HookViolationRefused,
            "refuse (on_violation = deny)",
        )
    } else {
        (
            Decision::HookViolationAllowed,
            "allow (on_violation = warn)",
        )
    };
    let fields = Fields {
        guest,
        operation: phase.as_str(),
        verdict: kind.hook_verdict(),
        rule: Some(rule),
        code,
        decision,
    };
    crate::log::decision(kind, tracing::Level::WARN, &fields, &line);
    Decided::logged(kind, line)
}

/// A refusal libvirt or QEMU would make anyway (not subject to `on_violation`; audit mode only
/// logs it).
fn hard_refusal(guest: &str, phase: Phase, policy: &Policy, f: &Finding) -> Decided {
    let line = finding_line(guest, f);
    let audit = policy.mode == Mode::Audit;
    let (kind, decision) = if audit {
        (Decision::HookViolationAllowed, "allow (audit mode)")
    } else {
        (Decision::HookLibvirtRefused, "refuse")
    };
    let rule = finding_rule(f);
    let fields = Fields {
        guest,
        operation: phase.as_str(),
        verdict: kind.hook_verdict(),
        rule: Some(&rule),
        code: Some(f.code.as_str()),
        decision,
    };
    crate::log::decision(kind, tracing::Level::WARN, &fields, &line);
    Decided::logged(kind, line)
}

/// The rule a finding names: its policy rule, or `libvirt: CODE` for libvirt's own rules.
fn finding_rule(f: &Finding) -> String {
    f.rule
        .clone()
        .unwrap_or_else(|| crate::change::libvirt_rule(f.code.as_str()))
}

fn finding_line(guest: &str, f: &Finding) -> String {
    let rule = finding_rule(f);
    let fix = if f.fix.is_empty() {
        "see virt-cpu-policy check"
    } else {
        &f.fix
    };
    refusal(guest, &f.message, &rule, fix)
}

fn log_warnings(guest: &str, phase: Phase, findings: &[Finding]) {
    for f in findings.iter().filter(|f| f.severity == Severity::Warning) {
        let message = one_line(&f.message);
        crate::log::warning(
            guest,
            phase.as_str(),
            f.rule.as_deref(),
            f.code.as_str(),
            &message,
        );
    }
}

/// `prepare begin`: libvirt's own rules on the XML as it will start (it would fail anyway: always
/// refused), then the policy (a rewrite would change something: `on_violation`).
fn prepare(guest: &str, text: &str, policy: &Policy, host: &Host) -> Result<Decided, Error> {
    let dom = Domain::parse(text, "the domain XML")?;
    if !dom.in_scope() {
        return Ok(Decided::out_of_scope());
    }
    let p = Pipeline::new(&dom, policy, host)?;
    let findings = crate::validate::validate(p.dom, &p.plan, &p.facts);
    log_warnings(guest, Phase::Prepare, &findings);
    if let Some(f) = findings
        .iter()
        .find(|f| f.severity == Severity::Error && !f.code.is_policy())
    {
        return Ok(hard_refusal(guest, Phase::Prepare, policy, f));
    }
    let o = rewrite_pipeline(&p, "the domain XML", policy)?;
    if !o.changed && !o.has_errors() {
        // Not compared (a fact missing, the `not-compared` warning logged above): let through
        // under any `on_violation`, since libvirt makes that comparison itself as it starts
        // the guest, and refuses it there if it must.
        let reason = if Verdict::of(&o) == Verdict::NotCompared {
            "not compared (a start check needed a fact this host's facts lack, named in the not-compared warning; libvirt makes it itself at start)"
        } else {
            Verdict::Conforms.as_str()
        };
        return Ok(allowed(guest, Phase::Prepare, reason));
    }
    let policy_unmet = findings.iter().any(|f| f.code.is_policy());
    if !policy_unmet && !o.has_errors() && builtin_only(&o.changes) {
        return Ok(builtin_cleanups(guest, &o.changes));
    }
    let (line, rule, code) = nonconformance(guest, &findings, &o);
    Ok(violation(guest, Phase::Prepare, policy, line, &rule, code))
}

/// Whether every change is one of libvirt's built-in cleanups ([`BUILTIN_RULE`]), and there is
/// at least one.
fn builtin_only(changes: &[Change]) -> bool {
    !changes.is_empty() && changes.iter().all(|c| c.rule == BUILTIN_RULE)
}

/// A guest the policy is happy with but that libvirt's built-in cleanups would still change (a
/// `match` under host-model, a model written twice...): libvirt starts it as it is, and refusing a
/// start takes an operator's rule, so it is let through (whatever `on_violation` says) with each
/// change logged as a hook warning (code `builtin-change`).
fn builtin_cleanups(guest: &str, changes: &[Change]) -> Decided {
    for c in changes {
        crate::log::warning(
            guest,
            Phase::Prepare.as_str(),
            Some(BUILTIN_RULE),
            "builtin-change",
            &one_line(&format!("a rewrite would make this change: {}", c.what)),
        );
    }
    let fields = Fields {
        guest,
        operation: Phase::Prepare.as_str(),
        verdict: Decision::HookAllowed.hook_verdict(),
        rule: Some(BUILTIN_RULE),
        decision: "allow (built-in changes only)",
        ..Fields::default()
    };
    let message = format!(
        "conforms to the policy; libvirt's built-in rules alone would make {} change(s), logged as warnings (a rewrite makes them)",
        changes.len()
    );
    crate::log::decision(
        Decision::HookAllowed,
        tracing::Level::INFO,
        &fields,
        &message,
    );
    Decided::logged(Decision::HookAllowed, String::new())
}

/// The refusal line, rule and code for a guest that does not conform: the policy finding, else
/// the rewrite's first error, else its first change.
fn nonconformance<'f>(
    guest: &str,
    findings: &'f [Finding],
    o: &'f crate::rewrite::Outcome,
) -> (String, String, Option<&'f str>) {
    let fix = "rewrite its definition with `virt-cpu-policy rewrite --in-place` (or `virt-cpu-policyd apply`), then start it";
    if let Some(f) = findings.iter().find(|f| f.code.is_policy()) {
        // What a rewrite would leave of it (the level as this host's KVM gives it): no rewrite
        // mends that, so its own fix is given.
        let after = o
            .findings
            .iter()
            .find(|g| g.code == f.code && g.severity == Severity::Error);
        let rule = f.rule.as_deref().unwrap_or("policy");
        // Below its OS's floor: the finding's own fix (a rewrite fixes the floor only where the
        // policy asks for it, and never what the host gives).
        let fix = match after {
            Some(a) => a.fix.as_str(),
            None if f.code == Code::OsFloor => f.fix.as_str(),
            None => fix,
        };
        return (
            refusal(guest, &f.message, rule, fix),
            rule.to_string(),
            Some(f.code.as_str()),
        );
    }
    if let Some(f) = o.findings.iter().find(|f| f.severity == Severity::Error) {
        return (
            finding_line(guest, f),
            finding_rule(f),
            Some(f.code.as_str()),
        );
    }
    // A refusal names an operator's rule: a policy change before any built-in cleanup.
    let first = o.changes.iter().find(|c| c.rule != BUILTIN_RULE);
    let Some(first) = first.or(o.changes.first()) else {
        let line = refusal(guest, "does not conform to the CPU policy", "policy", fix);
        return (line, "policy".to_string(), None);
    };
    // The change's first clause: "<feature policy='require' name='aes'/> added".
    let short = first
        .what
        .split([':', '('])
        .next()
        .unwrap_or(&first.what)
        .trim();
    let more = if o.changes.len() > 1 {
        format!(" and {} more change(s)", o.changes.len() - 1)
    } else {
        String::new()
    };
    let line = refusal(
        guest,
        &format!("does not conform to the CPU policy: needs {short}{more}"),
        &first.rule,
        fix,
    );
    (line, first.rule.clone(), None)
}

/// `started begin`: what the guest really got. libvirt's live XML carries the features QEMU could
/// not give as `<feature policy='disable'>` (seen with libvirt 9.0 on a KVM lacking pni/popcnt).
fn started(guest: &str, text: &str, policy: &Policy, host: &Host) -> Result<Decided, Error> {
    let dom = Domain::parse(text, "the live domain XML")?;
    if !dom.in_scope() {
        return Ok(Decided::out_of_scope());
    }
    let allow = |reason: &str| Ok(allowed(guest, Phase::Started, reason));
    let live = dom
        .cpus()
        .first()
        .map(|c| child(*c, "model").and_then(text_of));
    let Some(live) = live else {
        return allow("no <cpu> in the live XML");
    };
    let Some(model) = live else {
        // host-passthrough / maximum: libvirt's live XML lists no features to check.
        return allow("live CPU has no model (host-passthrough or maximum): nothing to verify");
    };
    // The plan and the cpu_map's model only: the live XML is libvirt's record of the CPU QEMU
    // gave, so nothing of QEMU's capability cache is asked (at every guest start, the cost of
    // the hook at `started` is a process's start and the cpu_map's one model file).
    let plan = crate::pipeline::plan(&dom, policy, host)?;
    let explicit = dom
        .cpus()
        .first()
        .map(|c| cpu_features(*c))
        .unwrap_or_default();
    let feats = guaranteed_features(host.model_features(&model).as_ref(), &explicit);
    let Some(short) = live_shortfall(&dom, &plan, &feats, &explicit) else {
        return allow("live CPU satisfies the policy");
    };
    let disabled_by_qemu: Vec<&str> = short
        .missing
        .iter()
        .map(String::as_str)
        .filter(|f| {
            explicit
                .iter()
                .any(|(n, p)| n == f && p.is_some_and(FeaturePolicy::takes_away))
        })
        .collect();
    let detail = if disabled_by_qemu.is_empty() {
        format!("missing {}", short.missing.join(", "))
    } else {
        format!(
            "QEMU disabled {} (the host's KVM does not provide them)",
            disabled_by_qemu.join(", ")
        )
    };
    let refused = refusal(
        guest,
        &format!("{}: {detail}", short.what),
        &short.rule,
        "run the guest on a host whose CPU and KVM provide these features, or under TCG (type='qemu')",
    );
    Ok(violation(
        guest,
        Phase::Started,
        policy,
        refused,
        &short.rule,
        Some(short.code.as_str()),
    ))
}

/// What the started CPU lacks for the policy: the level's features first, then the floor of the
/// guest's OS (unless a rule waives it), then `require`'s.
struct Shortfall {
    missing: Vec<String>,
    rule: String,
    what: String,
    /// `cpu-level` (the level's features), `os-floor` (the OS's floor) or `cpu-feature-missing`
    /// (`require`'s), for the log.
    code: Code,
}

fn live_shortfall(
    dom: &Domain<'_>,
    plan: &Plan,
    feats: &BTreeSet<String>,
    explicit: &[(String, Option<FeaturePolicy>)],
) -> Option<Shortfall> {
    if let Some(level) = &plan.min_level {
        if dom.arch() == "x86_64" && Level::highest(|f| feats.contains(f)) < Some(level.value) {
            return Some(Shortfall {
                missing: level
                    .value
                    .features()
                    .into_iter()
                    .filter(|f| !feats.contains(*f))
                    .map(str::to_string)
                    .collect(),
                rule: level.rule.clone(),
                what: format!("the started CPU is not {}", level.value),
                code: Code::CpuLevel,
            });
        }
    }
    // The floor of the guest's OS, under any policy but one that waives it: below it the
    // guest's kernel stops at boot (validate's `os-floor` judged it before the start).
    if let (Some((os, Some(floor))), "x86_64") = (&plan.os, dom.arch()) {
        let missing = floor.missing(|f| feats.contains(f));
        if plan.floor_waiver().is_none() && !missing.is_empty() {
            return Some(Shortfall {
                missing,
                rule: crate::validate::floor_rule(os),
                what: format!(
                    "the started CPU is below the floor of {} ({}: {})",
                    os.short(),
                    floor.needs(),
                    floor.source
                ),
                code: Code::OsFloor,
            });
        }
    }
    let r = plan.require.as_ref()?;
    let missing: Vec<String> = r
        .value
        .iter()
        .filter(|f| {
            !feats.contains(*f)
                && !explicit
                    .iter()
                    .any(|(n, p)| n == *f && p.is_some_and(FeaturePolicy::gives))
        })
        .cloned()
        .collect();
    (!missing.is_empty()).then(|| Shortfall {
        missing,
        rule: r.rule.clone(),
        what: "the started CPU lacks required features".into(),
        code: Code::CpuFeatureMissing,
    })
}

/// `migrate begin` / `restore begin` on the destination: can this host run the guest?
fn destination(
    guest: &str,
    phase: Phase,
    text: &str,
    policy: &Policy,
    host: &Host,
) -> Result<Decided, Error> {
    let dom = Domain::parse(text, "the incoming domain XML")?;
    if !dom.in_scope() {
        return Ok(Decided::out_of_scope());
    }
    let p = Pipeline::new(&dom, policy, host)?;
    // One judge for a destination (crate::destination): libvirt's errors, the host not reaching
    // the level, an unusable model when the CPUs could not be compared, the CPU comparison.
    let map = CpuMapCache::new(host.cpu_map_dir.as_deref());
    let judgement = judge(&p, host, &map, Arrival::Migration);
    if let Some(f) = judgement.blocking().first() {
        return Ok(hard_refusal(guest, phase, policy, f));
    }
    // The stack's known hazards of this arrival: a live migration (its source host's releases
    // are not given to the hook) or, for `restore`, a start.
    let hazards = arrival_hazards(&p, phase, host);
    if let Some(f) = hazards.iter().find(|f| f.severity == Severity::Error) {
        return Ok(hard_refusal(guest, phase, policy, f));
    }
    let Judgement {
        mut findings, cpu, ..
    } = judgement;
    findings.extend(hazards);
    // Not incompatible: blocking() holds that finding.
    let (CpuCompare::Runs(cpu) | CpuCompare::NotCompared(cpu) | CpuCompare::Unknown(cpu)) = cpu
    else {
        return Ok(allowed(guest, phase, "this host can run the guest"));
    };
    log_warnings(guest, phase, &findings);
    let unmet: Vec<&Finding> = findings.iter().filter(|f| f.code.is_policy()).collect();
    let runs = format!("this host can run the guest ({cpu})");
    if unmet.is_empty() {
        return Ok(allowed(guest, phase, &runs));
    }
    Ok(policy_not_met(guest, phase, &unmet, &runs))
}

/// [`crate::validate::hazard::on_this_host`] of the guest arriving by `phase`: by live
/// migration on `migrate`, a start on `restore`; this host's QEMU release read only when an
/// entry the guest may meet asks it.
fn arrival_hazards(p: &Pipeline<'_, '_>, phase: Phase, host: &Host) -> Vec<Finding> {
    let running = phase == Phase::Migrate;
    let mut here = p.facts.hazard_releases;
    if running
        && here.qemu.is_none()
        && crate::hazards::needs_qemu(&p.dom.hazard_shape(true), here.libvirt)
    {
        here.qemu = host
            .qemu_version(p.dom.arch(), p.dom.emulator().as_deref())
            .map(|v| v.value);
    }
    // The judge's blocking findings (machine-unsupported among them) returned before.
    crate::validate::hazard::on_this_host(p.dom, running, here, false)
}

/// An incoming guest that runs here but misses the policy: let in, since libvirt keeps its CPU on
/// migrate and restore, with one decision for all it misses (its rules joined with `, `, the
/// first finding's code).
fn policy_not_met(guest: &str, phase: Phase, unmet: &[&Finding], runs: &str) -> Decided {
    let mut rules: Vec<String> = Vec::new();
    for rule in unmet.iter().map(|f| finding_rule(f)) {
        if !rules.contains(&rule) {
            rules.push(rule);
        }
    }
    let rules = rules.join(", ");
    let fields = Fields {
        guest,
        operation: phase.as_str(),
        verdict: Decision::HookViolationAllowed.hook_verdict(),
        rule: Some(&rules),
        code: unmet.first().map(|f| f.code.as_str()),
        decision: "allow (policy not met; the CPU cannot change on migrate/restore)",
    };
    let mut message: Vec<&str> = unmet.iter().map(|f| f.message.as_str()).collect();
    message.push(runs);
    crate::log::decision(
        Decision::HookViolationAllowed,
        tracing::Level::WARN,
        &fields,
        &one_line(&message.join("; ")),
    );
    Decided::logged(Decision::HookViolationAllowed, String::new())
}

/// Most bytes drained from stdin after what is kept: libvirt writes a finite document and closes
/// its end, so the writer never sees a broken pipe; an endless stream is cut off here, so the hook
/// always ends.
pub const MAX_DRAIN_BYTES: u64 = 64 * 1024 * 1024;

/// Read and discard stdin, up to [`MAX_DRAIN_BYTES`].
pub fn drain(stdin: &mut impl Read) {
    let _ = std::io::copy(&mut stdin.take(MAX_DRAIN_BYTES), &mut std::io::sink());
}

/// Read stdin (libvirt writes the XML and closes it), keeping at most
/// [`crate::xml::MAX_INPUT_BYTES`] + 1 bytes; the rest is drained (see [`drain`]).
///
/// # Errors
/// The read error.
pub fn read_stdin(stdin: &mut impl Read) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    stdin
        .take(crate::xml::MAX_INPUT_BYTES as u64 + 1)
        .read_to_end(&mut buf)?;
    drain(stdin);
    Ok(buf)
}
