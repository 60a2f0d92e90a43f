//! The fleet's questions, each answered from the pairs' verdicts ([`Fleet::reasons`]):
//!
//! * [`matrix`]: every guest on every host;
//! * [`drain`]: where each guest of a host can go, and which cannot leave;
//! * [`admit`]: what a new host runs, whether it runs the cluster's CPU, and how the cluster's
//!   baseline changes with it;
//! * [`upgrade`]: a host's guests on the facts of its next generation, each with the rewrite
//!   that fixes it when the policy can.

use super::{Fleet, Reason};
use crate::cluster::cluster_cpu::ClusterCpu;
use crate::host::Host;
use crate::policy::{BASELINE_MODEL, Policy};
use std::path::PathBuf;
use std::rc::Rc;

/// One guest on one host.
#[derive(Debug, Clone)]
pub struct Pair {
    /// The guest's index in [`Fleet::guests`].
    pub guest: usize,
    /// The host's index in [`Fleet::hosts`].
    pub host: usize,
    /// Why the host cannot run it; empty: it runs.
    pub reasons: Rc<Vec<Reason>>,
}

impl Pair {
    /// Whether the guest runs on the host.
    #[must_use]
    pub fn runs(&self) -> bool {
        self.reasons.is_empty()
    }

    /// Whether the pair was not compared ([`super::not_compared`]).
    #[must_use]
    pub fn not_compared(&self) -> bool {
        super::not_compared(&self.reasons)
    }
}

/// Every class of the fleet's hosts, for [`Fleet::judge_shapes`].
fn every_class(fleet: &Fleet) -> Vec<usize> {
    (0..fleet.class_count()).collect()
}

/// Every guest × every host, guests in order, then hosts in order.
#[must_use]
pub fn matrix(fleet: &Fleet) -> Vec<Pair> {
    fleet.judge_shapes(&every_class(fleet));
    let mut out = Vec::with_capacity(fleet.guests.len() * fleet.hosts.len());
    for guest in 0..fleet.guests.len() {
        for host in 0..fleet.hosts.len() {
            out.push(Pair {
                guest,
                host,
                reasons: fleet.reasons(guest, host),
            });
        }
    }
    out
}

/// The matrix counted by host class ([`Fleet::runs_in`]): every figure of the views that count
/// pairs, in guests × classes steps (a fleet of a thousand hosts of four kinds costs four per
/// guest), the same as counting every pair ([`Fleet::runs`]). A pair is `runs`, `not-compared`
/// ([`Fleet::not_compared`]) or `cannot`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tally {
    /// Per guest: the hosts that run it.
    pub runs_on: Vec<usize>,
    /// Per guest: the hosts it was not compared with.
    pub not_compared_on: Vec<usize>,
    /// Per host: the guests of the fleet it runs.
    pub runs: Vec<usize>,
    /// Per host: the guests of the fleet it was not compared with.
    pub not_compared: Vec<usize>,
    /// Per host: the guests on another host (or of unknown host) that it cannot run.
    pub untakeable: Vec<usize>,
    /// Per host: the guests on it that no other host runs (they cannot leave).
    pub undrainable: Vec<usize>,
    /// The guest × host pairs that cannot run.
    pub cannot: usize,
    /// The guest × host pairs not compared.
    pub not_compared_pairs: usize,
}

/// The hosts of each class, in order.
#[must_use]
pub fn class_members(fleet: &Fleet) -> Vec<Vec<usize>> {
    let mut members = vec![Vec::new(); fleet.class_count()];
    for h in 0..fleet.hosts.len() {
        members[fleet.class_of(h)].push(h);
    }
    members
}

/// The pairs one verdict holds for, counted by class: per guest, per host, and per host among
/// its own guests.
struct Counted {
    per_guest: Vec<usize>,
    per_host: Vec<usize>,
    own: Vec<usize>,
}

/// [`Counted`] of the verdict `in_class` says of a guest and a class and `at` of a guest and
/// its own host: at a guest's own host its verdict alone decides (nothing migrates), so the
/// class's answer is corrected there.
fn count(
    fleet: &Fleet,
    members: &[Vec<usize>],
    in_class: impl Fn(usize, usize) -> bool,
    at: impl Fn(usize, usize) -> bool,
) -> Counted {
    let hosts = fleet.hosts.len();
    let mut class_n = vec![0usize; members.len()];
    let mut per_guest = vec![0usize; fleet.guests.len()];
    let mut own = vec![0usize; hosts];
    let mut own_class = vec![0usize; hosts];
    for (g, n) in per_guest.iter_mut().enumerate() {
        for (c, m) in members.iter().enumerate() {
            if in_class(g, c) {
                class_n[c] += 1;
                *n += m.len();
            }
        }
        if let Some(src) = fleet.source(g) {
            let (o, k) = (at(g, src), in_class(g, fleet.class_of(src)));
            own[src] += usize::from(o);
            own_class[src] += usize::from(k);
            *n = *n + usize::from(o) - usize::from(k);
        }
    }
    let per_host = (0..hosts)
        .map(|h| class_n[fleet.class_of(h)] + own[h] - own_class[h])
        .collect();
    Counted {
        per_guest,
        per_host,
        own,
    }
}

/// Counts the fleet's pairs by verdict ([`Tally`]).
#[must_use]
pub fn tally(fleet: &Fleet) -> Tally {
    fleet.judge_shapes(&every_class(fleet));
    let (guests, hosts) = (fleet.guests.len(), fleet.hosts.len());
    let members = class_members(fleet);
    let runs = count(
        fleet,
        &members,
        |g, c| fleet.runs_in(g, c),
        |g, h| fleet.runs(g, h),
    );
    let nc = count(
        fleet,
        &members,
        |g, c| fleet.not_compared_in(g, c),
        |g, h| fleet.not_compared(g, h),
    );
    let mut own_guests = vec![0usize; hosts];
    for src in (0..guests).filter_map(|g| fleet.source(g)) {
        own_guests[src] += 1;
    }
    // Another host's guests it neither runs nor was not compared with: its own guests it
    // cannot run are no one else's.
    let untakeable = (0..hosts)
        .map(|h| {
            let own_cannot = own_guests[h] - runs.own[h] - nc.own[h];
            guests - runs.per_host[h] - nc.per_host[h] - own_cannot
        })
        .collect();
    // A guest no other host runs nor was left not compared with: it cannot leave (one only
    // not compared elsewhere is not known to be stuck, as `--drain` says).
    let undrainable = (0..hosts)
        .map(|h| {
            let own = |g: usize| usize::from(fleet.runs(g, h));
            let own_nc = |g: usize| usize::from(fleet.not_compared(g, h));
            fleet
                .guests_on(h)
                .iter()
                .filter(|g| runs.per_guest[**g] == own(**g) && nc.per_guest[**g] == own_nc(**g))
                .count()
        })
        .collect();
    let not_compared_pairs: usize = nc.per_guest.iter().sum();
    let cannot = guests * hosts - runs.per_guest.iter().sum::<usize>() - not_compared_pairs;
    Tally {
        runs_on: runs.per_guest,
        not_compared_on: nc.per_guest,
        runs: runs.per_host,
        not_compared: nc.per_host,
        untakeable,
        undrainable,
        cannot,
        not_compared_pairs,
    }
}

/// How many guest × host pairs cannot run ([`Tally::cannot`]).
#[must_use]
pub fn cannot_count(fleet: &Fleet) -> usize {
    tally(fleet).cannot
}

/// One guest of a drained host.
#[derive(Debug, Clone)]
pub struct Leaving {
    /// The guest's index.
    pub guest: usize,
    /// The hosts that run it (indexes), in order.
    pub to: Vec<usize>,
    /// The other hosts, each with why it cannot.
    pub refused: Vec<Pair>,
}

impl Leaving {
    /// Whether the guest cannot leave: no other host runs it, and every other host refuses it
    /// (none was left not compared).
    #[must_use]
    pub fn stuck(&self) -> bool {
        self.to.is_empty() && !self.refused.iter().any(Pair::not_compared)
    }

    /// Whether no other host is known to run the guest but some were not compared with it
    /// ([`Pair::not_compared`]): where it can go is not known.
    #[must_use]
    pub fn unknown(&self) -> bool {
        self.to.is_empty() && self.refused.iter().any(Pair::not_compared)
    }
}

/// Each guest on host `h` with the other hosts that run it and those that cannot.
#[must_use]
pub fn drain(fleet: &Fleet, h: usize) -> Vec<Leaving> {
    fleet
        .guests_on(h)
        .into_iter()
        .map(|guest| {
            let mut leaving = Leaving {
                guest,
                to: Vec::new(),
                refused: Vec::new(),
            };
            for host in (0..fleet.hosts.len()).filter(|o| *o != h) {
                let reasons = fleet.reasons(guest, host);
                if reasons.is_empty() {
                    leaving.to.push(host);
                } else {
                    leaving.refused.push(Pair {
                        guest,
                        host,
                        reasons,
                    });
                }
            }
            leaving
        })
        .collect()
}

/// The guests each host cannot take ([`Tally::untakeable`]). Indexed like [`Fleet::hosts`].
#[must_use]
pub fn untakeable(fleet: &Fleet) -> Vec<usize> {
    tally(fleet).untakeable
}

/// The guests that cannot leave each host ([`Tally::undrainable`]: no other host runs them).
/// Indexed like [`Fleet::hosts`].
#[must_use]
pub fn undrainable(fleet: &Fleet) -> Vec<usize> {
    tally(fleet).undrainable
}

/// [`cannot_count`], [`untakeable`] and [`undrainable`] counted pair by pair, as the views
/// did before [`tally`]: the oracle of its tests and benchmark.
#[must_use]
pub fn tally_by_pairs(fleet: &Fleet) -> (usize, Vec<usize>, Vec<usize>) {
    let cannot = (0..fleet.guests.len())
        .map(|g| {
            (0..fleet.hosts.len())
                .filter(|h| !fleet.runs(g, *h) && !fleet.not_compared(g, *h))
                .count()
        })
        .sum();
    let untakeable = (0..fleet.hosts.len())
        .map(|h| {
            (0..fleet.guests.len())
                .filter(|g| fleet.source(*g) != Some(h))
                .filter(|g| !fleet.runs(*g, h) && !fleet.not_compared(*g, h))
                .count()
        })
        .collect();
    let undrainable = (0..fleet.hosts.len())
        .map(|h| {
            let stuck = |g: &usize| {
                !(0..fleet.hosts.len())
                    .any(|o| o != h && (fleet.runs(*g, o) || fleet.not_compared(*g, o)))
            };
            fleet.guests_on(h).iter().filter(|g| stuck(g)).count()
        })
        .collect();
    (cannot, untakeable, undrainable)
}

/// The cluster's CPU as it is and as it would be with a new host.
#[derive(Debug, Clone)]
pub struct ClusterChange {
    /// The baseline of the fleet's hosts; Err: why there is none.
    pub before: Result<ClusterCpu, String>,
    /// The baseline with the new host; Err: why there is none.
    pub after: Result<ClusterCpu, String>,
}

impl ClusterChange {
    /// Whether the cluster's CPU changes (model, features or level): None when the cluster has
    /// a CPU and the baseline with the new host cannot be computed ([`ClusterChange::unknown`]),
    /// which says nothing of a change.
    #[must_use]
    pub fn changes(&self) -> Option<bool> {
        match (&self.before, &self.after) {
            (Ok(b), Ok(a)) => {
                Some(b.model != a.model || b.features != a.features || b.level != a.level)
            }
            (Ok(_), Err(_)) => None,
            (Err(_), Ok(_)) => Some(true),
            (Err(_), Err(_)) => Some(false),
        }
    }

    /// Why the baseline with the new host cannot be computed while the cluster has one (its CPU
    /// names a model or feature the cpu_map does not define, libvirt's "Unknown CPU model"):
    /// an error of the admit view, which then cannot say what the new host does to the cluster's
    /// CPU.
    #[must_use]
    pub fn unknown(&self) -> Option<&str> {
        match (&self.before, &self.after) {
            (Ok(_), Err(e)) => Some(e),
            _ => None,
        }
    }
}

/// A CPU the cluster's guests are given, and whether the new host runs it.
#[derive(Debug, Clone)]
pub struct ClusterModel {
    /// Where it comes from: the cluster's baseline, or the rule pinning a model.
    pub what: String,
    /// The `<cpu>` element.
    pub cpu: String,
    /// Why the new host cannot run it; empty: it runs.
    pub reasons: Vec<Reason>,
}

/// What a new host does to the fleet.
#[derive(Debug, Clone)]
pub struct Admission {
    /// The new host's index.
    pub host: usize,
    /// Every guest on it.
    pub pairs: Vec<Pair>,
    /// The cluster's CPUs (its baseline as it is, models the policy pins) on the new host.
    pub models: Vec<ClusterModel>,
    /// The baseline before and after.
    pub cluster: ClusterChange,
}

/// Host `new` admitted to the fleet: every guest judged on it, the cluster's CPU (the baseline
/// of the other hosts' facts, with `cpu_map`) and the models `policy` pins judged on it, and the
/// baseline with it (the hosts' facts as the fleet read them, none read again).
#[must_use]
pub fn admit(fleet: &Fleet, new: usize, cpu_map: Option<&std::path::Path>) -> Admission {
    fleet.judge_shapes(&[fleet.class_of(new)]);
    let pairs = (0..fleet.guests.len())
        .map(|guest| Pair {
            guest,
            host: new,
            reasons: fleet.reasons(guest, new),
        })
        .collect();
    let source = "the fleet's hosts";
    let with_new = "the fleet's hosts with the new one";
    let (before, after) = match cpu_map {
        // The hosts as the fleet read them: no facts file read twice.
        Some(map) => {
            let others = (0..fleet.hosts.len()).filter(|h| *h != new);
            let before = fleet
                .cluster_hosts(others)
                .map_err(|e| format!("{source}: {e}"))
                .and_then(|h| ClusterCpu::of_hosts(&h, source, map));
            let after = fleet
                .cluster_hosts(0..fleet.hosts.len())
                .map_err(|e| format!("{with_new}: {e}"))
                .and_then(|h| ClusterCpu::of_hosts(&h, with_new, map));
            (before, after)
        }
        // Not computed without CPUID data: its error says why.
        None => {
            let files: Vec<PathBuf> = fleet.hosts.iter().map(|h| h.path.clone()).collect();
            (
                ClusterCpu::of(Some(&files), source, None),
                ClusterCpu::of(Some(&files), with_new, None),
            )
        }
    };
    let mut models = Vec::new();
    if let Ok(b) = &before {
        models.push(cluster_model(
            fleet,
            new,
            format!("the cluster's CPU (baseline of {})", b.hosts_text()),
            &b.model,
            &b.require,
            &b.disable,
        ));
    }
    for rule in &fleet.policy.rules {
        let Some(model) = rule.cpu.model.as_deref().filter(|m| *m != BASELINE_MODEL) else {
            continue;
        };
        let require = rule.cpu.require.clone().unwrap_or_default();
        let disable = rule.cpu.disable.clone().unwrap_or_default();
        models.push(cluster_model(
            fleet,
            new,
            format!("the model rule '{}' pins", rule.name),
            model,
            &require,
            &disable,
        ));
    }
    Admission {
        host: new,
        pairs,
        models,
        cluster: ClusterChange { before, after },
    }
}

/// A KVM guest of the CPU `model` + `require` − `disable` judged on host `h`.
fn cluster_model(
    fleet: &Fleet,
    h: usize,
    what: String,
    model: &str,
    require: &[String],
    disable: &[String],
) -> ClusterModel {
    use std::fmt::Write as _;
    let esc = |v: &str| quick_xml::escape::escape(v).into_owned();
    let mut cpu = format!(
        "<cpu mode='custom' match='exact' check='partial'><model fallback='forbid'>{}</model>",
        esc(model)
    );
    for (list, policy) in [(require, "require"), (disable, "disable")] {
        for f in list {
            let _ = write!(cpu, "<feature policy='{policy}' name='{}'/>", esc(f));
        }
    }
    cpu.push_str("</cpu>");
    let arch = fleet.host_arch(h).unwrap_or("x86_64");
    let shape = format!(
        "<domain type='kvm'>\n  <vcpu>1</vcpu>\n  <os><type arch='{}'>hvm</type></os>\n  {cpu}\n</domain>\n",
        esc(arch)
    );
    let class = &fleet.classes[fleet.hosts[h].class];
    let reasons = super::judge::judge_shape(
        &shape,
        fleet.policy_none(),
        &class.host,
        &class.map,
        crate::destination::Arrival::Start,
    );
    let reasons = fleet.in_own_words(h, class.names_judged(reasons));
    ClusterModel { what, cpu, reasons }
}

/// One guest of an upgraded host.
#[derive(Debug, Clone)]
pub struct Upgraded {
    /// The guest's index.
    pub guest: usize,
    /// Why the new generation cannot run it as it is; empty: it runs.
    pub reasons: Rc<Vec<Reason>>,
    /// The rewrite the policy makes on the new generation, when the guest cannot run as it is:
    /// each change in words, and whether the result runs there.
    pub fix: Option<Fix>,
}

/// The policy's rewrite of a guest with the new generation's facts.
#[derive(Debug, Clone)]
pub struct Fix {
    /// Each change, one sentence (`element: what (rule)`).
    pub changes: Vec<String>,
    /// Why the rewritten guest still cannot run there; empty: the rewrite fixes it.
    pub remaining: Vec<Reason>,
}

/// Host `h`'s guests judged on host `to` (the new generation's facts, read into the fleet) by
/// define and start of their definitions, as the upgraded host restarts them (a running
/// transient guest, which has none, by its live facts), each that cannot run as it is
/// with the policy's rewrite (`policy`, with `to`'s facts) and the verdict on the result.
#[must_use]
pub fn upgrade(fleet: &Fleet, h: usize, to: usize, policy: &Policy) -> Vec<Upgraded> {
    let class = &fleet.classes[fleet.hosts[to].class];
    fleet
        .guests_on(h)
        .into_iter()
        .map(|guest| {
            let facts = &fleet.guests[guest].facts;
            let definition = facts.definition.as_deref().unwrap_or(&facts.domain);
            // A known hazard of the upgraded host's releases (a start's: libvirt 12.4 with a
            // QEMU before 7.2) holds whatever the guest's definition: no rewrite mends it.
            let mut judged = fleet.in_own_words(
                to,
                class.names_judged(super::judge::judge_shape(
                    definition,
                    fleet.policy_none(),
                    &class.host,
                    &class.map,
                    crate::destination::Arrival::Start,
                )),
            );
            let refused =
                crate::hazards::When::refused_by_capabilities(judged.iter().map(|r| r.code));
            let hazards = fleet.start_hazard_reasons(guest, to, refused);
            judged.extend(hazards.iter().cloned());
            let reasons = Rc::new(judged);
            let fix = (!reasons.is_empty())
                .then(|| fix(definition, policy, fleet, &class.host, &class.map))
                .flatten()
                .map(|mut f| {
                    for c in &mut f.changes {
                        fleet.own_text(to, c);
                    }
                    let mut remaining = fleet.in_own_words(to, class.names_judged(f.remaining));
                    remaining.extend(hazards.iter().cloned());
                    Fix { remaining, ..f }
                });
            Upgraded {
                guest,
                reasons,
                fix,
            }
        })
        .collect()
}

/// The policy's rewrite of `domain` with `host`'s facts, when it changes something, and the
/// judge's verdict on the result.
fn fix(
    domain: &str,
    policy: &Policy,
    fleet: &Fleet,
    host: &Host,
    map: &crate::destination::CpuMapCache,
) -> Option<Fix> {
    let outcome = crate::rewrite::rewrite(domain, "guest facts", policy, host).ok()?;
    if !outcome.changed {
        return None;
    }
    let changes = outcome
        .changes
        .iter()
        .map(|c| format!("{}: {} (rule '{}')", c.element, c.what, c.rule))
        .collect();
    // An upgrade stops the guest (or it migrates to an upgraded host): judged by define and
    // start, as libvirt there will.
    let remaining = super::judge::judge_shape(
        &outcome.output,
        fleet.policy_none(),
        host,
        map,
        crate::destination::Arrival::Start,
    );
    Some(Fix { changes, remaining })
}
