//! `baseline` and `compare` against libvirt itself: libvirt is the oracle.
//!
//! The oracles are the host's libvirt 9.0 and the Debian 13 root's libvirt 11.3
//! ([`crate::harness::oracles`]), each with its own cpu_map, which the tool is given too (9.0
//! reads 18 of the 56 files, 11.3 reads 49). The host CPUs are the real ones of
//! `../shared/corpus/libvirt-cputestdata/` (libvirt's own test data). These tests are
//! `#[ignore]`d (they need libvirt) and fail, never skip, when run without it or without the
//! corpus.
//!
//! * Every corpus file alone: libvirt reads it or refuses it (an unknown model or feature); the
//!   tool must do the same, naming the same model or feature.
//! * [`CLUSTERS`] clusters of 2 to 6 distinct readable files, drawn with a fixed seed: `virsh
//!   cpu-baseline --features` (and with `--migratable`) on the concatenated CPUs against the
//!   tool's JSON. Same model and same effective features (model features + `require` −
//!   `disable`; libvirt's are the `require` features of its expanded output). When libvirt
//!   refuses the vendor mix, the tool's vendor-neutral answer is checked against libvirt's answer
//!   for one CPU with the hosts' common features and no vendor (written as a vendor-less model
//!   with `<decode guest='off'/>`, which libvirt never picks nor prefers, plus the features).
//!   The level each cluster reaches is recomputed from libvirt's features and must be the tool's.
//! * `compare`: each corpus CPU turned into a guest `<cpu mode='custom'>` (with and without its
//!   vendor), and each golden baseline output, against the oracle's own domcapabilities with
//!   `virsh hypervisor-cpu-compare --error`: same verdict, same message.

use crate::differential::Rng;
use crate::harness::{Cmd, Oracle, Scratch, oracles, s, shared_corpus};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use virt_cpu_policy::cpu::baseline::QEMU_DROPPED_FEATURES;
use virt_cpu_policy::cpu::{KVM_NEVER_GIVES, Level};
use virt_cpu_policy::libvirt::cpu_map::CpuMap;
use virt_cpu_policy::libvirt::cpu_map::x86::X86Map;

/// Clusters drawn.
const CLUSTERS: usize = 320;
const SEED: u64 = 0x0c1u64 << 52 | 0x5eed_0013;

/// Disagreements accepted, each with its reason (none so far).
const ALLOWED: &[(&str, &str)] = &[];

/// The corpus host CPU files, sorted.
fn corpus_files() -> Vec<PathBuf> {
    let dir = shared_corpus().join("libvirt-cputestdata");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("read libvirt-cputestdata")
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with("-host.xml"))
        .collect();
    v.sort();
    assert!(v.len() >= 50, "{} corpus CPUs only", v.len());
    v
}

/// A CPU as libvirt printed it, or libvirt's error.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    Cpu {
        model: String,
        vendor: Option<String>,
        features: BTreeSet<String>,
    },
    Error(String),
}

/// libvirt's error text without virsh's prefixes (`error: `, `operation failed: `...).
fn error_text(stderr: &str) -> String {
    let line = stderr
        .lines()
        .rev()
        .find(|l| l.starts_with("error: "))
        .unwrap_or(stderr)
        .trim_start_matches("error: ");
    let mut t = line;
    for p in [
        "operation failed: ",
        "internal error: ",
        "unsupported configuration: ",
    ] {
        t = t.trim_start_matches(p);
    }
    t.trim().to_string()
}

/// The trimmed text of `node`'s child element `tag`.
fn child_text(node: roxmltree::Node<'_, '_>, tag: &str) -> Option<String> {
    node.children()
        .find(|n| n.has_tag_name(tag))
        .and_then(|n| n.text())
        .map(|t| t.trim().to_string())
}

/// The `<feature>` names of `node` whose policy `keep` accepts (no policy: `require`).
fn feature_names(node: roxmltree::Node<'_, '_>, keep: impl Fn(&str) -> bool) -> Vec<String> {
    node.children()
        .filter(|n| n.has_tag_name("feature"))
        .filter(|n| keep(n.attribute("policy").unwrap_or("require")))
        .filter_map(|n| n.attribute("name"))
        .map(str::to_string)
        .collect()
}

/// The model, vendor and `require`d features of a `<cpu>` document.
fn parse_cpu(xml: &str) -> Answer {
    let doc = roxmltree::Document::parse(xml).expect("libvirt's <cpu> parses");
    let cpu = doc.root_element();
    Answer::Cpu {
        model: child_text(cpu, "model").unwrap_or_default(),
        vendor: child_text(cpu, "vendor"),
        features: feature_names(cpu, |p| p == "require").into_iter().collect(),
    }
}

/// `virsh cpu-baseline --features [--migratable] FILE`, without the features KVM never gives a
/// guest ([`KVM_NEVER_GIVES`]): every CPU here is a physical host CPU (libvirt's test data, a
/// host known by its `virsh capabilities`), which libvirt keeps them from and the tool leaves out
/// of a baseline meant for guests, keeping libvirt's model (`kvm_never_features_and_the_oracle`
/// shows libvirt's hypervisor refusing them).
fn libvirt_baseline(o: &Oracle, file: &Path, migratable: bool) -> Answer {
    let f = s(file);
    let mut args = vec!["cpu-baseline", "--features"];
    if migratable {
        args.push("--migratable");
    }
    args.push(&f);
    let v = o.virsh(&args);
    if v.ok {
        match parse_cpu(&v.stdout) {
            Answer::Cpu {
                model,
                vendor,
                mut features,
            } => {
                features.retain(|f| !KVM_NEVER_GIVES.contains(&f.as_str()));
                Answer::Cpu {
                    model,
                    vendor,
                    features,
                }
            }
            e @ Answer::Error(_) => e,
        }
    } else {
        Answer::Error(error_text(&v.stderr))
    }
}

/// What the tool said: its answer (effective features) and its JSON.
struct Tool {
    answer: Answer,
    level: Option<String>,
    json: Option<serde_json::Value>,
}

/// `virt-cpu-policy baseline --format json [--migratable] FILES...`.
fn tool_baseline(o: &Oracle, names: &CpuMap, files: &[PathBuf], migratable: bool) -> Tool {
    let mut c = Cmd::new(&["baseline", "--format", "json", "--cpu-map"]).arg(s(&o.cpu_map()));
    if migratable {
        c = c.arg("--migratable");
    }
    for f in files {
        c = c.arg(s(f));
    }
    let out = c.run();
    if out.code != 0 {
        assert!(out.stdout.is_empty(), "stdout on failure: {}", out.stdout);
        let msg = out
            .stderr
            .trim()
            .trim_start_matches("virt-cpu-policy: ")
            .to_string();
        return Tool {
            answer: Answer::Error(format!("exit {}: {msg}", out.code)),
            level: None,
            json: None,
        };
    }
    let j: serde_json::Value = serde_json::from_str(&out.stdout).expect("baseline JSON");
    let list = |k: &str| -> Vec<String> {
        j[k].as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect()
    };
    let model = j["model"].as_str().unwrap().to_string();
    let mut features: BTreeSet<String> = names
        .model_features(&model)
        .unwrap_or_else(|| panic!("the tool chose {model}, unknown to the cpu_map"))
        .clone();
    features.extend(list("require"));
    for d in list("disable") {
        features.remove(&d);
    }
    // The departures the report names: `ht` and `cmp_legacy`, which QEMU derives from each
    // guest's topology, are left out of the cluster CPU (`topology_left_out`); libvirt's
    // baseline keeps them. Put back, the rest must be libvirt's.
    if j.get("topology_left_out").is_some() {
        features.extend(list("topology_left_out"));
    }
    // And `arch-capabilities` with its bits, left out of an AMD cluster's CPU.
    if j.get("arch_capabilities_left_out").is_some() {
        features.extend(list("arch_capabilities_left_out"));
    }
    Tool {
        answer: Answer::Cpu {
            model,
            vendor: j["vendor"].as_str().map(str::to_string),
            features,
        },
        level: j["level"].as_str().map(str::to_string),
        json: Some(j),
    }
}

/// A corpus CPU read independently of the tool: model, vendor, listed features.
struct CorpusCpu {
    model: String,
    vendor: Option<String>,
    features: Vec<String>,
}

fn read_corpus_cpu(file: &Path) -> CorpusCpu {
    let text = std::fs::read_to_string(file).unwrap();
    let doc = roxmltree::Document::parse(&text).unwrap();
    let root = doc.root_element();
    CorpusCpu {
        model: child_text(root, "model").unwrap(),
        vendor: child_text(root, "vendor"),
        features: feature_names(root, |_| true),
    }
}

/// The model names a vendor-less CPU can be written with so that libvirt neither picks nor
/// prefers them: x86 models without `<vendor>` and with `<decode ... guest='off'/>`.
fn neutral_models(cpu_map: &Path) -> Vec<String> {
    let index = std::fs::read_to_string(cpu_map.join("index.xml")).unwrap();
    let mut out = Vec::new();
    for file in index
        .split("filename='")
        .skip(1)
        .filter_map(|r| r.split('\'').next())
        .filter(|f| f.starts_with("x86_"))
    {
        let Ok(text) = std::fs::read_to_string(cpu_map.join(file)) else {
            continue;
        };
        if text.contains("guest='off'") && !text.contains("<vendor") {
            if let Some(name) = text
                .split("<model name='")
                .nth(1)
                .and_then(|r| r.split('\'').next())
            {
                out.push(name.to_string());
            }
        }
    }
    out
}

/// libvirt's answer for the CPU data `common` with no vendor: one `<cpu>` written as a neutral
/// model whose features are all in `common`, plus the rest of `common`.
fn libvirt_neutral(
    o: &Oracle,
    names: &CpuMap,
    neutral: &[String],
    common: &BTreeSet<String>,
    dir: &Scratch,
    migratable: bool,
) -> Option<Answer> {
    let model = neutral
        .iter()
        .find(|m| names.model_features(m).is_some_and(|f| f.is_subset(common)))?;
    let mut xml = format!("<cpu>\n  <arch>x86_64</arch>\n  <model>{model}</model>\n");
    for f in common.difference(names.model_features(model).unwrap()) {
        let _ = writeln!(xml, "  <feature name='{f}'/>");
    }
    xml.push_str("</cpu>\n");
    let file = dir.write("neutral.xml", xml);
    Some(libvirt_baseline(o, &file, migratable))
}

#[test]
#[ignore = "needs the host's libvirtd and the Debian 13 root's: .ci/run starts them"]
fn baseline_agrees_with_libvirt() {
    for o in oracles() {
        baseline_agrees_with(&o);
    }
}

#[allow(clippy::too_many_lines)]
fn baseline_agrees_with(o: &Oracle) {
    let names = CpuMap::load(&o.cpu_map()).expect("load the oracle's cpu_map");
    let neutral = neutral_models(&o.cpu_map());
    let files = corpus_files();
    let dir = Scratch::new("cluster-oracle");
    let mut failures: Vec<String> = Vec::new();

    // Each file alone: read or refused by both, for the same name.
    let mut readable = Vec::new();
    let mut left_out = 0;
    for f in &files {
        let lv = libvirt_baseline(o, f, false);
        let tool = tool_baseline(o, &names, std::slice::from_ref(f), false);
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        match (&lv, &tool.answer) {
            (Answer::Cpu { .. }, Answer::Cpu { .. }) => {
                if strip_vendor(&lv) != strip_vendor(&tool.answer) {
                    failures.push(format!(
                        "{name} alone: libvirt {lv:?}\n  tool {:?}",
                        tool.answer
                    ));
                }
                readable.push(f.clone());
            }
            (Answer::Error(l), Answer::Error(t)) => {
                let unknown = l.rsplit(' ').next().unwrap_or(l);
                let same_kind = (l.contains("Unknown CPU model")
                    && t.contains("unknown CPU model"))
                    || (l.contains("Unknown CPU feature") && t.contains("unknown CPU feature"));
                if !same_kind || !t.contains(&format!("'{unknown}'")) || !t.starts_with("exit 2") {
                    failures.push(format!(
                        "{name}: libvirt refuses with `{l}`, the tool with `{t}`"
                    ));
                }
            }
            // The one deliberate departure: a feature this cpu_map does not define (a newer
            // libvirt's) is left out of the host's CPU with a note, where libvirt stops.
            (Answer::Error(l), Answer::Cpu { .. }) if l.contains("Unknown CPU feature") => {
                let unknown = l.rsplit(' ').next().unwrap_or(l).to_string();
                let text = crate::harness::Cmd::new(&["baseline", "--cpu-map"])
                    .arg(s(&o.cpu_map()))
                    .arg(s(f))
                    .run();
                let said = text
                    .stdout
                    .lines()
                    .any(|n| n.starts_with("note: left out of ") && n.contains(unknown.as_str()));
                if said {
                    left_out += 1;
                } else {
                    failures.push(format!(
                        "{name}: libvirt refuses with `{l}`, the tool answers without a note leaving {unknown} out:\n{}",
                        text.stdout
                    ));
                }
            }
            _ => failures.push(format!(
                "{name} alone: libvirt {lv:?}\n  tool {:?}",
                tool.answer
            )),
        }
    }
    eprintln!(
        "corpus: {left_out} host CPU(s) name a feature this cpu_map lacks: libvirt stops, the tool leaves it out with a note"
    );
    eprintln!(
        "corpus: libvirt and the tool read {} of {} host CPUs",
        readable.len(),
        files.len()
    );
    assert!(readable.len() >= 2, "fewer than 2 readable corpus CPUs");
    let cpus: BTreeMap<PathBuf, CorpusCpu> = readable
        .iter()
        .map(|f| (f.clone(), read_corpus_cpu(f)))
        .collect();

    let mut rng = Rng(SEED);
    let mut agree = 0;
    let mut neutral_agree = 0;
    let mut unverifiable = 0;
    let mut other_refusals = 0;
    let mut levels: BTreeMap<String, usize> = BTreeMap::new();
    let mut lines = Vec::new();
    for i in 0..CLUSTERS {
        let k = rng.range(2, 6.min(u32::try_from(readable.len()).unwrap())) as usize;
        let mut pool = readable.clone();
        let mut pick = Vec::new();
        for _ in 0..k {
            let j = rng.below(u32::try_from(pool.len()).unwrap()) as usize;
            pick.push(pool.swap_remove(j));
        }
        let mut cat = String::new();
        for f in &pick {
            cat.push_str(&std::fs::read_to_string(f).unwrap());
        }
        let cat_file = dir.write(&format!("cluster-{i}.xml"), &cat);
        let label = pick
            .iter()
            .map(|f| {
                let n = f.file_name().unwrap().to_string_lossy();
                n.trim_start_matches("x86_64-cpuid-")
                    .trim_start_matches("x86-cpuid-")
                    .trim_end_matches("-host.xml")
                    .to_string()
            })
            .collect::<Vec<_>>()
            .join(" + ");
        for migratable in [false, true] {
            let lv = libvirt_baseline(o, &cat_file, migratable);
            let tool = tool_baseline(o, &names, &pick, migratable);
            let m = if migratable { " --migratable" } else { "" };
            let verdict = match (&lv, &tool.answer) {
                (Answer::Cpu { .. }, Answer::Cpu { .. }) if lv == tool.answer => Ok("agree"),
                (
                    Answer::Error(l),
                    Answer::Cpu {
                        vendor: None,
                        features,
                        ..
                    },
                ) if l == "CPU vendors do not match" || l.contains("differs from vendor") => {
                    // libvirt is given all the common features, as the tool decodes them;
                    // both then drop what QEMU never gets.
                    let common = common_features(&names, &pick, &cpus);
                    let mut shown = common.clone();
                    shown.retain(|f| {
                        !QEMU_DROPPED_FEATURES.contains(&f.as_str())
                            && !KVM_NEVER_GIVES.contains(&f.as_str())
                    });
                    if &shown != features && !migratable {
                        Err(format!(
                            "tool's features are not the hosts' common ones: {:?}",
                            features.symmetric_difference(&shown).collect::<Vec<_>>()
                        ))
                    } else {
                        match libvirt_neutral(o, &names, &neutral, &common, &dir, migratable) {
                            None => Ok("unverifiable"),
                            Some(n) if n == tool.answer => Ok("neutral"),
                            Some(n) => Err(format!(
                                "vendor mix: libvirt without vendor {n:?}\n  tool {:?}",
                                tool.answer
                            )),
                        }
                    }
                }
                (Answer::Error(l), Answer::Error(t)) if t == &format!("exit 1: {l}") => {
                    Ok("refused")
                }
                _ => Err(difference(&lv, &tool.answer)),
            };
            match verdict {
                Ok("agree") => agree += 1,
                Ok("neutral") => neutral_agree += 1,
                Ok("unverifiable") => unverifiable += 1,
                Ok(_) => other_refusals += 1,
                Err(e) => {
                    if !ALLOWED.iter().any(|(k, _)| e.contains(k)) {
                        failures.push(format!("cluster {i}{m} ({label}): {e}"));
                    }
                }
            }
            if !migratable {
                // The level, recomputed from libvirt's features (the tool's, checked above,
                // for a vendor mix).
                let lib_level = match (&lv, &tool.answer) {
                    (Answer::Cpu { features, .. }, _) | (_, Answer::Cpu { features, .. }) => {
                        Level::highest(|f| features.contains(f))
                    }
                    _ => None,
                };
                let lib_level = lib_level.map(|l| l.to_string());
                if tool.json.is_some() && lib_level != tool.level {
                    failures.push(format!(
                        "cluster {i} ({label}): level {:?}, features say {lib_level:?}",
                        tool.level
                    ));
                }
                let lvl = tool.level.clone().unwrap_or_else(|| "-".into());
                *levels.entry(lvl.clone()).or_default() += 1;
                if let Answer::Cpu { model, vendor, .. } = &tool.answer {
                    lines.push(format!(
                        "  {i:3} {lvl:10} {model:22} {:6} {label}",
                        vendor.as_deref().unwrap_or("-")
                    ));
                }
            }
        }
    }
    eprintln!(
        "clusters (index, level, model, vendor, hosts):\n{}",
        lines.join("\n")
    );
    eprintln!(
        "baseline vs libvirt: {CLUSTERS} clusters x 2 (plain, --migratable): {agree} agree, \
         {neutral_agree} vendor mixes agree with libvirt's vendor-less decode, {unverifiable} vendor \
         mixes unverifiable (no neutral model fits), {other_refusals} refused by both, {} disagree",
        failures.len()
    );
    eprintln!("levels reached: {levels:?}");
    assert!(
        failures.is_empty(),
        "{} disagreement(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        neutral_agree > 0 || unverifiable == 0,
        "no vendor mix could be checked against libvirt's vendor-less decode"
    );
}

/// How two answers differ, shortly: models, vendors, and the features only one side has.
fn difference(libvirt: &Answer, tool: &Answer) -> String {
    match (libvirt, tool) {
        (
            Answer::Cpu {
                model: lm,
                vendor: lv,
                features: lf,
            },
            Answer::Cpu {
                model: tm,
                vendor: tv,
                features: tf,
            },
        ) => format!(
            "libvirt {lm} ({lv:?}), tool {tm} ({tv:?}); only libvirt has {:?}, only the tool {:?}",
            lf.difference(tf).collect::<Vec<_>>(),
            tf.difference(lf).collect::<Vec<_>>()
        ),
        _ => format!("libvirt {libvirt:?}\n  tool {tool:?}"),
    }
}

/// An answer without its vendor (a single CPU's baseline keeps it; the comparison is on
/// model and features).
fn strip_vendor(a: &Answer) -> Answer {
    match a {
        Answer::Cpu {
            model, features, ..
        } => Answer::Cpu {
            model: model.clone(),
            vendor: None,
            features: features.clone(),
        },
        e @ Answer::Error(_) => e.clone(),
    }
}

/// The features every picked host has, by name: model features plus listed ones.
fn common_features(
    names: &CpuMap,
    pick: &[PathBuf],
    cpus: &BTreeMap<PathBuf, CorpusCpu>,
) -> BTreeSet<String> {
    let mut common: Option<BTreeSet<String>> = None;
    for f in pick {
        let c = &cpus[f];
        let mut set = names.model_features(&c.model).cloned().unwrap_or_default();
        set.extend(c.features.iter().cloned());
        common = Some(match common {
            None => set,
            Some(x) => x.intersection(&set).cloned().collect(),
        });
    }
    common.unwrap_or_default()
}

/// `virsh hypervisor-cpu-compare --error FILE`: `identical`, `superset`, `incompatible: MSG`, or
/// `refused: ERROR` when libvirt cannot read the guest CPU.
fn libvirt_compare(o: &Oracle, file: &Path) -> String {
    compare_verdict(&o.virsh(&["hypervisor-cpu-compare", "--error", &s(file)]))
}

/// What a `virsh hypervisor-cpu-compare --error` said, in [`libvirt_compare`]'s words.
fn compare_verdict(v: &crate::harness::Virsh) -> String {
    if v.stdout.contains("is identical to") {
        "identical".into()
    } else if v.stdout.contains("is a superset of") {
        "superset".into()
    } else if let Some(msg) = v.stderr.split("incompatible with host CPU: ").nth(1) {
        format!("incompatible: {}", msg.trim())
    } else {
        format!("refused: {}", error_text(&v.stderr))
    }
}

/// `virt-cpu-policy compare --host DOMCAPS --format json FILE`, in the same shape.
fn tool_compare(o: &Oracle, domcaps: &Path, file: &Path) -> String {
    let out = Cmd::new(&["compare", "--format", "json", "--host"])
        .arg(s(domcaps))
        .arg("--cpu-map")
        .arg(s(&o.cpu_map()))
        .arg(s(file))
        .run();
    if out.code == 2 {
        assert!(out.stdout.is_empty(), "{}", out.stdout);
        return format!("refused: {}", out.stderr.trim());
    }
    let j: serde_json::Value = serde_json::from_str(&out.stdout).expect("compare JSON");
    let r = j["result"].as_str().unwrap();
    assert_eq!(out.code, i32::from(r == "incompatible"), "{}", out.stderr);
    match j["message"].as_str() {
        Some(m) => format!("{r}: {m}"),
        None => r.to_string(),
    }
}

/// Whether the two answers agree: equal, or both refusals naming the same unknown model or
/// feature (libvirt: "Unknown CPU feature X", the tool: "unknown CPU feature 'X'").
fn same_compare(libvirt: &str, tool: &str) -> bool {
    match (
        libvirt.strip_prefix("refused: "),
        tool.strip_prefix("refused: "),
    ) {
        (Some(l), Some(t)) => {
            let name = l.rsplit(' ').next().unwrap_or(l);
            (l.contains("Unknown CPU feature")
                && t.contains(&format!("unknown CPU feature '{name}'")))
                || (l.contains("Unknown CPU model")
                    && t.contains(&format!("unknown CPU model '{name}'")))
        }
        _ => libvirt == tool,
    }
}

/// The `<model>` of a guest document.
fn guest_model(xml: &str) -> Option<String> {
    let doc = roxmltree::Document::parse(xml).ok()?;
    let cpu = doc.descendants().find(|n| n.has_tag_name("cpu"))?;
    child_text(cpu, "model")
}

/// The features an `incompatible: ... required features: a, b` answer names, as a set.
fn missing_set(answer: &str) -> Option<BTreeSet<String>> {
    let list = answer
        .split("does not provide required features: ")
        .nth(1)?;
    Some(list.split(", ").map(|f| f.trim().to_string()).collect())
}

/// Guests made from the oracle's own host-model CPU, so that every verdict occurs whatever the
/// host: the host-model itself (identical), without its last required features (superset),
/// the same with match='strict' (incompatible), a forbidden feature it has, a small model.
fn host_model_guests(domcaps: &str) -> Vec<(String, String)> {
    let doc = roxmltree::Document::parse(domcaps).unwrap();
    let Some(hm) = doc.descendants().find(|n| {
        n.has_tag_name("mode")
            && n.attribute("name") == Some("host-model")
            && n.attribute("supported") == Some("yes")
    }) else {
        return Vec::new();
    };
    let text = |tag: &str| {
        hm.children()
            .find(|n| n.has_tag_name(tag))
            .and_then(|n| n.text())
    };
    let (Some(model), vendor) = (text("model"), text("vendor")) else {
        return Vec::new();
    };
    let feats: Vec<(&str, &str)> = hm
        .children()
        .filter(|n| n.has_tag_name("feature"))
        .map(|n| {
            (
                n.attribute("policy").unwrap_or("require"),
                n.attribute("name").unwrap(),
            )
        })
        .collect();
    let required: Vec<&str> = feats
        .iter()
        .filter(|(p, _)| *p == "require")
        .map(|(_, n)| *n)
        .collect();
    let fewer: Vec<(&str, &str)> = feats
        .iter()
        .filter(|(p, n)| *p != "require" || !required.iter().rev().take(3).any(|r| r == n))
        .copied()
        .collect();
    let mut forbid = fewer.clone();
    if let Some(f) = required.first() {
        forbid.retain(|(_, n)| n != f);
        forbid.push(("forbid", f));
    }
    let mut out = vec![
        ("host-model".to_string(), guest(model, vendor, &feats)),
        (
            "host-model less 3 features".to_string(),
            guest(model, vendor, &fewer),
        ),
        (
            "host-model with a forbidden feature".to_string(),
            guest(model, vendor, &forbid),
        ),
        ("pentium".to_string(), guest("pentium", vendor, &[])),
        (
            "pentium, optional and force".to_string(),
            guest("pentium", None, &[("optional", "vmx"), ("force", "sse2")]),
        ),
    ];
    let strict = guest(model, vendor, &fewer).replace("match='exact'", "match='strict'");
    out.push(("host-model less 3 features, strict".to_string(), strict));
    out
}

fn guest(model: &str, vendor: Option<&str>, features: &[(&str, &str)]) -> String {
    let mut x = format!(
        "<domain type='kvm'>\n  <name>g</name>\n  <memory>1048576</memory>\n  <os><type arch='x86_64'>hvm</type></os>\n  <cpu mode='custom' match='exact'>\n    <model fallback='forbid'>{model}</model>\n"
    );
    if let Some(v) = vendor {
        let _ = writeln!(x, "    <vendor>{v}</vendor>");
    }
    for (policy, name) in features {
        let _ = writeln!(x, "    <feature policy='{policy}' name='{name}'/>");
    }
    x.push_str("  </cpu>\n</domain>\n");
    x
}

#[test]
#[ignore = "needs the host's libvirtd and the Debian 13 root's: .ci/run starts them"]
fn compare_agrees_with_hypervisor_cpu_compare() {
    for o in crate::harness::every_generation() {
        compare_agrees_with(&o);
    }
}

fn compare_agrees_with(o: &Oracle) {
    let dir = Scratch::new("compare-oracle");
    let dc = o.virsh(&["domcapabilities"]);
    assert!(dc.ok, "virsh domcapabilities: {}", dc.stderr);
    let domcaps = dir.write("domcaps.xml", &dc.stdout);
    let names = CpuMap::load(&o.cpu_map()).expect("load the oracle's cpu_map");
    let mut guests: Vec<(String, String)> = host_model_guests(&dc.stdout);
    assert!(
        !guests.is_empty(),
        "the oracle's domcapabilities have no host-model"
    );
    for f in corpus_files() {
        let c = read_corpus_cpu(&f);
        let known = names.model_features(&c.model).is_some();
        if !known {
            continue;
        }
        let req: Vec<(&str, &str)> = c.features.iter().map(|n| ("require", n.as_str())).collect();
        let stem = f.file_name().unwrap().to_string_lossy().into_owned();
        guests.push((
            format!("{stem} with vendor"),
            guest(&c.model, c.vendor.as_deref(), &req),
        ));
        guests.push((
            format!("{stem} without vendor"),
            guest(&c.model, None, &req),
        ));
    }
    // Every golden baseline output, as the guest CPU it describes.
    for case in crate::cluster::cases() {
        let Some(j) = crate::cluster::expected_json(&case) else {
            continue;
        };
        let (Some(model), Some(req), Some(dis)) = (
            j["model"].as_str(),
            j["require"].as_array(),
            j["disable"].as_array(),
        ) else {
            continue;
        };
        let mut feats: Vec<(&str, &str)> = req
            .iter()
            .map(|v| ("require", v.as_str().unwrap()))
            .collect();
        feats.extend(dis.iter().map(|v| ("disable", v.as_str().unwrap())));
        guests.push((
            format!("golden {}", case.name),
            guest(model, j["vendor"].as_str(), &feats),
        ));
    }
    let map = X86Map::load(&o.cpu_map()).expect("load the oracle's cpu_map");
    let mut failures = Vec::new();
    let mut versioned_agree = 0;
    let mut versioned_unknown = 0;
    let mut tally: BTreeMap<String, usize> = BTreeMap::new();
    for (i, (label, xml)) in guests.iter().enumerate() {
        let file = dir.write(&format!("guest-{i}.xml"), xml);
        let lv = libvirt_compare(o, &file);
        let tool = tool_compare(o, &domcaps, &file);
        *tally
            .entry(lv.split(':').next().unwrap().to_string())
            .or_default() += 1;
        if label.starts_with("host-model") || label.starts_with("pentium") {
            eprintln!("  {label}: {lv}");
        }
        if same_compare(&lv, &tool) {
            continue;
        }
        // libvirt 11 judges a guest named after a versioned alias (`<decode guest='off'/>`,
        // Haswell-v2...) through QEMU's own definition of that version, not its cpu_map's:
        // QEMU's versions may have more features (SandyBridge-v1 has xsaveopt, libvirt's
        // SandyBridge not), the vendor is not compared, the message lists QEMU's model features
        // in QEMU's order, then the guest's own, and a name the cpu_map lacks counts as missing.
        // Host facts carry no QEMU model definitions, so the tool answers with the cpu_map's
        // (the alias's base model): the verdict must agree; a feature the cpu_map lacks is
        // refused by the tool (exit 2, naming it) where libvirt calls it missing.
        let model = guest_model(xml);
        let versioned = model
            .as_deref()
            .and_then(|m| map.model(m))
            .is_some_and(|m| !m.decode_guest);
        let verdict = |a: &str| a.split(':').next().unwrap_or(a).to_string();
        match (versioned, missing_set(&lv)) {
            (true, _) if verdict(&lv) == verdict(&tool) => versioned_agree += 1,
            (true, Some(l))
                if tool.starts_with("refused: ")
                    && l.iter()
                        .any(|f| map.feature(f).is_none() && tool.contains(&format!("'{f}'"))) =>
            {
                versioned_unknown += 1;
            }
            _ => failures.push(format!("{label}:\n  libvirt: {lv}\n  tool:    {tool}")),
        }
    }
    eprintln!(
        "compare vs hypervisor-cpu-compare: {} guests: {} agree exactly, {versioned_agree} named \
         after a versioned model agree on the verdict (libvirt 11 uses QEMU's definition), \
         {versioned_unknown} versioned with a feature the cpu_map lacks (libvirt: missing; the \
         tool: refused), {} disagree; libvirt's verdicts {tally:?}",
        guests.len(),
        guests.len() - failures.len() - versioned_agree - versioned_unknown,
        failures.len()
    );
    assert!(guests.len() >= 20, "only {} guests", guests.len());
    assert!(
        failures.is_empty(),
        "{} disagreement(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// `virsh hypervisor-cpu-compare --virttype kvm --error FILE` on the host's libvirt:
/// `identical`, `superset`, `incompatible: MSG` or `refused: ERROR`.
fn kvm_compare(o: &Oracle, file: &Path) -> String {
    compare_verdict(&o.virsh(&[
        "hypervisor-cpu-compare",
        "--virttype",
        "kvm",
        "--error",
        &s(file),
    ]))
}

/// A host known only by its physical CPU: the tool's baseline leaves out what KVM never gives a
/// guest, and libvirt's KVM hypervisor is the judge.
///
/// The host CPU is what this host's KVM gives a guest (its domcapabilities `host-model`, expanded
/// to every feature by the oracle's cpu_map and written as a bare host `<cpu>` on the smallest
/// model, `486`, as `virsh capabilities` writes a host CPU) plus every feature of
/// [`KVM_NEVER_GIVES`], which a physical CPU lists (47 of the 56 real CPUs of libvirt's test
/// data list `ds`, `acpi`, `tm`...). This machine's own `virsh capabilities` CPU cannot serve:
/// it is a virtual machine whose KVM gives far less than its CPUID says (`pni`, `popcnt`, `avx`
/// ...), which no table can know; only domcapabilities can.
///
/// * libvirt's own `virsh cpu-baseline` of that CPU keeps them: `hypervisor-cpu-compare` says
///   incompatible (the defect the tool mends);
/// * the tool's baseline (`--format json`) names them in `kvm_left_out` and its guest CPU is
///   compatible (identical or superset);
/// * that guest CPU with any one of them put back is incompatible, libvirt naming that feature.
#[test]
#[ignore = "needs the host's libvirtd (and the Debian 13 root's) with KVM: .ci/run starts them"]
fn kvm_never_features_and_the_oracle() {
    for o in oracles() {
        kvm_never_features_against(&o);
    }
}

/// [`kvm_never_features_and_the_oracle`] on one libvirt, with its KVM and its cpu_map.
fn kvm_never_features_against(o: &Oracle) {
    let label = &o.label;
    let names = CpuMap::load(&o.cpu_map()).expect("load the host's cpu_map");
    let dc = o.virsh(&["domcapabilities", "--virttype", "kvm"]);
    assert!(dc.ok, "virsh domcapabilities --virttype kvm: {}", dc.stderr);
    let doc = roxmltree::Document::parse(&dc.stdout).unwrap();
    let hm = doc
        .descendants()
        .find(|n| {
            n.has_tag_name("mode")
                && n.attribute("name") == Some("host-model")
                && n.attribute("supported") == Some("yes")
        })
        .expect("this host's KVM has a host-model CPU (is /dev/kvm there?)");
    let model = child_text(hm, "model").expect("host-model names a model");
    let vendor = child_text(hm, "vendor");
    let mut kvm_gives: BTreeSet<String> = names
        .model_features(&model)
        .unwrap_or_else(|| panic!("{model} is not in the host's cpu_map"))
        .clone();
    kvm_gives.extend(feature_names(hm, |p| p == "require"));
    for f in feature_names(hm, |p| p == "disable") {
        kvm_gives.remove(&f);
    }
    assert!(
        KVM_NEVER_GIVES.iter().all(|f| !kvm_gives.contains(*f)),
        "this host's host-model lists a feature KVM never gives: {kvm_gives:?}"
    );
    let smallest = names.model_features("486").expect("486 in the cpu_map");
    assert!(smallest.is_subset(&kvm_gives), "486 {smallest:?}");
    let mut host = "<cpu>\n  <arch>x86_64</arch>\n  <model>486</model>\n".to_string();
    if let Some(v) = &vendor {
        let _ = writeln!(host, "  <vendor>{v}</vendor>");
    }
    for f in kvm_gives.iter().map(String::as_str).chain(KVM_NEVER_GIVES) {
        let _ = writeln!(host, "  <feature name='{f}'/>");
    }
    host.push_str("</cpu>\n");
    let dir = Scratch::new("kvm-never");
    let host_file = dir.write("physical-host.xml", &host);

    // libvirt's own baseline keeps them, and its hypervisor refuses the result.
    let lv = o.virsh(&["cpu-baseline", "--features", &s(&host_file)]);
    assert!(lv.ok, "virsh cpu-baseline: {}", lv.stderr);
    let lv_file = dir.write("libvirt-baseline.xml", &lv.stdout);
    let verdict = kvm_compare(o, &lv_file);
    let missing = missing_set(&verdict).unwrap_or_default();
    assert!(
        verdict.starts_with("incompatible: ") && missing.contains("ds"),
        "{label}: libvirt's cpu-baseline of a physical CPU: {verdict}"
    );
    eprintln!("{label}: libvirt's cpu-baseline of the physical CPU: {verdict}");

    // The tool's leaves them out, says so, and runs.
    let out = Cmd::new(&["baseline", "--format", "json", "--cpu-map"])
        .arg(s(&o.cpu_map()))
        .arg(s(&host_file))
        .run();
    assert_eq!(out.code, 0, "{}", out.stderr);
    let j: serde_json::Value = serde_json::from_str(&out.stdout).expect("baseline JSON");
    let list = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .unwrap_or_else(|| panic!("not a list: {v}"))
            .iter()
            .map(|x| x.as_str().unwrap().to_string())
            .collect()
    };
    let tool_model = j["model"].as_str().unwrap();
    let require = list(&j["require"]);
    let disable = list(&j["disable"]);
    let features = |extra: Option<&'static str>| -> Vec<(&str, &str)> {
        let mut v: Vec<(&str, &str)> = require.iter().map(|f| ("require", f.as_str())).collect();
        v.extend(disable.iter().map(|f| ("disable", f.as_str())));
        v.extend(extra.map(|f| ("require", f)));
        v
    };
    let tool_vendor = j["vendor"].as_str();
    let tool_file = dir.write(
        "tool-baseline.xml",
        guest(tool_model, tool_vendor, &features(None)),
    );
    let verdict = kvm_compare(o, &tool_file);
    assert!(
        verdict == "identical" || verdict == "superset",
        "{label}: the tool's baseline of a physical CPU under KVM: {verdict}"
    );
    eprintln!("{label}: the tool's baseline ({tool_model}) of the physical CPU: {verdict}");
    // The report names what was left out, and the host.
    let left: BTreeSet<String> = list(&j["kvm_left_out"]["features"]).into_iter().collect();
    let all: BTreeSet<String> = KVM_NEVER_GIVES.iter().map(|f| (*f).to_string()).collect();
    assert_eq!(left, all, "{}", out.stdout);
    assert_eq!(list(&j["kvm_left_out"]["hosts"]), ["physical-host"]);

    // Each feature put back: refused, naming it.
    let mut refused = 0;
    for f in KVM_NEVER_GIVES {
        let file = dir.write(
            &format!("with-{f}.xml"),
            guest(tool_model, tool_vendor, &features(Some(f))),
        );
        let verdict = kvm_compare(o, &file);
        let missing = missing_set(&verdict).unwrap_or_default();
        assert!(
            verdict.starts_with("incompatible: ") && missing.contains(f),
            "{label}: the tool's baseline with {f} put back: {verdict}"
        );
        refused += 1;
    }
    eprintln!(
        "{label}: each of the {refused} features put back: incompatible ({})",
        KVM_NEVER_GIVES.join(", ")
    );
    if o.is_host() {
        starts_under_kvm(
            o,
            &dir,
            &guest(tool_model, tool_vendor, &features(None)),
            None,
        );
        let with_ds = guest(tool_model, tool_vendor, &features(Some("ds")));
        starts_under_kvm(o, &dir, &with_ds, Some("ds"));
    }
}

/// Whether `check` of the KVM guest `xml` with the oracle's own facts (kvm domcapabilities, its
/// QEMU release, its cpu_map) warns `kvm-arch-capabilities`.
fn arch_capabilities_warned(o: &Oracle, dir: &Scratch, xml: &str) -> bool {
    let dc = o.virsh(&["domcapabilities", "--virttype", "kvm"]);
    assert!(dc.ok, "virsh domcapabilities --virttype kvm: {}", dc.stderr);
    let domcaps = dir.write("domcapabilities-kvm.xml", &dc.stdout);
    let policy = dir.write("empty.toml", "version = 1\n");
    let out = Cmd::new(&["check", "--format", "json", "--no-qemu-caps-cache"])
        .args(&["--qemu-version", &crate::tcg::qemu_version(o)])
        .args(&["--caps", &s(&domcaps), "--policy", &s(&policy)])
        .args(&o.tool_args())
        .stdin(xml)
        .run();
    out.stdout.contains("\"kvm-arch-capabilities\"")
}

/// `virsh create` of `guest` (a `guest()` document) as a small diskless KVM guest on the host's
/// libvirt: it starts, or, when `refused` names a feature, libvirt refuses it at start naming
/// that feature. The guest is destroyed at once (a transient domain is then gone).
fn starts_under_kvm(o: &Oracle, dir: &Scratch, guest: &str, refused: Option<&str>) {
    let tag = refused.unwrap_or("baseline");
    let name = format!("vcp-phys-{}-{tag}", std::process::id());
    let _sweep = crate::harness::Sweep {
        uri: o.uri.clone(),
        prefix: name.clone(),
    };
    let xml = guest
        .replacen("<name>g</name>", &format!("<name>{name}</name>"), 1)
        .replacen(
            "<memory>1048576</memory>",
            "<memory unit='MiB'>64</memory><vcpu>1</vcpu>",
            1,
        );
    let file = dir.write(&format!("{name}.xml"), &xml);
    let mut v = o.virsh(&["create", &s(&file)]);
    let _ = o.virsh(&["destroy", &name]);
    if !v.ok && refused.is_none() && crate::kvm::msr_abort(&v.stderr) {
        // QEMU aborted on MSR 0x10a after libvirt's checks passed: an AMD host whose QEMU is
        // older than 10.1 and a CPU with arch-capabilities. The tool warns of it with this
        // host's facts, and the same CPU without arch-capabilities is what is judged here.
        assert!(
            arch_capabilities_warned(o, dir, &xml),
            "{}: QEMU aborted on MSR 0x10a and the tool did not warn (kvm-arch-capabilities): {}",
            o.label,
            v.stderr
        );
        eprintln!(
            "{}: QEMU aborted the baseline on MSR 0x10a, as the tool warns (kvm-arch-capabilities); started again with arch-capabilities disabled",
            o.label
        );
        let without = if xml.contains("name='arch-capabilities'") {
            xml.replace(
                "policy='require' name='arch-capabilities'",
                "policy='disable' name='arch-capabilities'",
            )
        } else {
            xml.replacen(
                "</cpu>",
                "<feature policy='disable' name='arch-capabilities'/></cpu>",
                1,
            )
        };
        let file = dir.write(&format!("{name}-no-arch-capabilities.xml"), without);
        v = o.virsh(&["create", &s(&file)]);
        let _ = o.virsh(&["destroy", &name]);
    }
    match refused {
        None => assert!(
            v.ok,
            "{}: the tool's baseline does not start under KVM: {}",
            o.label, v.stderr
        ),
        Some(f) => {
            assert!(
                !v.ok,
                "{}: the baseline with {f} started under KVM",
                o.label
            );
            assert!(
                v.stderr.contains("does not provide required features") && v.stderr.contains(f),
                "{}: {}",
                o.label,
                v.stderr
            );
        }
    }
    eprintln!(
        "{}: virsh create under KVM, {tag}: {}",
        o.label,
        if v.ok {
            "started".to_string()
        } else {
            error_text(&v.stderr)
        }
    );
}
