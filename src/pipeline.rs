//! One domain, ready to be judged: its document, the plan for it with a cluster's CPU put in,
//! and the host facts it needs, built once ([`Pipeline::new`]) and shared by everything that
//! judges a domain: the rewrite (and so `check`), `audit`, the hook and the daemon.
//!
//! The steps are always the same three, in this order: the policy's matching rules make the
//! plan ([`Policy::plan_for`]); a plan's `cpu.model = "baseline"` becomes the cluster's CPU
//! ([`Host::cluster_cpu`]: its model, and its features in the plan's `require` and `disable`),
//! so everything after sees an ordinary custom CPU; then the facts of the host that plan and
//! document can need are gathered ([`DomainFacts::gather`]). Nothing after asks the host
//! anything: a rule is a function of (document, plan, facts).

use crate::domain::Domain;
use crate::domain_facts::DomainFacts;
use crate::error::Result;
use crate::host::Host;
use crate::policy::{BASELINE_MODEL, Plan, Policy, Ruled};

/// One domain with its plan and facts. The document is borrowed: the fleet judges one guest
/// shape on each class of hosts from one parse.
pub struct Pipeline<'t, 'h> {
    /// The document as read.
    pub dom: &'t Domain<'t>,
    /// What the policy asks of it, with a cluster's CPU put in.
    pub plan: Plan,
    /// The host facts the plan and the document can need.
    pub facts: DomainFacts<'h>,
}

impl<'t, 'h> Pipeline<'t, 'h> {
    /// `dom` planned under `policy`, with `host`'s facts.
    ///
    /// # Errors
    /// [`crate::Error::Cluster`] when the plan asks for the cluster's CPU and there is none
    /// ([`Host::cluster_cpu`]).
    pub fn new(dom: &'t Domain<'t>, policy: &Policy, host: &'h Host) -> Result<Self> {
        let plan = plan(dom, policy, host)?;
        let facts = DomainFacts::gather(dom, &plan, host);
        Ok(Pipeline { dom, plan, facts })
    }
}

/// What `policy` asks of `dom`, with a cluster's CPU put in: [`Pipeline::new`]'s plan without
/// gathering the domain's host facts, for a caller that needs only the plan (the hook at
/// `started`, which judges libvirt's live CPU and reads nothing of QEMU's capability cache).
///
/// # Errors
/// As [`Pipeline::new`].
pub fn plan(dom: &Domain<'_>, policy: &Policy, host: &Host) -> Result<Plan> {
    with_cluster_cpu(policy.plan_for(dom), host)
}

/// Computes the cluster's CPU now when a rule of `policy` asks for it, so a command that judges
/// many guests (`audit`) fails once, with one message, rather than once per guest. Nothing is
/// read when no rule says `cpu.model = "baseline"`.
///
/// # Errors
/// As [`Host::cluster_cpu`].
pub fn check_cluster(policy: &Policy, host: &Host) -> Result<()> {
    let asks = policy
        .rules
        .iter()
        .any(|r| r.cpu.model.as_deref() == Some(BASELINE_MODEL));
    if asks {
        host.cluster_cpu()?;
    }
    Ok(())
}

/// `plan` with a `"baseline"` model replaced by the cluster's: its model, its `require` and
/// `disable` features added to the plan's (the policy's own lists win where they disagree: a
/// feature the policy disables is not required, one it requires is not disabled). A plan with
/// another model is returned as it is, and the cluster is not read. The keys keep the rule that
/// set them; the baseline's features name their own rule through [`Plan::feature_rule`].
fn with_cluster_cpu(mut plan: Plan, host: &Host) -> Result<Plan> {
    let Some(model) = plan.model.as_ref().filter(|m| m.value == BASELINE_MODEL) else {
        return Ok(plan);
    };
    let rule = model.rule.clone();
    let cpu = host.cluster_cpu()?.clone();
    let own =
        |s: &Option<Ruled<Vec<String>>>| s.as_ref().map(|s| s.value.clone()).unwrap_or_default();
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
    for (slot, value) in [(&mut plan.require, require), (&mut plan.disable, disable)] {
        if !value.is_empty() {
            let rule = slot
                .as_ref()
                .map_or_else(|| rule.clone(), |s| s.rule.clone());
            *slot = Some(Ruled { value, rule });
        }
    }
    plan.model = Some(Ruled {
        value: cpu.model.clone(),
        rule: rule.clone(),
    });
    plan.cluster = Some(Ruled { value: cpu, rule });
    Ok(plan)
}
