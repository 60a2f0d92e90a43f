//! Guests and clusters across libvirt generations (7.0, 9.0, 11.3, 12.8): what a definition made
//! on an older host meets on a newer one, and one baseline CPU for hosts of every generation.
//!
//! Each generation is judged with its own facts only: its captured capabilities and
//! domcapabilities (`tests/data/generations/NAME/`), its own cpu_map (in its root) and its
//! libvirt version; the verdicts are compared with that generation's own `virsh define` and
//! `virsh start` (TCG guests, diskless, 64 MiB, named `vcp-gen-PID-...`, always undefined).

use crate::harness::{Cmd, Generation, Scratch, generation_facts, generations, s, virsh_at};
use std::path::{Path, PathBuf};

/// The guest name prefix of this process and test (`tag`): tests run side by side.
fn prefix(tag: &str) -> String {
    format!("vcp-gen-{}-{tag}-", std::process::id())
}

/// Destroys and undefines every guest named with a prefix ([`prefix`]) on a URI when dropped.
struct Sweep(String, String);

impl Drop for Sweep {
    fn drop(&mut self) {
        let list = virsh_at(&self.0, &["list", "--all", "--name"]);
        for name in list
            .stdout
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with(&self.1))
        {
            let _ = virsh_at(&self.0, &["destroy", name]);
            let _ = virsh_at(&self.0, &["undefine", name]);
        }
    }
}

/// A small diskless TCG guest: `machine`, and `cpu` (a `<cpu>` element or nothing).
fn guest(name: &str, machine: &str, cpu: &str) -> String {
    format!(
        "<domain type='qemu'>\n  <name>{name}</name>\n  <memory unit='MiB'>64</memory>\n  <vcpu>1</vcpu>\n  <os><type arch='x86_64' machine='{machine}'>hvm</type></os>\n  {cpu}\n  <devices><emulator>/usr/bin/qemu-system-x86_64</emulator><memballoon model='none'/></devices>\n</domain>\n"
    )
}

/// The probes of an upgrade step: the machine types an older host offers (its aliases resolve at
/// define to its newest type), types a later QEMU removes, and CPUs named by one generation's
/// cpu_map and not another's.
fn probes() -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for m in ["pc", "q35", "pc-i440fx-2.11", "pc-q35-4.2", "pc-q35-5.1"] {
        out.push((format!("machine {m}"), m.to_string(), String::new()));
    }
    for (what, cpu) in [
        ("host-model", "<cpu mode='host-model'/>"),
        ("maximum", "<cpu mode='maximum'/>"),
        (
            "custom Nehalem",
            "<cpu mode='custom'><model>Nehalem</model></cpu>",
        ),
        (
            "custom Haswell-v2",
            "<cpu mode='custom'><model>Haswell-v2</model></cpu>",
        ),
        (
            "custom EPYC-Genoa",
            "<cpu mode='custom'><model>EPYC-Genoa</model></cpu>",
        ),
        (
            "custom EPYC-Turin",
            "<cpu mode='custom'><model>EPYC-Turin</model></cpu>",
        ),
    ] {
        out.push((what.to_string(), "pc-q35-5.2".to_string(), cpu.to_string()));
    }
    out
}

/// The arguments that give the tool generation `g`'s facts and nothing of this machine's: its
/// captured capabilities and TCG domcapabilities, its own cpu_map, its version.
fn facts_args(g: &Generation) -> Vec<String> {
    let f = generation_facts(&g.name);
    vec![
        "--caps".into(),
        s(&f.join("capabilities.xml")),
        "--caps".into(),
        s(&f.join("domcapabilities-x86_64-q35-qemu.xml")),
        "--caps".into(),
        s(&f.join("domcapabilities-x86_64-pc-qemu.xml")),
        "--cpu-map".into(),
        s(&g.cpu_map()),
        "--libvirt-version".into(),
        g.version.clone(),
    ]
}

/// `virsh define` then, when defined, `virsh start` of `file` on `g`: None when both accept,
/// else the step and libvirt's error. The guest is destroyed and undefined again.
fn define_and_start(g: &Generation, name: &str, file: &Path) -> Option<String> {
    let d = g.virsh(&["define", &s(file)]);
    if !d.ok {
        return Some(format!("define: {}", d.stderr.trim()));
    }
    let st = g.virsh(&["start", name]);
    let _ = g.virsh(&["destroy", name]);
    let u = g.virsh(&["undefine", name]);
    assert!(u.ok, "{}: virsh undefine {name}: {}", g.label, u.stderr);
    (!st.ok).then(|| format!("start: {}", st.stderr.trim()))
}

/// Upgrade cases, per generation step (7.0 → 9.0 → 11.3 → 12.8): a definition made on the older
/// generation (defined there, `dumpxml --inactive`), judged by `check` with the newer one's
/// facts, agrees with the newer libvirt: the tool says it cannot conform (exit 1) exactly when
/// the newer libvirt's define or start refuses it.
#[test]
#[ignore = "needs the four generations' libvirtds: .ci/run starts them"]
fn upgrade_cases_agree_with_the_newer_libvirts_define_and_start() {
    let mut gens = generations();
    gens.sort_by_key(|g| {
        g.version
            .split('.')
            .map(|p| p.parse::<u32>().unwrap_or(0))
            .collect::<Vec<_>>()
    });
    assert!(gens.len() >= 2, "fewer than two generations answer");
    let tmp = Scratch::new("upgrades");
    let policy = tmp.write("policy.toml", "version = 1\n");
    let mut disagreements = Vec::new();
    for pair in gens.windows(2) {
        let (old, new) = (&pair[0], &pair[1]);
        let _sweep = (
            Sweep(old.uri.clone(), prefix("up")),
            Sweep(new.uri.clone(), prefix("up")),
        );
        let (mut made, mut agree, mut refused) = (0, 0, Vec::new());
        for (i, (what, machine, cpu)) in probes().into_iter().enumerate() {
            let name = format!("{}{}-{i}", prefix("up"), old.name);
            let file = tmp.write(&format!("{name}.xml"), guest(&name, &machine, &cpu));
            let d = old.virsh(&["define", &s(&file)]);
            if !d.ok {
                eprintln!(
                    "upgrades: {} refuses {what} itself: {}",
                    old.label,
                    d.stderr.trim()
                );
                continue;
            }
            let dumped = old.virsh(&["dumpxml", "--inactive", &name]);
            let u = old.virsh(&["undefine", &name]);
            assert!(dumped.ok && u.ok, "{}: dumpxml/undefine {name}", old.label);
            made += 1;
            let defined = tmp.write(&format!("{name}-dumped.xml"), &dumped.stdout);
            let verdict = Cmd::new(&["check", "--policy", &s(&policy)])
                .args(&facts_args(new))
                .arg(s(&defined))
                .run();
            assert!(
                matches!(verdict.code, 0 | 1 | 3),
                "{what}: check exit {}: {}",
                verdict.code,
                verdict.stderr
            );
            let tool_refuses = verdict.code == 1;
            let libvirt = define_and_start(new, &name, &defined);
            if libvirt.is_some() {
                refused.push(what.clone());
            }
            if tool_refuses == libvirt.is_some() {
                agree += 1;
            } else {
                disagreements.push(format!(
                    "{} → {}: {what}: the tool says exit {} ({}), libvirt {}",
                    old.name,
                    new.name,
                    verdict.code,
                    verdict.stdout.trim(),
                    libvirt.as_deref().unwrap_or("defines and starts it")
                ));
            }
        }
        eprintln!(
            "upgrades: {} → {}: {made} definition(s) made on {}, {} refused by {} ({}), the tool agrees on {agree}",
            old.name,
            new.name,
            old.name,
            refused.len(),
            new.label,
            refused.join(", ")
        );
    }
    assert!(
        disagreements.is_empty(),
        "{} disagreement(s):\n{}",
        disagreements.len(),
        disagreements.join("\n")
    );
}

/// The four generations' TCG host-model CPUs as hosts of one cluster (`<hostFacts>` files named
/// after each generation, written from the captured domcapabilities).
fn cluster_of_generations(tmp: &Scratch, gens: &[&str]) -> Vec<PathBuf> {
    gens.iter()
        .map(|g| {
            let facts = generation_facts(g);
            let version = std::fs::read_to_string(facts.join("version")).unwrap();
            let libvirt = version
                .lines()
                .find_map(|l| l.strip_prefix("libvirt "))
                .unwrap_or("0")
                .split_whitespace()
                .next()
                .unwrap()
                .to_string();
            let dc =
                std::fs::read_to_string(facts.join("domcapabilities-x86_64-q35-qemu.xml")).unwrap();
            let dc = dc.trim_start_matches(|c| c != '<');
            let dc = dc
                .strip_prefix("<?xml")
                .map_or(dc, |r| &r[r.find("?>").unwrap() + 2..]);
            tmp.write(
                &format!("{g}.xml"),
                format!("<hostFacts name='{g}' libvirt='{libvirt}'>\n{dc}\n</hostFacts>\n"),
            )
        })
        .collect()
}

const FOUR: [&str; 4] = ["bullseye", "bookworm", "trixie", "forky"];

/// `baseline --format json` over the four generations' hosts with libvirt 7.0's cpu_map (the
/// oldest): the facts files, that cpu_map, and the JSON answer.
fn four_generations_baseline(tmp: &Scratch) -> (Vec<PathBuf>, PathBuf, serde_json::Value) {
    let files = cluster_of_generations(tmp, &FOUR);
    let oldest = generation_facts("bullseye").join("cpu_map");
    let out = Cmd::new(&["baseline", "--format", "json", "--cpu-map", &s(&oldest)])
        .args(&files.iter().map(|f| s(f)).collect::<Vec<_>>())
        .run();
    assert_eq!(out.code, 0, "{}", out.stderr);
    (files, oldest, serde_json::from_str(&out.stdout).unwrap())
}

/// A baseline over the four generations' hosts with libvirt 7.0's cpu_map (the oldest): the
/// features 7.0 does not know are left out with a note instead of stopping, and the result names
/// only a model every host lists and features 7.0's cpu_map defines.
#[test]
fn baseline_over_four_generations_with_the_oldest_cpu_map() {
    let tmp = Scratch::new("gen-cluster");
    let (files, oldest, v) = four_generations_baseline(&tmp);
    let model = v["model"].as_str().unwrap();
    for g in FOUR {
        let dc = std::fs::read_to_string(
            generation_facts(g).join("domcapabilities-x86_64-q35-qemu.xml"),
        )
        .unwrap();
        assert!(
            dc.contains(&format!("usable='yes'>{model}<")) || dc.contains(&format!(">{model}</")),
            "{g} does not list {model}"
        );
    }
    let features = std::fs::read_to_string(oldest.join("x86_features.xml")).unwrap();
    for f in v["require"].as_array().unwrap() {
        let f = f.as_str().unwrap();
        assert!(
            features.contains(&format!("name='{f}'")),
            "{f} is not in libvirt 7.0's cpu_map"
        );
    }
    let text = Cmd::new(&["baseline", "--cpu-map", &s(&oldest)])
        .args(&files.iter().map(|f| s(f)).collect::<Vec<_>>())
        .run();
    assert_eq!(text.code, 0, "{}", text.stderr);
    assert!(
        text.stdout
            .contains("note: left out of bookworm's CPU: pks"),
        "{}",
        text.stdout
    );
    assert!(text.stdout.contains("limits the choice of model most"));
    eprintln!("upgrades: baseline of the four generations with 7.0's cpu_map: {model}");
}

/// The baseline of the four generations' hosts (with 7.0's cpu_map) defines and starts under TCG
/// on every generation's libvirt.
#[test]
#[ignore = "needs the four generations' libvirtds: .ci/run starts them"]
fn baseline_of_four_generations_defines_and_starts_on_each() {
    let tmp = Scratch::new("gen-cluster-live");
    let (_, _, v) = four_generations_baseline(&tmp);
    let list = |k: &str, policy: &str| -> String {
        v[k].as_array()
            .unwrap()
            .iter()
            .map(|f| {
                format!(
                    "<feature policy='{policy}' name='{}'/>",
                    f.as_str().unwrap()
                )
            })
            .collect()
    };
    let cpu = format!(
        "<cpu mode='custom' match='exact'><model fallback='forbid'>{}</model>{}{}</cpu>",
        v["model"].as_str().unwrap(),
        list("require", "require"),
        list("disable", "disable")
    );
    let mut failures = Vec::new();
    let gens = generations();
    for g in &gens {
        let _sweep = Sweep(g.uri.clone(), prefix("baseline"));
        let name = format!("{}{}", prefix("baseline"), g.name);
        let file = tmp.write(&format!("{name}.xml"), guest(&name, "pc-q35-5.2", &cpu));
        match define_and_start(g, &name, &file) {
            None => eprintln!("upgrades: {}: the baseline defines and starts", g.label),
            Some(e) => failures.push(format!("{}: {e}", g.label)),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
