//! `fleet --guest NAME`: one guest's answer on every host — its verdict and reasons (the pairs
//! of `fleet --pairs` for that guest, the same reasons), and the CPU it would have there with
//! the psABI level that CPU reaches.
//!
//! The CPU on a host is what libvirt gives the guest there: a running guest's live CPU is what a
//! live migration carries (libvirt's live XML names the model a `host-model` CPU became); a
//! stopped guest's custom model is its own (or QEMU's default model of its arch), a `host-model`
//! CPU becomes the host's host-model CPU (its domcapabilities' `<mode name='host-model'>`), and a
//! `host-passthrough` or `maximum` CPU is the host's own (its capabilities' `<host><cpu>`). The
//! level is [`crate::audit::level_of`]'s reading on that host's facts: under KVM only what the
//! host's KVM gives counts (QEMU drops the rest silently).

use super::format::{pair_json, verdict};
use super::views::Pair;
use super::{Fleet, FleetError, Reason, running};
use crate::audit::{LevelReading, level_of};
use crate::cpu::default_model;
use crate::domain::{cpu_mode, model_name};
use crate::host::Host;
use crate::libvirt::cpu_def::CpuMode;
use crate::pipeline::Pipeline;
use crate::xml::child;
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::rc::Rc;

/// The CPU a guest would have on a host, and the level it reaches there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuThere {
    /// libvirt's `<cpu mode>` of the guest's document (its live XML for a running guest);
    /// None when the guest has no `<cpu>` (QEMU's default model).
    pub mode: Option<CpuMode>,
    /// The model it would have: see the module docs; None when the host's facts do not say
    /// (no domcapabilities for a `host-model` CPU, no capabilities host CPU for
    /// `host-passthrough`), or the guest is out of the tool's scope.
    pub model: Option<String>,
    /// The psABI level and what it was decided from ([`LevelReading`]).
    pub level: LevelReading,
}

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

impl CpuThere {
    /// No CPU known, for the reason `basis` (the [`LevelReading`]'s basis).
    pub(super) fn unknown(basis: &'static str) -> CpuThere {
        CpuThere {
            mode: None,
            model: None,
            level: LevelReading { level: None, basis },
        }
    }
}

/// The CPU pipeline `p`'s guest would have on `host` (see the module docs), `host_cpu` the
/// model of that host's own CPU (its capabilities' `<host><cpu><model>`).
pub(super) fn cpu_on(p: &Pipeline<'_, '_>, host: &Host, host_cpu: Option<&str>) -> CpuThere {
    // A host that does not run the guest's arch gives it no CPU at all.
    if host
        .arch_unsupported(p.dom.arch(), p.dom.virt_type())
        .is_some()
    {
        return CpuThere::unknown("the host does not run this arch");
    }
    let cpu = p.dom.cpus().first().copied();
    let mode = cpu.and_then(cpu_mode);
    let model = match mode.unwrap_or(CpuMode::Custom) {
        CpuMode::Custom => cpu
            .and_then(|c| child(c, "model"))
            .and_then(model_name)
            .or_else(|| default_model(p.dom.arch()).map(str::to_string)),
        // The host-model CPU of the guest's virt type: under TCG libvirt's domcapabilities of
        // type 'qemu' name the one QEMU emulates.
        CpuMode::HostModel => p
            .facts
            .domcaps
            .and_then(|d| d.host_model.as_ref())
            .and_then(|m| m.model.clone()),
        CpuMode::HostPassthrough | CpuMode::Maximum if p.dom.virt_type() == "kvm" => {
            host_cpu.map(str::to_string)
        }
        // Under TCG libvirt runs `maximum` as QEMU's `-cpu max` (qemuBuildCpuModelArgStr);
        // `host-passthrough` it refuses there.
        CpuMode::Maximum => Some("max".to_string()),
        CpuMode::HostPassthrough => None,
    };
    CpuThere {
        mode,
        model,
        level: level_of(p.dom, &p.facts),
    }
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
