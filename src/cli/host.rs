//! `virt-cpu-policy host`: the host facts the tool found and where each came from, for people
//! (a summary, machine-type families folded into version ranges), in full (`--verbose`: every
//! machine type on its own line) or for programs (`--format json`).

use crate::cpu::Level;
use crate::host::{Host, Sourced};
use crate::libvirt::capabilities::MachineType;
use crate::libvirt::cpu_def::{CpuDef, FeaturePolicy};
use crate::libvirt::domcaps::{DomCaps, Usable};
use crate::policy::Policy;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Unversioned machine types (boards, `isapc`, `microvm`...) listed by name in the summary up to
/// this many per group; more are counted (`--verbose` lists them).
const MAX_NAMED_OTHERS: usize = 6;

/// The machine types of one emulator (or capabilities file) for one arch: the same list for every
/// virt type it was read under is shown once.
struct Group<'h> {
    source: &'h str,
    arch: &'h str,
    virt_types: Vec<String>,
    machines: Vec<&'h MachineType>,
}

/// `host` in text: the summary, or with `verbose` every machine type.
pub(super) fn text(policy: &Policy, host: &Host, models: usize, verbose: bool) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "policy: {}", policy.source);
    let version = host.libvirt_version();
    let _ = writeln!(
        s,
        "cpu_map: {} x86 models from {}{}",
        models,
        host.cpu_map_source(),
        cpu_map_version(host, version)
    );
    if let Some(n) = &host.cpu_map_note {
        let _ = writeln!(s, "  note: {n}");
    }
    for l in host.left_out() {
        let _ = writeln!(s, "left out: {l}");
    }
    let no_version = match host.qemu_cache().dir() {
        None => "unknown (give --libvirt-version, or a <hostFacts libvirt=...> file with --caps: libvirt's QEMU capability cache was not read, --no-qemu-caps-cache)"
            .to_string(),
        Some(d) => format!(
            "unknown (give --libvirt-version, or a <hostFacts libvirt=...> file with --caps: libvirt's QEMU capability cache {} names none)",
            d.display()
        ),
    };
    s.push_str(&fact_line("libvirt", version, &no_version));
    s.push_str(&fact_line(
        "QEMU (qemu-system-x86_64)",
        host.qemu_version("x86_64", None).as_ref(),
        "unknown (give --qemu-version, or let the tool read a current file of libvirt's QEMU capability cache); x86 TCG guests are then judged as under QEMU before 9.0: no vCPU with an APIC ID of 255 or more",
    ));
    s.push_str(&fact_line("host CPUs", host.cpus(), "unknown"));
    s.push_str(&host_cpu_line(host, verbose));
    s.push_str(&fact_line(
        "KVM max vCPUs",
        host.kvm_limit(),
        "unknown (/dev/kvm not readable)",
    ));
    if host.files.is_empty() {
        s.push_str("capability files: none (give --caps FILE)\n");
    }
    for f in &host.files {
        let _ = writeln!(s, "capability file: {f}");
    }
    let cached = host.qemu_cache_all();
    if cached.is_empty() {
        let _ = writeln!(
            s,
            "QEMU capability cache: nothing read from {}",
            host.qemu_cache()
                .dir()
                .map_or("(disabled)".into(), |d| d.display().to_string())
        );
    }
    let all: Vec<&MachineType> = host.machines.iter().chain(cached.iter()).collect();
    for g in groups(&all) {
        s.push_str(&group_text(&g, verbose));
    }
    for d in &host.domcaps {
        s.push_str(&domcaps_text(host, d));
    }
    if !verbose && !all.is_empty() {
        s.push_str("(--verbose lists every machine type; --format json gives everything)\n");
    }
    s
}

/// ` (libvirt X)` when the cpu_map and the version are the same installation's: the default
/// cpu_map and the `<selfvers>` of the default QEMU capability cache. A `--libvirt-version` (a
/// dry run of another host's rules) or another cache directory says nothing about this cpu_map.
fn cpu_map_version(
    host: &Host,
    version: Option<&Sourced<crate::libvirt::version::LibvirtVersion>>,
) -> String {
    let installed =
        |p: Option<&std::path::Path>, default: &str| p == Some(std::path::Path::new(default));
    match (&host.cpu_map_dir, version) {
        (None, _) => " (libvirt 9.0.0's, built in)".into(),
        (d, Some(v))
            if installed(d.as_deref(), crate::libvirt::cpu_map::DEFAULT_CPU_MAP)
                && installed(
                    host.qemu_cache().dir(),
                    crate::libvirt::qemu_caps::QEMU_CAPS_CACHE,
                )
                && v.source.starts_with("<selfvers>") =>
        {
            format!(" (libvirt {})", v.value)
        }
        _ => String::new(),
    }
}

/// `host CPU: MODEL, VENDOR, N features beyond the model (from SOURCE)`, the features listed
/// under `--verbose`; or why the host's own CPU is unknown.
fn host_cpu_line(host: &Host, verbose: bool) -> String {
    let Some(cpu) = host.host_cpu() else {
        let why = host.host_cpu_unknown().unwrap_or("unknown");
        return format!("host CPU: {why}\n");
    };
    let c = &cpu.value;
    let mut line = format!(
        "host CPU: {}, {}, {} features beyond the model (from {})\n",
        c.model.as_deref().unwrap_or("no model"),
        c.vendor.as_deref().unwrap_or("no vendor"),
        c.features.len(),
        cpu.source
    );
    if verbose && !c.features.is_empty() {
        let names: Vec<&str> = c.features.iter().map(|(n, _)| n.as_str()).collect();
        let _ = writeln!(line, "  features: {}", names.join(" "));
    }
    line
}

fn fact_line<T: std::fmt::Display>(name: &str, fact: Option<&Sourced<T>>, unknown: &str) -> String {
    match fact {
        Some(f) => format!("{name}: {} (from {})\n", f.value, f.source),
        None => format!("{name}: {unknown}\n"),
    }
}

/// Machine types grouped by (source, arch); virt types whose lists are the same share a group.
fn groups<'h>(machines: &[&'h MachineType]) -> Vec<Group<'h>> {
    let mut by_key: BTreeMap<(&str, &str, String), Vec<&MachineType>> = BTreeMap::new();
    for m in machines {
        let vt = m.virt_type.clone().unwrap_or_else(|| "any".into());
        by_key
            .entry((m.source.as_str(), m.arch.as_str(), vt))
            .or_default()
            .push(m);
    }
    let mut out: Vec<Group<'h>> = Vec::new();
    for ((source, arch, vt), list) in by_key {
        let same = out
            .iter_mut()
            .find(|g| g.source == source && g.arch == arch && same_machines(&g.machines, &list));
        match same {
            Some(g) => g.virt_types.push(vt),
            None => out.push(Group {
                source,
                arch,
                virt_types: vec![vt],
                machines: list,
            }),
        }
    }
    out
}

fn same_machines(a: &[&MachineType], b: &[&MachineType]) -> bool {
    let key = |l: &[&MachineType]| {
        let mut v: Vec<(String, Option<u32>, Option<String>)> = l
            .iter()
            .map(|m| (m.name.clone(), m.max_cpus, m.canonical.clone()))
            .collect();
        v.sort();
        v
    };
    key(a) == key(b)
}

/// A machine type's family and version: `pc-q35-7.2` → (`pc-q35-`, [7, 2]); None for names
/// without a version (`isapc`, boards, aliases).
fn family_version(name: &str) -> Option<(&str, Vec<u32>)> {
    let start = name
        .char_indices()
        .rev()
        .take_while(|(_, c)| c.is_ascii_digit() || *c == '.')
        .last()?
        .0;
    let (family, version) = name.split_at(start);
    if family.is_empty() || version.starts_with('.') || version.ends_with('.') {
        return None;
    }
    let parts: Option<Vec<u32>> = version.split('.').map(|p| p.parse().ok()).collect();
    parts.filter(|p| p.len() >= 2).map(|p| (family, p))
}

/// One group: its families folded into version ranges of equal limit (`pc-q35-2.8…7.2: 288`),
/// the unversioned types, the aliases; or with `verbose` every type.
fn group_text(g: &Group<'_>, verbose: bool) -> String {
    // A capabilities file lists machine types per arch for every virt type.
    let types = match g.virt_types.as_slice() {
        [any] if any == "any" => String::new(),
        types => format!("; {}", types.join(", ")),
    };
    let mut s = format!(
        "machine types ({}{types}) from {}:\n",
        g.arch,
        source_label(g.source)
    );
    let mut families: BTreeMap<&str, Vec<Versioned<'_>>> = BTreeMap::new();
    let mut others: Vec<(&str, u32)> = Vec::new();
    let mut aliases: Vec<String> = Vec::new();
    let mut unlimited: Vec<&str> = Vec::new();
    for m in &g.machines {
        match (&m.canonical, m.max_cpus) {
            (Some(c), _) => aliases.push(format!("{} → {c}", m.name)),
            (None, Some(n)) => match family_version(&m.name) {
                Some((fam, ver)) if !verbose => {
                    families.entry(fam).or_default().push((ver, &m.name, n));
                }
                _ => others.push((&m.name, n)),
            },
            (None, None) => unlimited.push(&m.name),
        }
    }
    for (family, mut list) in families {
        list.sort();
        list.dedup();
        for (first, last, n) in runs(&list) {
            let range = if first == last {
                first.to_string()
            } else {
                format!("{first}…{}", last.trim_start_matches(family))
            };
            let _ = writeln!(s, "  {range}: {n}");
        }
    }
    others.sort_unstable();
    others.dedup();
    s.push_str(&others_text(&others, verbose));
    unlimited.sort_unstable();
    unlimited.dedup();
    let all = !g
        .machines
        .iter()
        .any(|m| m.canonical.is_none() && m.max_cpus.is_some());
    s.push_str(&unlimited_text(&unlimited, all, verbose));
    aliases.sort();
    aliases.dedup();
    if !aliases.is_empty() {
        let _ = writeln!(s, "  aliases: {}", aliases.join(", "));
    }
    s
}

/// Where a group's machine types come from: a capabilities file by its path; a file of libvirt's
/// QEMU capability cache, named by a hash, by the emulator it describes
/// (`/usr/bin/qemu-system-x86_64 (capability cache FILE)`).
fn source_label(source: &str) -> String {
    let head = crate::libvirt::qemu_caps::head(std::path::Path::new(source));
    match head.and_then(|h| h.emulator) {
        Some(emulator) => format!("{emulator} (capability cache {source})"),
        None => source.to_string(),
    }
}

/// A versioned machine type: (version, name, vCPU limit).
type Versioned<'a> = (Vec<u32>, &'a str, u32);

/// Consecutive versions with the same limit: (first name, last name, limit).
fn runs<'a>(list: &[Versioned<'a>]) -> Vec<(&'a str, &'a str, u32)> {
    let mut out: Vec<(&str, &str, u32)> = Vec::new();
    for (_, name, n) in list {
        match out.last_mut() {
            Some(run) if run.2 == *n => run.1 = name,
            _ => out.push((name, name, *n)),
        }
    }
    out
}

fn others_text(others: &[(&str, u32)], verbose: bool) -> String {
    if others.is_empty() {
        return String::new();
    }
    if verbose {
        return others.iter().fold(String::new(), |mut s, (name, n)| {
            let _ = writeln!(s, "  {name}: {n}");
            s
        });
    }
    if others.len() <= MAX_NAMED_OTHERS {
        let named: Vec<String> = others.iter().map(|(m, n)| format!("{m}: {n}")).collect();
        return format!("  other: {}\n", named.join(", "));
    }
    let low = others.iter().map(|(_, n)| *n).min().unwrap_or(0);
    let high = others.iter().map(|(_, n)| *n).max().unwrap_or(0);
    format!(
        "  and {} unversioned machine types (boards), limits {low}…{high}\n",
        others.len()
    )
}

/// The machine types whose file gives no vCPU limit (`maxCpus`): each on its own line with
/// `verbose`, else named (a few) or counted; `all` when no machine type of the group has one.
fn unlimited_text(names: &[&str], all: bool, verbose: bool) -> String {
    if names.is_empty() {
        return String::new();
    }
    if verbose {
        return names.iter().fold(String::new(), |mut s, name| {
            let _ = writeln!(s, "  {name}: limit unknown (no maxCpus)");
            s
        });
    }
    let what = if all {
        format!(
            "none of its {} machine types gives a vCPU limit (no maxCpus)",
            names.len()
        )
    } else {
        format!(
            "{} machine types give no vCPU limit (no maxCpus)",
            names.len()
        )
    };
    if names.len() <= MAX_NAMED_OTHERS {
        format!("  {what}: {}\n", names.join(", "))
    } else {
        format!("  {what}\n")
    }
}

fn domcaps_text(host: &Host, d: &DomCaps) -> String {
    let machine = if d.machine.is_empty() {
        "(no machine type)"
    } else {
        &d.machine
    };
    let modes = if d.modes.is_empty() {
        "none".to_string()
    } else {
        let modes: Vec<&str> = d.modes.iter().map(|m| m.as_str()).collect();
        modes.join(",")
    };
    let mut s = format!(
        "domcapabilities: {} {} {machine}: vcpu max {}, modes {modes} (from {})\n",
        d.arch,
        d.virt_type,
        d.vcpu_max.map_or("unknown".into(), |v| v.to_string()),
        d.source
    );
    if let (Some(hm), Some((model, level))) = (&d.host_model, host.host_model_level(d)) {
        let level = if x86(d) {
            format!(
                ": reaches {}",
                level.map_or("below x86-64-v1".into(), |l| l.to_string())
            )
        } else {
            " (x86-64 levels apply to x86 only)".to_string()
        };
        let _ = writeln!(
            s,
            "  host-model: {model} + {} required, {} disabled{level}",
            host_model_features(hm, FeaturePolicy::gives).len(),
            host_model_features(hm, FeaturePolicy::takes_away).len()
        );
    }
    let usable = d.models.iter().filter(|(_, u)| *u == Usable::Yes).count();
    let unknown = d
        .models
        .iter()
        .filter(|(_, u)| *u == Usable::Unknown)
        .count();
    let _ = if unknown == 0 {
        writeln!(s, "  custom models: {usable} of {} usable", d.models.len())
    } else {
        writeln!(
            s,
            "  custom models: {usable} of {} usable, {unknown} unknown (usable='unknown')",
            d.models.len()
        )
    };
    s
}

/// The host-model CPU's features of the policies `select` says yes to, sorted, each once.
fn host_model_features(hm: &CpuDef, select: fn(FeaturePolicy) -> bool) -> Vec<&str> {
    let set: std::collections::BTreeSet<&str> = hm.features_where(select).collect();
    set.into_iter().collect()
}

/// Whether the x86-64 psABI levels say anything about the domcapabilities' guests.
fn x86(d: &DomCaps) -> bool {
    crate::libvirt::arch::is_x86(&d.arch)
}

/// `{"value", "source"}`, or null when the fact is unknown.
fn fact_json<T: serde::Serialize>(f: Option<&Sourced<T>>) -> Value {
    f.map_or(
        Value::Null,
        |f| json!({"value": f.value, "source": f.source}),
    )
}

/// `host --format json`: every fact, each with its source (docs/json.md).
pub(super) fn json(policy: &Policy, host: &Host, models: usize) -> Value {
    let cached = host.qemu_cache_all();
    let machines: Vec<Value> = host
        .machines
        .iter()
        .chain(cached.iter())
        .map(|m| {
            json!({"arch": m.arch, "virt_type": m.virt_type, "name": m.name,
                   "canonical": m.canonical, "max_cpus": m.max_cpus, "deprecated": m.deprecated, "source": m.source})
        })
        .collect();
    let domcaps: Vec<Value> = host
        .domcaps
        .iter()
        .map(|d| {
            let hm = host.host_model_level(d).map(|(model, level)| {
                let hm = d.host_model.as_ref();
                json!({"model": model,
                       "require": hm.map(|h| host_model_features(h, FeaturePolicy::gives)),
                       "disable": hm.map(|h| host_model_features(h, FeaturePolicy::takes_away)),
                       "level": level.filter(|_| x86(d)).map(Level::as_str)})
            });
            let machine = Some(&d.machine).filter(|m| !m.is_empty());
            json!({"arch": d.arch, "virt_type": d.virt_type, "machine": machine,
                   "vcpu_max": d.vcpu_max, "modes": d.modes, "host_model": hm,
                   "models": d.models.len(),
                   "models_usable": d.models.iter().filter(|(_, u)| *u == Usable::Yes).count(),
                   "models_unknown": d.models.iter().filter(|(_, u)| *u == Usable::Unknown).count(),
                   "source": d.source})
        })
        .collect();
    json!({
        "schema_version": 1,
        "policy": policy.source,
        "cpu_map": {"source": host.cpu_map_source(), "models": models, "note": host.cpu_map_note},
        // A version stays a string ("11.3.0"); counts are numbers.
        "libvirt_version": fact_json(host.libvirt_version().map(|v| Sourced {
            value: v.value.to_string(),
            source: v.source.clone(),
        }).as_ref()),
        "qemu_version": fact_json(host.qemu_version("x86_64", None).map(|v| Sourced {
            value: v.value.to_string(),
            source: v.source,
        }).as_ref()),
        "host_cpus": fact_json(host.cpus()),
        "host_cpu": host.host_cpu().map(|c| json!({
            "value": {"arch": c.value.arch, "model": c.value.model, "vendor": c.value.vendor,
                      "features": c.value.features.iter().map(|(n, _)| n).collect::<Vec<_>>()},
            "source": c.source})),
        "kvm_max_vcpus": fact_json(host.kvm_limit()),
        "capability_files": host.files,
        "qemu_caps_cache": host.qemu_cache().dir(),
        "left_out": host.left_out(),
        "machines": machines,
        "domcapabilities": domcaps,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_runs() {
        assert_eq!(family_version("pc-q35-7.2"), Some(("pc-q35-", vec![7, 2])));
        assert_eq!(
            family_version("pc-q35-rhel9.4.0"),
            Some(("pc-q35-rhel", vec![9, 4, 0]))
        );
        assert_eq!(family_version("isapc"), None);
        assert_eq!(family_version("raspi3b"), None);
        let list = vec![
            (vec![2, 7], "pc-q35-2.7", 255),
            (vec![2, 8], "pc-q35-2.8", 288),
            (vec![2, 10], "pc-q35-2.10", 288),
            (vec![7, 2], "pc-q35-7.2", 288),
        ];
        assert_eq!(
            runs(&list),
            vec![
                ("pc-q35-2.7", "pc-q35-2.7", 255),
                ("pc-q35-2.8", "pc-q35-7.2", 288)
            ]
        );
    }
}
