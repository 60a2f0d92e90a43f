//! `fleet --guest NAME`: one guest's answer on every host — its verdict and reasons (the pairs
//! of `fleet --pairs` for that guest, the same reasons), and the CPU it would have there with
//! the psABI level that CPU reaches.
//!
//! The CPU on a host is [`CpuThere`] (`src/fleet/cpu_there.rs`).

pub use super::cpu_there::CpuThere;
use super::format::{pair_json, verdict};
use super::views::Pair;
use super::{Fleet, FleetError, Reason, running};
use crate::audit::LevelReading;
use crate::libvirt::cpu_def::CpuMode;
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::rc::Rc;

/// One host's answer for a guest.
#[derive(Debug, Clone)]
pub struct Where {
    /// The host (an index in [`Fleet::hosts`]).
    pub host: usize,
    /// Why it cannot run the guest there, as [`Fleet::reasons`] (empty: it runs there).
    pub reasons: Rc<Vec<Reason>>,
    /// The CPU it would have there.
    pub cpu: CpuThere,
}

/// The guests `name` names: those whose `<name>` is `name`, else whose `<uuid>` is (libvirt's
/// names are unique per host only: the same name on two hosts is two guests).
///
/// # Errors
/// [`FleetError::UnknownGuest`] when none is.
pub fn find(fleet: &Fleet, name: &str) -> Result<Vec<usize>, FleetError> {
    let by_name: Vec<usize> = (0..fleet.guests.len())
        .filter(|g| fleet.guests[*g].facts.name == name)
        .collect();
    if !by_name.is_empty() {
        return Ok(by_name);
    }
    // libvirt reads a UUID with or without its dashes, in either case (virUUIDParse).
    let plain = |u: &str| u.replace('-', "").to_ascii_lowercase();
    let wanted = plain(name);
    let by_uuid: Vec<usize> = (0..fleet.guests.len())
        .filter(|g| {
            !wanted.is_empty()
                && uuid_of(&fleet.guests[*g].facts.domain).is_some_and(|u| plain(&u) == wanted)
        })
        .collect();
    if by_uuid.is_empty() {
        return Err(FleetError::UnknownGuest(name.to_string()));
    }
    Ok(by_uuid)
}

/// A reduced domain's `<uuid>`, lower case.
fn uuid_of(domain: &str) -> Option<String> {
    let start = domain.find("<uuid>")? + "<uuid>".len();
    let end = start + domain[start..].find("</uuid>")?;
    Some(domain[start..end].trim().to_ascii_lowercase())
}

/// Guest `g` on every host of the fleet, in the hosts' order. The CPU is worked out once per
/// host class (hosts of one class have the same facts).
#[must_use]
pub fn answers(fleet: &Fleet, g: usize) -> Vec<Where> {
    let mut by_class: Vec<Option<CpuThere>> = vec![None; fleet.class_count()];
    (0..fleet.hosts.len())
        .map(|h| {
            let c = fleet.class_of(h);
            let cpu = by_class[c]
                .get_or_insert_with(|| cpu_there(fleet, g, h))
                .clone();
            Where {
                host: h,
                reasons: fleet.reasons(g, h),
                cpu,
            }
        })
        .collect()
}

/// The CPU guest `g` would have on host `h` (see the module docs), worked out once per guest
/// shape and host class ([`Fleet::judge_cpus`]).
pub(super) fn cpu_there(fleet: &Fleet, g: usize, h: usize) -> CpuThere {
    fleet.cpu_in(g, fleet.class_of(h))
}

/// The CPU as words: `MODEL (MODE)`, or what is not known.
fn cpu_words(c: &CpuThere) -> String {
    let mode = c.mode.map_or("no <cpu>", CpuMode::as_str);
    match &c.model {
        Some(m) => format!("{m} ({mode})"),
        None => format!("not known ({mode})"),
    }
}

/// The level as words: `x86-64-v2`, `below x86-64-v1`, or `not known (WHY)`.
fn level_words(l: &LevelReading) -> String {
    match l.level {
        Some(v) => v.as_str().to_string(),
        None if known_basis(l.basis) => "below x86-64-v1".to_string(),
        None => format!("not known ({})", l.basis),
    }
}

/// Whether a [`LevelReading`] without a level was read from the CPU's features (the CPU is below
/// x86-64-v1), not left unread for want of a fact.
fn known_basis(basis: &str) -> bool {
    matches!(
        basis,
        "model" | "model and domcapabilities" | "model and QEMU's KVM host CPU" | "domcapabilities"
    )
}

/// The answers for people: the guest, where it is, then one line per host with its verdict, CPU
/// and level, each reason under it.
#[must_use]
pub fn text(fleet: &Fleet, g: usize, list: &[Where]) -> String {
    let guest = &fleet.guests[g];
    let runs = list.iter().filter(|w| w.reasons.is_empty()).count();
    let nc = list
        .iter()
        .filter(|w| super::not_compared(&w.reasons))
        .count();
    let on = guest.facts.host.as_deref().unwrap_or("a host not named");
    let how = if running(guest) {
        "running: a host takes it by live migration, with the CPU it has"
    } else {
        "shut off: a host takes it by define and start"
    };
    let mut s = format!(
        "guest {} on {on} ({how})\n  runs on {runs} of {} hosts, cannot on {}, not compared on {nc}\n",
        guest.facts.name,
        list.len(),
        list.len() - runs - nc,
    );
    for w in list {
        let here = if fleet.source(g) == Some(w.host) {
            " (its host)"
        } else {
            ""
        };
        let _ = writeln!(
            s,
            "  {}{here}: {}; CPU {}, level {}",
            fleet.hosts[w.host].name,
            verdict(&w.reasons),
            cpu_words(&w.cpu),
            level_words(&w.cpu.level),
        );
        for r in w.reasons.iter() {
            let _ = writeln!(s, "    [{}] {}", r.code.as_str(), r.message);
        }
    }
    s
}

/// The answers as JSON: `{"guest", "host", "state", "hosts": [{"guest", "host", "verdict",
/// "reasons": [{"code", "message"}], "cpu": {"mode", "model", "level", "level_basis"}}]}`:
/// each of `hosts` is the pair `fleet --pairs --format json` writes for the guest and that host,
/// with its `cpu` added (`level` null when not known or below x86-64-v1, `level_basis` saying
/// which).
#[must_use]
pub fn json(fleet: &Fleet, g: usize, list: &[Where]) -> Value {
    let guest = &fleet.guests[g];
    let hosts: Vec<Value> = list
        .iter()
        .map(|w| {
            let mut v = pair_json(
                fleet,
                &Pair {
                    guest: g,
                    host: w.host,
                    reasons: w.reasons.clone(),
                },
            );
            if let Value::Object(m) = &mut v {
                m.insert(
                    "cpu".into(),
                    json!({
                        "mode": w.cpu.mode.map(CpuMode::as_str),
                        "model": w.cpu.model,
                        "level": w.cpu.level.level.map(crate::cpu::Level::as_str),
                        "level_basis": w.cpu.level.basis,
                    }),
                );
            }
            v
        })
        .collect();
    json!({
        "guest": guest.facts.name,
        "host": guest.facts.host,
        "state": guest.facts.state.as_str(),
        "hosts": hosts,
    })
}
