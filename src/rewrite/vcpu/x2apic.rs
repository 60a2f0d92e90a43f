//! The vCPU maximum of an x86 TCG guest against its QEMU's APIC IDs ([`crate::apic_id`]): a
//! rewrite never writes a maximum this QEMU cannot start.
//!
//! When the vCPUs of the new maximum reach an APIC ID of 255 or more under TCG:
//! * QEMU 9.0 and later run them only with x2APIC in the guest CPU ("APIC ID 255 requires
//!   x2APIC feature in CPU"; a vCPU hot-plugged without it fails: QEMU 10.0 aborts the running
//!   guest, 11.1 refuses the vCPU): the guest CPU gets `<feature policy='require'
//!   name='x2apic'/>` ([`require_x2apic`]), unless the
//!   policy takes x2apic away (a rule's `cpu.disable`, or a cluster baseline whose hosts lack it),
//!   which is refused with one sentence (`tcg-x2apic`);
//! * QEMU before 9.0, or a QEMU whose version is unknown (the safe choice: such a guest starts on
//!   every QEMU), run none ("current -smp configuration requires kernel irqchip and X2APIC API
//!   support", for the maximum, not the online vCPUs): a maximum `vcpu.max` asks for is clamped
//!   to the largest one whose APIC IDs stay below 255 (`vcpu-clamped`, naming the QEMU version and
//!   where it came from). A maximum the domain already has is not lowered: validation's
//!   `tcg-vcpu-limit` says why it cannot start.

use crate::change::Notes;
use crate::domain_facts::DomainFacts;
use crate::finding::{Code, Finding};
use crate::libvirt::cpu_def::FeaturePolicy;
use crate::policy::{Plan, TopologyStrategy};
use crate::rewrite::desired::Desired;
use crate::topology::Topology;
use crate::validate::tcg::{has_x2apic, qemu_words};
use roxmltree::Node;

/// x2APIC the guest CPU must get for its vCPUs, under the rule that asks for them.
#[derive(Debug)]
pub(crate) struct X2apicNeed {
    /// The rule whose maximum needs it.
    pub(crate) rule: String,
    /// Why, for the change's sentence (starts with a space).
    pub(crate) why: String,
}

/// Whether the desired `<cpu>` has x2APIC under this host's TCG
/// ([`crate::validate::tcg::has_x2apic`]).
pub(in crate::rewrite) fn desired_has_x2apic(
    d: &Desired<'_, '_>,
    arch: &str,
    facts: &DomainFacts<'_>,
) -> bool {
    let Some(mode) = d.mode_kind() else {
        // A mode libvirt does not know: nothing to add to (`cpu-mode-invalid` says so).
        return true;
    };
    let listed: Vec<(String, Option<FeaturePolicy>)> = d
        .features
        .iter()
        .map(|f| (f.key.clone(), FeaturePolicy::parse(&f.policy)))
        .collect();
    let model = d
        .model
        .as_ref()
        .filter(|_| d.has_model())
        .map(|m| m.text.as_str());
    has_x2apic(arch, mode, model, &listed, facts)
}

/// The topology QEMU gets for a maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// No `<topology>`: libvirt gives QEMU one socket per vCPU (the APIC IDs are the vCPU
    /// numbers).
    SocketPerVcpu,
    /// The `<topology>` written, or reshaped for the maximum.
    Written(Topology),
}

impl Shape {
    /// The topology, None for one socket per vCPU ([`crate::apic_id`]'s argument).
    fn topology(&self) -> Option<&Topology> {
        match self {
            Shape::SocketPerVcpu => None,
            Shape::Written(t) => Some(t),
        }
    }
}

/// The topology the domain will have with `m` vCPUs: the written one reshaped as
/// [`super::reshape`] does when the maximum changes or `vcpu.topology` is set; None when
/// `keep` cannot hold `m`.
fn shape_for(written: Option<&Topology>, plan: &Plan, count_max: u32, m: u32) -> Option<Shape> {
    let Some(t) = written else {
        return Some(Shape::SocketPerVcpu);
    };
    if m == count_max && plan.topology.is_none() {
        return Some(Shape::Written(*t));
    }
    let strategy = plan
        .topology
        .as_ref()
        .map_or(TopologyStrategy::Sockets, |s| s.value);
    super::reshape(t, m, strategy).map(Shape::Written)
}

/// The maximum the vCPU rules may write for an x86 TCG guest (module docs), and whether the guest
/// CPU must get x2APIC for it. `topology` is the `<topology>` that stays in the merged `<cpu>`,
/// `count_max` the domain's maximum, `max` the one the other rules arrived at, `cpu_x2apic`
/// whether the desired CPU already has x2APIC ([`desired_has_x2apic`]). None, with an error
/// finding, when the policy forbids what the maximum needs.
pub(super) fn tcg_maximum(
    plan: &Plan,
    facts: &DomainFacts<'_>,
    (topology, clusters): (Option<Node<'_, '_>>, bool),
    (count_max, max): (u32, u32),
    cpu_x2apic: bool,
    rule: &str,
    n: &mut Notes,
) -> Option<(u32, Option<X2apicNeed>)> {
    if !facts.tcg.x86_tcg {
        return Some((max, None));
    }
    let written = match topology.map(|t| Topology::read(t, clusters)) {
        Some(Ok(t)) => Some(t),
        // Reported by the topology rule.
        Some(Err(_)) => return Some((max, None)),
        None => None,
    };
    let shape = |m: u32| shape_for(written.as_ref(), plan, count_max, m);
    let Some(t) = shape(max) else {
        return Some((max, None));
    };
    let Some(first) = crate::apic_id::first_x2apic_vcpu(t.topology(), max) else {
        return Some((max, None));
    };
    let id = t
        .topology()
        .map_or(u64::from(first), |t| crate::apic_id::apic_id(t, first));
    let version = facts.tcg.version.as_ref();
    if version.is_some_and(|v| v.value.tcg_has_x2apic()) {
        if cpu_x2apic {
            return Some((max, None));
        }
        if let Some(refusal) = x2apic_forbidden(plan, max, id, &qemu_words(version)) {
            n.finding(refusal);
            return None;
        }
        let why = format!(
            " ({}: the maximum {max} gives vCPU {first} APIC ID {id}, and QEMU gives a TCG vCPU an APIC ID of 255 or more only with x2APIC in the guest CPU: \"APIC ID {id} requires x2APIC feature in CPU\", at start or when the vCPU is hot-plugged)",
            qemu_words(version)
        );
        return Some((
            max,
            Some(X2apicNeed {
                rule: rule.to_string(),
                why,
            }),
        ));
    }
    let Some(asked) = &plan.vcpu_max else {
        return Some((max, None));
    };
    let Some(fits) = largest_xapic_max(max, written.as_ref(), shape) else {
        return Some((max, None));
    };
    let what = format!(
        "vCPU maximum {max} clamped to {fits}: {} runs no TCG guest whose vCPUs can reach APIC ID 255 (\"current -smp configuration requires kernel irqchip and X2APIC API support\"), and vCPU {first} of {max} would get APIC ID {id} (TCG emulates x2APIC from QEMU 9.0 on)",
        qemu_words(version)
    );
    n.finding(
        Finding::warning(
            Code::VcpuClamped,
            what,
            "run the guest under KVM, or on QEMU 9.0 or later (--qemu-version when the tool cannot read it), to go higher",
        )
        .rule(&asked.rule),
    );
    Some((fits, None))
}

/// The largest maximum up to `max` whose vCPUs all keep APIC IDs below 255 with the topology
/// `shape` gives that count (None from `shape`: the count cannot be held). One that keeps the
/// written per-socket shape (dies, cores, threads) is preferred, as the reshape prefers more
/// sockets of the same shape: `sockets='1' cores='3'` asked for 288 gets 64 sockets of 3 cores
/// (192 vCPUs, APIC IDs up to 254), not 254 sockets of 1.
fn largest_xapic_max(
    max: u32,
    written: Option<&Topology>,
    shape: impl Fn(u32) -> Option<Shape>,
) -> Option<u32> {
    let fits = |m: u32| -> Option<Shape> {
        shape(m).filter(|t| crate::apic_id::first_x2apic_vcpu(t.topology(), m).is_none())
    };
    let same_shape = |t: &Shape| match (t, written) {
        (Shape::Written(t), Some(w)) => {
            (t.dies, t.cores, t.threads) == (w.dies, w.cores, w.threads)
        }
        _ => true,
    };
    // An APIC ID is at least its vCPU's number: above 255 vCPUs none fits.
    let counts = || (1..=max.min(255)).rev();
    counts()
        .find(|m| fits(*m).is_some_and(|t| same_shape(&t)))
        .or_else(|| counts().find(|m| fits(*m).is_some()))
}

/// The refusal when the policy takes x2apic away: a rule's `cpu.disable`, or a cluster baseline
/// whose hosts lack it (the guest could not run on them).
fn x2apic_forbidden(plan: &Plan, max: u32, id: u64, qemu: &str) -> Option<Finding> {
    let needs = format!(
        "the vCPU maximum {max} needs x2APIC in the guest CPU under TCG ({qemu} refuses APIC ID {id} without it: \"APIC ID {id} requires x2APIC feature in CPU\")"
    );
    if let Some(x) = plan
        .disable
        .as_ref()
        .filter(|x| x.value.iter().any(|f| f == "x2apic"))
    {
        return Some(
            Finding::error(
                Code::TcgX2apic,
                format!("{needs}, but rule '{}' disables x2apic", x.rule),
                "remove x2apic from cpu.disable, or lower vcpu.max to 255 or fewer",
            )
            .rule(&x.rule),
        );
    }
    let c = plan
        .cluster
        .as_ref()
        .filter(|c| !c.value.features.iter().any(|f| f == "x2apic"))?;
    Some(
        Finding::error(
            Code::TcgX2apic,
            format!(
                "{needs}, but not every host of the cluster ({}) has it: the guest could not run on the hosts that lack it",
                c.value.hosts_text()
            ),
            "lower vcpu.max to 255 or fewer, or take the hosts that lack x2apic out of [host] cluster",
        )
        .rule(&c.rule),
    )
}

/// Give the desired CPU x2APIC for its vCPUs ([`tcg_maximum`]): `<feature policy='require'
/// name='x2apic'/>`, a policy that took it away made `require` (the vCPU rule wins, as a level
/// does), QEMU's default model written out first when a custom CPU names none (libvirt refuses
/// features without a model).
pub(in crate::rewrite) fn require_x2apic(
    d: &mut Desired<'_, '_>,
    need: &X2apicNeed,
    arch: &str,
    facts: &DomainFacts<'_>,
    n: &mut Notes,
) {
    crate::rewrite::cpu_rules::ensure_model(d, arch, &need.rule, facts, n);
    let have = d.feature_policy("x2apic");
    d.set_feature("x2apic", "require");
    n.change(crate::rewrite::cpu_rules::feature_change(
        &need.rule,
        "x2apic",
        have.as_deref(),
        "require",
        &need.why,
    ));
}
