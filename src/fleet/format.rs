//! The fleet's views as text for people, JSON (docs/json.md, "fleet") and Prometheus series
//! (docs/metrics.md, "The fleet").

use super::views::{Admission, Leaving, Pair, Tally, Upgraded, class_members};
use super::{Fleet, Reason, running};
use crate::cluster::cluster_cpu::ClusterCpu;
use crate::verdict::{JSON_SCHEMA_VERSION, Verdict};
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::io::Write;

/// `runs`, `not-compared` ([`super::not_compared`]) or `cannot`. A pair not compared for want
/// of a fact is what `check` calls [`Verdict::NotCompared`], and is written in its word.
pub(super) fn verdict(reasons: &[Reason]) -> &'static str {
    if reasons.is_empty() {
        "runs"
    } else if super::not_compared(reasons) {
        Verdict::NotCompared.as_str()
    } else {
        "cannot"
    }
}

fn reasons_json(reasons: &[Reason]) -> Value {
    Value::Array(
        reasons
            .iter()
            .map(|r| json!({"code": r.code.as_str(), "message": r.message}))
            .collect(),
    )
}

pub(super) fn pair_json(fleet: &Fleet, p: &Pair) -> Value {
    json!({
        "guest": fleet.guests[p.guest].facts.name,
        "host": fleet.hosts[p.host].name,
        "verdict": verdict(&p.reasons),
        "reasons": reasons_json(&p.reasons),
    })
}

/// `N guest(s)`.
fn guests(n: usize) -> String {
    format!("{n} guest{}", if n == 1 { "" } else { "s" })
}

/// A drain as JSON: `{"schema_version", "host", "guests": [{"guest", "state", "stuck", "not_compared",
/// "destinations": [HOST], "refused": [{"host", "reasons"}]}]}`.
#[must_use]
pub fn drain_json(fleet: &Fleet, h: usize, leaving: &[Leaving]) -> Value {
    let guests: Vec<Value> = leaving
        .iter()
        .map(|l| {
            let g = &fleet.guests[l.guest];
            json!({
                "guest": g.facts.name,
                "state": g.facts.state.as_str(),
                "stuck": l.stuck(),
                "not_compared": l.unknown(),
                "destinations": l.to.iter().map(|t| fleet.hosts[*t].name.clone()).collect::<Vec<_>>(),
                "refused": l.refused.iter().map(|p| json!({
                    "host": fleet.hosts[p.host].name,
                    "reasons": reasons_json(&p.reasons),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "schema_version": JSON_SCHEMA_VERSION,
        "host": fleet.hosts[h].name,
        "guests_known": fleet.guests_known(h),
        "guests": guests,
    })
}

/// A drain for people: each guest with where it can go, or why it cannot leave.
#[must_use]
pub fn drain_text(fleet: &Fleet, h: usize, leaving: &[Leaving]) -> String {
    let host = &fleet.hosts[h].name;
    let stuck = leaving.iter().filter(|l| l.stuck()).count();
    let unknown = leaving.iter().filter(|l| l.unknown()).count();
    if !fleet.guests_known(h) {
        return format!("drain {host}: its guests are not known: no guest facts name {host}\n");
    }
    let mut s = format!(
        "drain {host}: {}, {} can leave, {} cannot{}\n",
        guests(leaving.len()),
        leaving.len() - stuck - unknown,
        stuck,
        if unknown > 0 {
            format!(", {unknown} not known (not compared)")
        } else {
            String::new()
        }
    );
    for l in leaving {
        let g = &fleet.guests[l.guest];
        let how = if running(g) {
            "live migration"
        } else {
            "define and start"
        };
        if l.stuck() {
            let _ = writeln!(s, "  {} ({how}): CANNOT LEAVE", g.facts.name);
        } else if l.unknown() {
            let _ = writeln!(
                s,
                "  {} ({how}): NOT KNOWN (no host runs it for sure; some were not compared)",
                g.facts.name
            );
        } else {
            let to: Vec<&str> = l.to.iter().map(|t| fleet.hosts[*t].name.as_str()).collect();
            let _ = writeln!(s, "  {} ({how}): to {}", g.facts.name, to.join(", "));
        }
        for p in &l.refused {
            for r in p.reasons.iter() {
                let _ = writeln!(
                    s,
                    "    not {}: [{}] {}",
                    fleet.hosts[p.host].name,
                    r.code.as_str(),
                    r.message
                );
            }
        }
    }
    if leaving.is_empty() {
        let _ = writeln!(s, "  (its guest facts list no guest)");
    }
    s
}

fn cluster_json(c: &Result<ClusterCpu, String>) -> Value {
    match c {
        Ok(c) => json!({
            "model": c.model,
            "require": c.require,
            "disable": c.disable,
            "level": c.level.map(crate::cpu::Level::as_str),
            "hosts": c.hosts,
        }),
        Err(e) => json!({"error": e}),
    }
}

fn cluster_text(c: &Result<ClusterCpu, String>) -> String {
    match c {
        Ok(c) => {
            let mut s = c.model.clone();
            for f in &c.require {
                let _ = write!(s, " +{f}");
            }
            for f in &c.disable {
                let _ = write!(s, " -{f}");
            }
            let _ = write!(
                s,
                " ({}, {})",
                c.level.map_or("below x86-64-v1", crate::cpu::Level::as_str),
                c.hosts_text()
            );
            s
        }
        Err(e) => format!("none: {e}"),
    }
}

/// An admission as JSON: `{"schema_version", "host", "pairs": [...as the matrix's],
/// "cluster_models": [{"what", "cpu", "verdict", "reasons"}], "cluster": {"before", "after",
/// "changes"}}`, each of `before` and `after` `{"model", "require", "disable", "level",
/// "hosts"}` or `{"error"}`; `changes` a bool, null when `after` is an error and `before` is not
/// ([`super::views::ClusterChange::unknown`]).
#[must_use]
pub fn admit_json(fleet: &Fleet, a: &Admission) -> Value {
    json!({
        "schema_version": JSON_SCHEMA_VERSION,
        "host": fleet.hosts[a.host].name,
        "pairs": a.pairs.iter().map(|p| pair_json(fleet, p)).collect::<Vec<_>>(),
        "cluster_models": a.models.iter().map(|m| json!({
            "what": m.what,
            "cpu": m.cpu,
            "verdict": verdict(&m.reasons),
            "reasons": reasons_json(&m.reasons),
        })).collect::<Vec<_>>(),
        "cluster": {
            "before": cluster_json(&a.cluster.before),
            "after": cluster_json(&a.cluster.after),
            "changes": a.cluster.changes(),
        },
    })
}

/// An admission for people.
#[must_use]
pub fn admit_text(fleet: &Fleet, a: &Admission) -> String {
    let host = &fleet.hosts[a.host].name;
    let cannot: Vec<&Pair> = a.pairs.iter().filter(|p| !p.runs()).collect();
    let nc = cannot.iter().filter(|p| p.not_compared()).count();
    let mut s = format!(
        "admit {host}: runs {} of {}{}\n",
        guests(a.pairs.len() - cannot.len()),
        a.pairs.len(),
        if nc > 0 {
            format!(", {nc} not compared")
        } else {
            String::new()
        }
    );
    for p in &cannot {
        let what = if p.not_compared() {
            "not compared with"
        } else {
            "cannot run"
        };
        let _ = writeln!(s, "  {what} {}:", fleet.guests[p.guest].facts.name);
        for r in p.reasons.iter() {
            let _ = writeln!(s, "    [{}] {}", r.code.as_str(), r.message);
        }
    }
    for m in &a.models {
        if m.reasons.is_empty() {
            let _ = writeln!(s, "runs {}", m.what);
        } else if super::not_compared(&m.reasons) {
            let _ = writeln!(s, "NOT COMPARED with {}:", m.what);
            for r in &m.reasons {
                let _ = writeln!(s, "    [{}] {}", r.code.as_str(), r.message);
            }
        } else {
            let _ = writeln!(s, "CANNOT run {}:", m.what);
            for r in &m.reasons {
                let _ = writeln!(s, "    [{}] {}", r.code.as_str(), r.message);
            }
        }
    }
    let _ = writeln!(
        s,
        "cluster CPU now:       {}",
        cluster_text(&a.cluster.before)
    );
    let _ = writeln!(
        s,
        "cluster CPU with {host}: {}",
        cluster_text(&a.cluster.after)
    );
    if a.cluster.unknown().is_some() {
        let _ = writeln!(
            s,
            "error: the cluster's CPU with {host} cannot be computed (the line above says why), so what {host} does to it is unknown"
        );
    } else if a.cluster.changes() == Some(true) {
        let _ = writeln!(
            s,
            "the cluster's CPU CHANGES with {host}: guests given cpu.model = \"baseline\" get the new CPU at their next start"
        );
    } else {
        let _ = writeln!(s, "the cluster's CPU stays the same");
    }
    s
}

/// An upgrade as JSON: `{"schema_version", "host", "to", "guests": [{"guest", "verdict",
/// "reasons", "fix": null | {"changes", "verdict", "reasons"}}]}`.
#[must_use]
pub fn upgrade_json(fleet: &Fleet, h: usize, to: usize, list: &[Upgraded]) -> Value {
    json!({
        "schema_version": JSON_SCHEMA_VERSION,
        "host": fleet.hosts[h].name,
        "to": fleet.hosts[to].name,
        "guests": list.iter().map(|u| json!({
            "guest": fleet.guests[u.guest].facts.name,
            "verdict": verdict(&u.reasons),
            "reasons": reasons_json(&u.reasons),
            "fix": u.fix.as_ref().map(|f| json!({
                "changes": f.changes,
                "verdict": verdict(&f.remaining),
                "reasons": reasons_json(&f.remaining),
            })),
        })).collect::<Vec<_>>(),
    })
}

/// An upgrade for people.
#[must_use]
pub fn upgrade_text(fleet: &Fleet, h: usize, to: usize, list: &[Upgraded]) -> String {
    let cannot = list.iter().filter(|u| !u.reasons.is_empty()).count();
    let version = |i: usize| {
        fleet.hosts[i]
            .libvirt
            .map_or_else(|| "libvirt ?".to_string(), |v| format!("libvirt {v}"))
    };
    if !fleet.guests_known(h) {
        return format!(
            "upgrade {} ({}) to {} ({}): its guests are not known: no guest facts name {}\n",
            fleet.hosts[h].name,
            version(h),
            version(to),
            fleet.hosts[to].path.display(),
            fleet.hosts[h].name,
        );
    }
    let mut s = format!(
        "upgrade {} ({}) to {} ({}): {} of {} run there as they are\n",
        fleet.hosts[h].name,
        version(h),
        version(to),
        fleet.hosts[to].path.display(),
        list.len() - cannot,
        guests(list.len())
    );
    for u in list.iter().filter(|u| !u.reasons.is_empty()) {
        let _ = writeln!(
            s,
            "  {}: {}",
            fleet.guests[u.guest].facts.name,
            verdict(&u.reasons)
        );
        for r in u.reasons.iter() {
            let _ = writeln!(s, "    [{}] {}", r.code.as_str(), r.message);
        }
        if super::not_compared(&u.reasons) {
            // Nothing to fix: a fact is missing.
            let _ = writeln!(
                s,
                "    give {} its domcapabilities (virt-cpu-policyd --publish writes them) to have it judged",
                fleet.hosts[to].path.display()
            );
            continue;
        }
        match &u.fix {
            Some(f) => {
                let _ = writeln!(
                    s,
                    "    the policy's rewrite there{}:",
                    if f.remaining.is_empty() {
                        " fixes it"
                    } else {
                        " does not fix it"
                    }
                );
                for c in &f.changes {
                    let _ = writeln!(s, "      {c}");
                }
                for r in &f.remaining {
                    let _ = writeln!(s, "      still [{}] {}", r.code.as_str(), r.message);
                }
            }
            None => {
                let _ = writeln!(s, "    the policy changes nothing here: fix it by hand");
            }
        }
    }
    s
}

/// The fleet's Prometheus series (text format 0.0.4): per host, the guests on it, the guests
/// that cannot leave it and the guests of other hosts it cannot take; the fleet's pairs by
/// verdict (`runs`, `cannot`, `not-compared`).
#[must_use]
pub fn prometheus(fleet: &Fleet, t: &Tally) -> String {
    use prometheus_client::encoding::prometheus_text;
    use prometheus_client::metrics::family::Family;
    use prometheus_client::metrics::gauge::Gauge;
    use prometheus_client::registry::Registry;
    type Labels = Vec<(String, String)>;
    let (cannot, not_compared) = (t.cannot, t.not_compared_pairs);
    let (undrainable, untakeable) = (&t.undrainable, &t.untakeable);
    let clamp = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    let mut reg = Registry::default();
    let per_host = |reg: &mut Registry, name: &str, help: &str, values: &dyn Fn(usize) -> usize| {
        let family = Family::<Labels, Gauge>::default();
        reg.register(name, help, family.clone());
        for (h, host) in fleet.hosts.iter().enumerate() {
            family
                .get_or_create(&vec![("host".to_string(), host.name.clone())])
                .set(clamp(values(h)));
        }
    };
    per_host(
        &mut reg,
        "virt_cpu_policy_fleet_guests",
        "Guests whose facts name the host",
        &|h| fleet.guests_on(h).len(),
    );
    per_host(
        &mut reg,
        "virt_cpu_policy_fleet_undrainable_guests",
        "Guests on the host that no other host of the fleet can run: they cannot leave it",
        &|h| undrainable[h],
    );
    per_host(
        &mut reg,
        "virt_cpu_policy_fleet_untakeable_guests",
        "Guests of other hosts (or of no known host) that this host cannot run",
        &|h| untakeable[h],
    );
    let by_verdict = Family::<Labels, Gauge>::default();
    reg.register(
        "virt_cpu_policy_fleet_pairs",
        "Guest x host pairs by verdict (runs, cannot, not-compared: a fact the judgement needs is missing)",
        by_verdict.clone(),
    );
    let pairs = fleet.guests.len() * fleet.hosts.len();
    for (v, n) in [
        ("runs", pairs - cannot - not_compared),
        ("cannot", cannot),
        (Verdict::NotCompared.as_str(), not_compared),
    ] {
        by_verdict
            .get_or_create(&vec![("verdict".to_string(), v.to_string())])
            .set(clamp(n));
    }
    // What the answers could not take into account ([`super::gaps::Gaps`]): 0 and 0 when
    // complete, so an alert can ask for both.
    for (name, help, n) in [
        (
            "virt_cpu_policy_fleet_unread_files",
            "Facts files the fleet could not read: the answers leave them out",
            fleet.gaps.unread.len(),
        ),
        (
            "virt_cpu_policy_fleet_unknown_host_guests",
            "Guests whose facts name a host the fleet has no facts of",
            fleet.gaps.unknown_host_guests(),
        ),
    ] {
        let g = Gauge::<i64>::default();
        g.set(clamp(n));
        reg.register(name, help, g);
    }
    let mut out = String::new();
    // Writing into a String cannot fail; the encoder's only error is the writer's.
    let _ = prometheus_text::encode(&mut out, &reg);
    crate::metrics::sorted_series(&out)
}

/// The hosts of one kind (a host class, [`super::views::class_members`]) of one verdict for one
/// guest (`cannot`, or not compared): how many, the first three, and the one of that kind whose
/// verdict differs (the guest's own host, where nothing migrates), if any.
struct Group {
    kind: usize,
    count: usize,
    named: Vec<usize>,
    except: Option<usize>,
}

/// Guest `g`'s groups of hosts of one verdict, one per kind, kinds in order: the kinds
/// `in_class` says it of, less the guest's own host where `at` does not.
fn groups(
    fleet: &Fleet,
    members: &[Vec<usize>],
    g: usize,
    in_class: impl Fn(usize) -> bool,
    at: impl Fn(usize) -> bool,
) -> Vec<Group> {
    let src = fleet.source(g);
    members
        .iter()
        .enumerate()
        .filter(|(c, _)| in_class(*c))
        .filter_map(|(kind, m)| {
            let except = src.filter(|s| fleet.class_of(*s) == kind && !at(*s));
            let count = m.len() - usize::from(except.is_some());
            (count > 0).then(|| Group {
                kind,
                count,
                named: m
                    .iter()
                    .copied()
                    .filter(|h| Some(*h) != except)
                    .take(3)
                    .collect(),
                except,
            })
        })
        .collect()
}

/// Guest `g`'s groups of hosts that cannot run it.
fn cannot_groups(fleet: &Fleet, members: &[Vec<usize>], g: usize) -> Vec<Group> {
    groups(
        fleet,
        members,
        g,
        |c| !fleet.runs_in(g, c) && !fleet.not_compared_in(g, c),
        |h| !fleet.runs(g, h) && !fleet.not_compared(g, h),
    )
}

/// Guest `g`'s groups of hosts it was not compared with.
fn not_compared_groups(fleet: &Fleet, members: &[Vec<usize>], g: usize) -> Vec<Group> {
    groups(
        fleet,
        members,
        g,
        |c| fleet.not_compared_in(g, c),
        |h| fleet.not_compared(g, h),
    )
}

/// The per-host table of the matrix views: each host's libvirt, its guests, the guests of the
/// fleet it runs and those it cannot, the guests that cannot leave it.
fn host_table(fleet: &Fleet, t: &Tally) -> String {
    let width = fleet
        .hosts
        .iter()
        .map(|h| h.name.chars().count())
        .max()
        .unwrap_or(4)
        .max(4);
    // A not-compared column only when some pair is: the table is otherwise as it was.
    let nc = t.not_compared_pairs > 0;
    let mut s = format!(
        "{:width$}  {:8}  {:>6}  {:>6}  {:>6}  {:>6}{}\n",
        "host",
        "libvirt",
        "guests",
        "runs",
        "cannot",
        "stuck",
        if nc { "  not-compared" } else { "" }
    );
    for (h, host) in fleet.hosts.iter().enumerate() {
        let _ = writeln!(
            s,
            "{:width$}  {:8}  {:>6}  {:>6}  {:>6}  {:>6}{}",
            host.name,
            host.libvirt
                .map_or_else(|| "?".to_string(), |v| v.to_string()),
            fleet.guests_on(h).len(),
            t.runs[h],
            fleet.guests.len() - t.runs[h] - t.not_compared[h],
            t.undrainable[h],
            if nc {
                format!("  {:>12}", t.not_compared[h])
            } else {
                String::new()
            }
        );
    }
    let total = fleet.guests.len() * fleet.hosts.len();
    let run = total - t.cannot - t.not_compared_pairs;
    // The not-compared count only when there are some: the line is otherwise as it was.
    let not_compared = if t.not_compared_pairs > 0 {
        format!(", {} not compared", t.not_compared_pairs)
    } else {
        String::new()
    };
    let _ = writeln!(
        s,
        "\n{} × {} host{}: {run} pair{} run, {} cannot{not_compared}",
        guests(fleet.guests.len()),
        fleet.hosts.len(),
        if fleet.hosts.len() == 1 { "" } else { "s" },
        if run == 1 { "" } else { "s" },
        t.cannot
    );
    s
}

/// `h1, h5, h9 and 245 more`.
fn some_hosts(fleet: &Fleet, named: &[usize], all: usize) -> String {
    let mut s = named
        .iter()
        .map(|h| fleet.hosts[*h].name.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    if all > named.len() {
        let _ = write!(s, " and {} more", all - named.len());
    }
    s
}

/// The matrix summarised for people, written to `out` as it is made: the per-host table and the
/// totals, then each guest that some host cannot run, with the count of hosts that run it and,
/// per kind of host that cannot (hosts alike in what the judge reads), how many, three of them
/// named, and the reasons (as the first named host's facts give them). `fleet --pairs` gives
/// every pair ([`matrix_text_to`]).
///
/// # Errors
/// The writer's.
pub fn summary_text(fleet: &Fleet, t: &Tally, out: &mut dyn Write) -> std::io::Result<()> {
    out.write_all(host_table(fleet, t).as_bytes())?;
    let members = class_members(fleet);
    let hosts = fleet.hosts.len();
    for (g, guest) in fleet.guests.iter().enumerate() {
        if t.runs_on[g] == hosts {
            continue;
        }
        let on = guest
            .facts
            .host
            .as_ref()
            .map_or_else(String::new, |h| format!(", on {h}"));
        let nc = t.not_compared_on[g];
        let mut s = format!(
            "  {} ({}{on}): runs on {} of {hosts} hosts, cannot on {}{}\n",
            guest.facts.name,
            guest.facts.state.as_str(),
            t.runs_on[g],
            hosts - t.runs_on[g] - nc,
            if nc > 0 {
                format!(", not compared on {nc}")
            } else {
                String::new()
            }
        );
        let cannot = cannot_groups(fleet, &members, g)
            .into_iter()
            .map(|x| (x, ""));
        let unknown = not_compared_groups(fleet, &members, g)
            .into_iter()
            .map(|x| (x, ", not compared"));
        for (group, what) in cannot.chain(unknown) {
            // The operator's words: hosts alike in their facts (JSON numbers their `kinds`).
            let _ = writeln!(
                s,
                "    {} ({}){what}:",
                if group.count == 1 {
                    "1 host".to_string()
                } else {
                    format!("{} hosts alike", group.count)
                },
                some_hosts(fleet, &group.named, group.count)
            );
            for r in fleet.reasons(g, group.named[0]).iter() {
                let _ = writeln!(s, "      [{}] {}", r.code.as_str(), r.message);
            }
        }
        out.write_all(s.as_bytes())?;
    }
    Ok(())
}

/// The schema version of the summarised matrix ([`summary_json`]); `fleet --pairs` gives the
/// matrix of [`JSON_SCHEMA_VERSION`].
pub const SUMMARY_SCHEMA_VERSION: u32 = 2;

/// The matrix summarised as one JSON object, written to `out` as it is made (bounded memory
/// whatever the fleet): `{"schema_version": 2, "kinds": [{"kind", "hosts": [HOST]}], "hosts":
/// [{"host", "libvirt", "kind", "guests", "runs", "cannot", "not_compared", "stuck"}], "pairs":
/// {"runs", "cannot", "not_compared"}, "guests": [{"guest", "state", "host", "runs_on", "cannot":
/// [{"kind", "hosts", "except": [HOST], "reasons"}], "not_compared_on", "not_compared": [as
/// "cannot"]}]}` (docs/json.md).
///
/// # Errors
/// The writer's.
pub fn summary_json(fleet: &Fleet, t: &Tally, out: &mut dyn Write) -> std::io::Result<()> {
    let members = class_members(fleet);
    let name = |h: usize| fleet.hosts[h].name.clone();
    let kinds: Vec<Value> = members
        .iter()
        .enumerate()
        .map(|(k, m)| json!({"kind": k, "hosts": m.iter().map(|h| name(*h)).collect::<Vec<_>>()}))
        .collect();
    let hosts: Vec<Value> = (0..fleet.hosts.len())
        .map(|h| {
            json!({
                "host": name(h),
                "libvirt": fleet.hosts[h].libvirt.map(|v| v.to_string()),
                "kind": fleet.class_of(h),
                "guests": fleet.guests_on(h).len(),
                "runs": t.runs[h],
                "cannot": fleet.guests.len() - t.runs[h] - t.not_compared[h],
                "not_compared": t.not_compared[h],
                "stuck": t.undrainable[h],
            })
        })
        .collect();
    let total = fleet.guests.len() * fleet.hosts.len();
    // One object, keys in the documented order, "guests" streamed last.
    write!(
        out,
        "{{\"schema_version\":{SUMMARY_SCHEMA_VERSION},\"kinds\":{},\"hosts\":{},\"pairs\":{},\"guests\":[",
        Value::Array(kinds),
        Value::Array(hosts),
        json!({"runs": total - t.cannot - t.not_compared_pairs, "cannot": t.cannot, "not_compared": t.not_compared_pairs}),
    )?;
    let groups_json = |g: usize, groups: Vec<Group>| -> Vec<Value> {
        groups
            .into_iter()
            .map(|group| {
                json!({
                    "kind": group.kind,
                    "hosts": group.count,
                    "except": group.except.map(name).into_iter().collect::<Vec<_>>(),
                    "reasons": reasons_json(&fleet.reasons(g, group.named[0])),
                })
            })
            .collect()
    };
    for (g, guest) in fleet.guests.iter().enumerate() {
        let v = json!({
            "guest": guest.facts.name,
            "state": guest.facts.state.as_str(),
            "host": guest.facts.host,
            "runs_on": t.runs_on[g],
            "cannot": groups_json(g, cannot_groups(fleet, &members, g)),
            "not_compared_on": t.not_compared_on[g],
            "not_compared": groups_json(g, not_compared_groups(fleet, &members, g)),
        });
        if g > 0 {
            out.write_all(b",")?;
        }
        serde_json::to_writer(&mut *out, &v)?;
    }
    writeln!(out, "],\"incomplete\":{}}}", fleet.gaps.json())
}

/// Every pair as JSON, `{"pairs": [{"guest", "host", "verdict", "reasons": [{"code",
/// "message"}]}], "schema_version": 1}` (pretty-printed, as `fleet --pairs --format json` always
/// wrote it), written to `out` pair by pair without holding the document.
///
/// # Errors
/// The writer's.
pub fn matrix_json_to(fleet: &Fleet, out: &mut dyn Write) -> std::io::Result<()> {
    out.write_all(b"{\n  \"pairs\": [")?;
    let mut first = true;
    for guest in 0..fleet.guests.len() {
        for host in 0..fleet.hosts.len() {
            let p = Pair {
                guest,
                host,
                reasons: fleet.reasons(guest, host),
            };
            let text = serde_json::to_string_pretty(&pair_json(fleet, &p))?;
            out.write_all(if first { b"\n" } else { b",\n" })?;
            first = false;
            for (i, line) in text.lines().enumerate() {
                if i > 0 {
                    out.write_all(b"\n")?;
                }
                out.write_all(b"    ")?;
                out.write_all(line.as_bytes())?;
            }
        }
    }
    let close = if first { "]" } else { "\n  ]" };
    let incomplete = serde_json::to_string_pretty(&fleet.gaps.json())?.replace('\n', "\n  ");
    write!(
        out,
        "{close},\n  \"incomplete\": {incomplete},\n  \"schema_version\": {JSON_SCHEMA_VERSION}\n}}\n"
    )
}

/// Every pair for people (`fleet --pairs`): the per-host table and the totals, then every pair
/// that cannot run, with its reasons; written to `out` guest by guest, without holding the
/// pairs.
///
/// # Errors
/// The writer's.
pub fn matrix_text_to(fleet: &Fleet, t: &Tally, out: &mut dyn Write) -> std::io::Result<()> {
    out.write_all(host_table(fleet, t).as_bytes())?;
    for guest in 0..fleet.guests.len() {
        if t.runs_on[guest] == fleet.hosts.len() {
            continue;
        }
        let mut s = String::new();
        for host in 0..fleet.hosts.len() {
            let reasons = fleet.reasons(guest, host);
            if reasons.is_empty() {
                continue;
            }
            let _ = writeln!(
                s,
                "  {} on {}: {}",
                fleet.guests[guest].facts.name,
                fleet.hosts[host].name,
                verdict(&reasons)
            );
            for r in reasons.iter() {
                let _ = writeln!(s, "    [{}] {}", r.code.as_str(), r.message);
            }
        }
        out.write_all(s.as_bytes())?;
    }
    Ok(())
}
