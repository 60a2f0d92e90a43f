//! A cluster report, or a comparison, written out for people and for the tools that take a guest
//! CPU: text, JSON, a `virt-cpu-policy` policy, `nova.conf` lines (`[libvirt] cpu_mode`,
//! `cpu_models`, `cpu_model_extra_flags`) and CloudStack `agent.properties` lines
//! (`guest.cpu.mode`, `guest.cpu.model`, `guest.cpu.features`).
//!
//! Nova and CloudStack both spell a disabled feature `-name` (Nova's `cpu_model_extra_flags`
//! since Wallaby; CloudStack's `LibvirtVMDef.CpuModeDef` writes `policy='disable'` for it).

use crate::cluster::analysis::ClusterReport;
use crate::cluster::hosts::ClusterHost;
use crate::cpu::Level;
use crate::cpu::compare::{Comparison, GuestCpu};
use std::fmt::Write as _;

/// The output formats of `virt-cpu-policy baseline`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BaselineFormat {
    /// A report for people.
    Text,
    /// One JSON object (its shape: docs/json.md).
    Json,
    /// A whole policy file whose one rule gives guests the baseline.
    Toml,
    /// `nova.conf`'s `[libvirt]` lines.
    Nova,
    /// CloudStack `agent.properties` lines.
    CloudStack,
}

/// Writes `report` in `format`; always ends with a newline.
#[must_use]
pub fn render(report: &ClusterReport, format: BaselineFormat) -> String {
    match format {
        BaselineFormat::Text => text(report),
        BaselineFormat::Json => format!("{}\n", json(report)),
        BaselineFormat::Toml => toml(report),
        BaselineFormat::Nova => nova(report),
        BaselineFormat::CloudStack => cloudstack(report),
    }
}

/// The JSON object of a report: `arch`, `model`, `vendor`, `require`, `disable`, `level`,
/// `hosts` (each `name`, `source`, `level`, `lacks`: level name → missing features) and
/// `groups` (lists of host names); `kvm_left_out` (`features`, `hosts`) only when features KVM
/// never gives a guest were left out ([`ClusterReport::kvm_left_out`]); `topology_left_out` (a
/// list) only when features QEMU derives from the topology were
/// ([`ClusterReport::topology_left_out`]). `model`, `vendor` and
/// `level` are null when there is none (off x86; `vendor` also when the hosts' vendors differ or
/// one names none).
#[must_use]
pub fn json(report: &ClusterReport) -> serde_json::Value {
    let b = report.baseline.as_ref();
    let level = |l: Option<Level>| l.map(Level::as_str);
    let hosts: Vec<serde_json::Value> = report
        .hosts
        .iter()
        .map(|h| {
            let lacks: serde_json::Map<String, serde_json::Value> = h
                .lacks
                .iter()
                .map(|(l, f)| (l.as_str().to_string(), serde_json::json!(f)))
                .collect();
            serde_json::json!({
                "name": h.name,
                "source": h.source.display().to_string(),
                "level": level(h.level),
                "lacks": lacks,
            })
        })
        .collect();
    let mut v = serde_json::json!({
        "arch": report.arch,
        "model": b.map(|b| &b.cpu.model),
        "vendor": b.and_then(|b| b.cpu.vendor.as_ref()),
        "require": b.map_or(&[][..], |b| &b.cpu.require[..]),
        "disable": b.map_or(&[][..], |b| &b.cpu.disable[..]),
        "level": level(report.level),
        "hosts": hosts,
        "groups": report.groups,
    });
    // Only when something was left out: the object of hosts that all have domcapabilities is
    // what it was.
    if let Some(k) = &report.kvm_left_out {
        v["kvm_left_out"] = serde_json::json!({"features": k.features, "hosts": k.hosts});
    }
    if !report.topology_left_out.is_empty() {
        v["topology_left_out"] = serde_json::json!(report.topology_left_out);
    }
    if !report.arch_capabilities_left_out.is_empty() {
        v["arch_capabilities_left_out"] = serde_json::json!(report.arch_capabilities_left_out);
    }
    v
}

/// One comment line naming the hosts and the level, for the config formats.
fn header(report: &ClusterReport, comment: &str) -> String {
    let names: Vec<&str> = report.hosts.iter().map(|h| h.name.as_str()).collect();
    let level = report
        .level
        .map_or_else(|| "no psABI level".to_string(), |l| l.to_string());
    let mut s = format!(
        "{comment} virt-cpu-policy baseline of {} {} host(s): {}; {level}\n",
        names.len(),
        report.arch,
        names.join(", ")
    );
    if report.baseline.is_none() {
        let _ = writeln!(
            s,
            "{comment} no custom model is migration-safe on {} under KVM: host-passthrough guests migrate only inside a group of identical CPUs ({})",
            report.arch,
            groups_inline(report)
        );
    }
    for f in &report.non_migratable {
        let _ = writeln!(
            s,
            "{comment} {f} is migratable='no' in libvirt: guests with it cannot be live-migrated (virt-cpu-policy baseline --migratable leaves it out)"
        );
    }
    if let Some(k) = &report.kvm_left_out {
        let _ = writeln!(s, "{comment} {}", k.sentence());
    }
    if !report.topology_left_out.is_empty() {
        let _ = writeln!(
            s,
            "{comment} {}",
            crate::cluster::analysis::topology_sentence(&report.topology_left_out)
        );
    }
    if !report.arch_capabilities_left_out.is_empty() {
        let _ = writeln!(
            s,
            "{comment} {}",
            crate::cluster::analysis::arch_capabilities_sentence(
                &report.arch_capabilities_left_out
            )
        );
    }
    s
}

fn groups_inline(report: &ClusterReport) -> String {
    let g: Vec<String> = report
        .groups
        .iter()
        .map(|g| format!("[{}]", g.join(", ")))
        .collect();
    g.join(" ")
}

/// A TOML string literal.
fn quoted(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

fn toml(report: &ClusterReport) -> String {
    let mut s = header(report, "#");
    s.push_str("version = 1\n\n[[rule]]\n");
    let Some(b) = &report.baseline else {
        let _ = writeln!(s, "name = {}", quoted(&format!("{} cluster", report.arch)));
        let _ = writeln!(s, "match = {{ arch = {} }}", quoted(&report.arch));
        s.push_str("cpu.mode = \"host-passthrough\"\n");
        return s;
    };
    let list = |v: &[String]| {
        let q: Vec<String> = v.iter().map(|f| quoted(f)).collect();
        format!("[{}]", q.join(", "))
    };
    let _ = writeln!(s, "name = \"cluster baseline\"");
    let _ = writeln!(s, "match = {{ arch = {} }}", quoted(&report.arch));
    s.push_str("cpu.mode = \"custom\"\n");
    let _ = writeln!(s, "cpu.model = {}", quoted(&b.cpu.model));
    let _ = writeln!(s, "cpu.require = {}", list(&b.cpu.require));
    if !b.cpu.disable.is_empty() {
        let _ = writeln!(s, "cpu.disable = {}", list(&b.cpu.disable));
    }
    // The policy reader refuses cpu.min_level off x86_64 (`level-arch`): an i686 cluster's rule
    // has none.
    if let (Some(l), "x86_64") = (report.level, report.arch.as_str()) {
        let _ = writeln!(s, "cpu.min_level = {}", quoted(l.as_str()));
    }
    s
}

/// The extra features as Nova and CloudStack spell them: required ones, then `-disabled` ones.
fn flags(report: &ClusterReport) -> Vec<String> {
    report.baseline.as_ref().map_or_else(Vec::new, |b| {
        let disabled = b.cpu.disable.iter().map(|f| format!("-{f}"));
        b.cpu.require.iter().cloned().chain(disabled).collect()
    })
}

fn nova(report: &ClusterReport) -> String {
    let mut s = header(report, "#");
    s.push_str("[libvirt]\n");
    let Some(b) = &report.baseline else {
        s.push_str("cpu_mode = host-passthrough\n");
        return s;
    };
    let _ = writeln!(s, "cpu_mode = custom\ncpu_models = {}", b.cpu.model);
    let flags = flags(report);
    if !flags.is_empty() {
        let _ = writeln!(s, "cpu_model_extra_flags = {}", flags.join(", "));
    }
    s
}

fn cloudstack(report: &ClusterReport) -> String {
    let mut s = header(report, "#");
    let Some(b) = &report.baseline else {
        s.push_str("guest.cpu.mode=host-passthrough\n");
        return s;
    };
    let _ = writeln!(s, "guest.cpu.mode=custom\nguest.cpu.model={}", b.cpu.model);
    let flags = flags(report);
    if !flags.is_empty() {
        let _ = writeln!(s, "guest.cpu.features={}", flags.join(" "));
    }
    s
}

fn or_none(v: &[String]) -> String {
    if v.is_empty() {
        "(none)".into()
    } else {
        v.join(", ")
    }
}

fn text(report: &ClusterReport) -> String {
    let mut s = format!("cluster: {} {} host(s)", report.hosts.len(), report.arch);
    if let Some(m) = &report.cpu_map {
        let _ = write!(s, ", libvirt cpu_map {}", m.display());
    }
    s.push('\n');
    match &report.baseline {
        Some(b) => {
            let vendor = b.cpu.vendor.as_deref().unwrap_or("none");
            let fallback = if b.fallback_forbid {
                ", fallback forbid"
            } else {
                ""
            };
            let _ = writeln!(s, "baseline: {} (vendor {vendor}{fallback})", b.cpu.model);
            let _ = writeln!(s, "  require: {}", or_none(&b.cpu.require));
            let _ = writeln!(s, "  disable: {}", or_none(&b.cpu.disable));
            let _ = writeln!(s, "  features: {} in all", report.features.len());
        }
        None => {
            let _ = writeln!(
                s,
                "baseline: none: no custom CPU model is migration-safe on {} under KVM (libvirt has no host-model there); use host-passthrough, which migrates only inside a group below",
                report.arch
            );
        }
    }
    if report.baseline.is_some() {
        match report.level {
            Some(l) => {
                let _ = writeln!(s, "level: {l} (every host reaches it)");
            }
            None => s.push_str("level: below x86-64-v1\n"),
        }
        for level in Level::ALL.into_iter().filter(|l| Some(*l) > report.level) {
            let blockers: Vec<String> = report
                .blocking(level)
                .iter()
                .map(|(h, lacks)| format!("{h} (missing {})", lacks.join(", ")))
                .collect();
            let _ = writeln!(s, "  {level}: blocked by {}", blockers.join("; "));
        }
    }
    s.push_str("hosts:\n");
    for h in &report.hosts {
        let cpu = match (&h.model, &h.vendor) {
            (Some(m), Some(v)) => format!("{m} ({v})"),
            (Some(m), None) => m.clone(),
            (None, _) if report.unknown_cpu.contains(&h.name) => "CPU unknown".into(),
            (None, _) => "no model".into(),
        };
        let level = h.level.map_or_else(String::new, |l| format!("{l}, "));
        let origin = h.origin.map_or("facts", |o| o.describe());
        let _ = writeln!(
            s,
            "  {}: {level}{cpu}, from {origin} {}",
            h.name,
            h.source.display()
        );
    }
    s.push_str(
        "groups (identical host CPUs; a host-passthrough guest migrates only inside its group):\n",
    );
    for g in &report.groups {
        let _ = writeln!(s, "  {}", g.join(", "));
    }
    if let Some(m) = report.machines.as_ref().filter(|m| !m.is_empty()) {
        let m: Vec<&str> = m.iter().map(String::as_str).collect();
        let _ = writeln!(s, "machine types on every host: {}", m.join(", "));
    }
    for n in notes(report) {
        let _ = writeln!(s, "note: {n}");
    }
    s
}

/// What a reader of the report must know besides the figures.
fn notes(report: &ClusterReport) -> Vec<String> {
    let mut notes = Vec::new();
    if let Some(mix) = report.baseline.as_ref().and_then(|b| b.vendor_mix.as_ref()) {
        notes.push(format!(
            "the hosts' vendors differ, which libvirt refuses (\"{mix}\"); this is the vendor-neutral baseline: every vendor's models were candidates, none preferred, and no <vendor> is set (the guest sees the model's own vendor on every host)"
        ));
    }
    if !report.usable_from.is_empty() {
        notes.push(format!(
            "models restricted to those usable='yes' in the domcapabilities of {}",
            report.usable_from.join(", ")
        ));
    }
    for f in &report.non_migratable {
        notes.push(format!(
            "{f} is migratable='no' in libvirt: a guest with it cannot be live-migrated; --migratable leaves it out"
        ));
    }
    let map = report
        .cpu_map
        .as_ref()
        .map_or_else(|| "the cpu_map".to_string(), |m| m.display().to_string());
    for (host, features) in &report.left_out {
        notes.push(format!(
            "left out of {host}'s CPU: {} (not in {map}, an older libvirt's cpu_map: a host whose libvirt has it cannot give a guest these features, so the baseline holds none of them; libvirt's own cpu-baseline stops: \"Unknown CPU feature\")",
            features.join(", ")
        ));
    }
    if let Some(k) = &report.kvm_left_out {
        notes.push(k.sentence());
    }
    if !report.topology_left_out.is_empty() {
        notes.push(crate::cluster::analysis::topology_sentence(
            &report.topology_left_out,
        ));
    }
    if !report.arch_capabilities_left_out.is_empty() {
        notes.push(crate::cluster::analysis::arch_capabilities_sentence(
            &report.arch_capabilities_left_out,
        ));
    }
    for (host, n, some) in &report.model_limits {
        notes.push(format!(
            "{host} limits the choice of model most: {n} model(s) other hosts' domcapabilities list are not in its own (its libvirt or its QEMU does not know them; e.g. {}); the baseline names only a model every host lists",
            some.join(", ")
        ));
    }
    if !report.unknown_cpu.is_empty() {
        notes.push(format!(
            "CPU unknown for {} (their domcapabilities have no host-model): give virsh capabilities too, in a <hostFacts>",
            report.unknown_cpu.join(", ")
        ));
    }
    notes
}

/// Writes a comparison as text (one verdict line, then the features named) or as one JSON
/// object (`guest`, `host`, `result`, `message`, `missing`, `forbidden`, `extra`, `notes`).
#[must_use]
pub fn render_compare(host: &ClusterHost, guest: &GuestCpu, c: &Comparison, json: bool) -> String {
    if json {
        let v = serde_json::json!({
            "guest": guest.name,
            "host": host.name,
            "result": c.verdict.as_str(),
            "message": c.message,
            "missing": c.missing,
            "forbidden": c.forbidden,
            "extra": c.extra,
            "notes": c.notes,
        });
        return format!("{v}\n");
    }
    let guest_label = if guest.name.is_empty() {
        "the guest CPU".to_string()
    } else {
        format!("guest '{}'", guest.name)
    };
    let mut s = match c.verdict {
        crate::cpu::compare::Compatibility::Identical => {
            format!(
                "{guest_label}: identical to the CPU of host {}\n",
                host.name
            )
        }
        crate::cpu::compare::Compatibility::Superset => format!(
            "{guest_label}: runs on host {} (its CPU is a superset: {} feature(s) more)\n",
            host.name,
            c.extra.len()
        ),
        crate::cpu::compare::Compatibility::Incompatible => format!(
            "{guest_label}: incompatible with host {}: {}\n",
            host.name,
            c.message.as_deref().unwrap_or("incompatible")
        ),
    };
    if !c.extra.is_empty() {
        let _ = writeln!(s, "  host has beyond the guest: {}", c.extra.join(", "));
    }
    for n in &c.notes {
        let _ = writeln!(s, "note: {n}");
    }
    s
}
