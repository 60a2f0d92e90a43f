//! The tool's KVM start verdicts against what real hosts' libvirts answered, on any machine:
//! every host recorded in `../shared/corpus/kvm-truth/` (today an AMD EPYC with nested KVM and an
//! Intel Xeon with paravirtual KVM; a new host's directory is picked up as it is added, and each
//! generation directory it holds), `HOST/GENERATION/` holding that host's
//! `virsh capabilities`, `virsh domcapabilities` and, in `truth.jsonl`, `virsh create --paused`
//! of every custom model of its kvm domcapabilities under `check='partial'` and `'full'`, under
//! `match='minimum'`, the modes, QEMU's default CPU and the x86-64-v2 rewrite: started, or
//! libvirt's error (the corpus's README).
//!
//! Each case is judged by `virt-cpu-policy check` with that generation's facts as the daemon
//! publishes them (capabilities, the kvm domcapabilities of the case's machine type, the
//! generation's cpu_map from `tests/data/generations`, its libvirt and QEMU releases), and must
//! agree with libvirt:
//!
//! * started: no error, and no `kvm-arch-capabilities` warning;
//! * refused by libvirt's CPU checks ("the CPU is incompatible with host CPU", "guest CPU doesn't
//!   match specification"): `cpu-incompatible` or `kvm-check-full` saying libvirt's reason
//!   ([`crate::kvm`]'s agreement);
//! * aborted by QEMU on MSR 0x10a: the `kvm-arch-capabilities` warning, and no error;
//! * refused for anything else (libvirt 7.0's "Invalid mode attribute 'maximum'"): an error, or
//!   the rewrite that mends it (`needs-rewrite`).
//!
//! So this oracle judges both vendors' recorded answers on any machine, and
//! `kvm.rs` judges the machine's own libvirt live, whichever its vendor: a run on one vendor
//! judges both vendors' start checks, though not the other vendor's live-only paths (this
//! machine's CPUID and MSRs decoded, its QEMU's starts).

use crate::harness::{Cmd, Scratch, check_json, root, s, shared_corpus};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Every recorded host of `../shared/corpus/kvm-truth/` (a directory each: both vendors today; a
/// new host's recording is picked up as it is added), sorted.
pub(crate) fn recorded_hosts() -> Vec<PathBuf> {
    let mut hosts: Vec<_> = std::fs::read_dir(shared_corpus().join("kvm-truth"))
        .expect("kvm-truth")
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    hosts.sort();
    assert!(hosts.len() >= 2, "both vendors' recordings: {hosts:?}");
    hosts
}

/// The generations recorded for `host` (its subdirectories holding a `truth.jsonl`), each with
/// its directory, sorted by name; every one must be a generation of `tests/data/generations`.
pub(crate) fn recorded_generations(host: &Path) -> Vec<(String, PathBuf)> {
    let mut gens: Vec<(String, PathBuf)> = std::fs::read_dir(host)
        .expect("a recorded host")
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("truth.jsonl").is_file())
        .map(|p| (p.file_name().unwrap().to_string_lossy().to_string(), p))
        .collect();
    gens.sort();
    for (g, _) in &gens {
        assert!(
            root().join("tests/data/generations").join(g).is_dir(),
            "{}: generation {g} has no tests/data/generations/{g}",
            host.display()
        );
    }
    assert!(
        !gens.is_empty(),
        "{}: no generation recorded",
        host.display()
    );
    gens
}

/// A diskless KVM guest named `name` of machine type `machine` with `cpu` (the corpus's README:
/// 64 MiB, one vCPU).
fn guest(machine: &str, cpu: &str) -> String {
    format!(
        "<domain type='kvm'>\n  <name>truth</name>\n  <memory unit='MiB'>64</memory>\n  <vcpu>1</vcpu>\n  <os>\n    <type arch='x86_64' machine='{machine}'>hvm</type>\n  </os>\n  {cpu}\n  <devices>\n    <console type='pty'/>\n    <memballoon model='none'/>\n  </devices>\n</domain>\n"
    )
}

/// The libvirt release of generation `g` (`libvirt X.Y.Z` of `tests/data/generations/G/version`:
/// the recorded `version` is `virsh version` of one client, which names no daemon) and the QEMU
/// release the recorded host ran (`Running hypervisor: QEMU X.Y.Z` of its `version`).
fn versions(g: &str, dir: &Path) -> (String, String) {
    let find = |file: &Path, prefix: &str| {
        let text = std::fs::read_to_string(file).expect("a version file");
        text.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .map(|v| v.trim().to_string())
            .unwrap_or_else(|| panic!("{}: no {prefix}", file.display()))
    };
    let ours = root()
        .join("tests/data/generations")
        .join(g)
        .join("version");
    (
        find(&ours, "libvirt "),
        find(&dir.join("version"), "Running hypervisor: QEMU "),
    )
}

/// What one generation's recording `dir` of generation `g` holds, with what judges it: the
/// libvirt and QEMU releases ([`versions`]), the generation's cpu_map, and every case of its
/// `truth.jsonl`.
fn recorded(dir: &Path, g: &str) -> (String, String, PathBuf, Vec<serde_json::Value>) {
    let (libvirt, qemu) = versions(g, dir);
    let cpu_map = root()
        .join("tests/data/generations")
        .join(g)
        .join("cpu_map");
    let truth = std::fs::read_to_string(dir.join("truth.jsonl")).expect("truth.jsonl");
    let cases = truth
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    (libvirt, qemu, cpu_map, cases)
}

/// How one case came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Class {
    /// Started, and the tool found no error.
    Starts,
    /// Refused by libvirt, the tool's error saying the same.
    Refused,
    /// Refused by libvirt's CPU check and by the tool's error for that check, their lists of
    /// features differing: under `check='full'`, and for a model libvirt 11.3 compares with
    /// what KVM gives, libvirt lists what QEMU's KVM dropped, which the tool predicts from
    /// domcapabilities' host-model CPU (a superset: QEMU drops more, `f16c`, `rdrand`,
    /// `xsaveopt`... on this host), and the record keeps 600 characters of the message.
    RefusedOtherList,
    /// QEMU's MSR 0x10a abort, warned of.
    MsrWarned,
    /// Refused by libvirt for what no CPU check says (an unknown mode), the tool refusing too or
    /// rewriting it.
    OtherRefused,
    /// Anything else: a disagreement.
    Disagree,
}

#[test]
#[cfg_attr(
    not(vcp_shared_corpus),
    ignore = "needs ../shared/corpus beside the checkout"
)]
fn kvm_verdicts_agree_with_every_recorded_host() {
    let tmp = Scratch::new("kvm-truth");
    let policy = tmp.write("empty.toml", "version = 1\n");
    let mut failures = Vec::new();
    let mut total = 0;
    for (host, g, dir) in recorded_hosts().into_iter().flat_map(|h| {
        recorded_generations(&h)
            .into_iter()
            .map(move |(g, d)| (h.file_name().unwrap().to_string_lossy().to_string(), g, d))
    }) {
        let g = g.as_str();
        let (libvirt, qemu, cpu_map, cases) = recorded(&dir, g);
        let mut counts: BTreeMap<Class, usize> = BTreeMap::new();
        for case in cases {
            let text = |k: &str| case[k].as_str().unwrap_or_default().to_string();
            let (label, machine, cpu) = (text("case"), text("machine"), text("cpu"));
            let started = case["started"].as_bool().expect("started");
            let error = text("error");
            let domcaps = dir.join(format!("domcapabilities-x86_64-{machine}-kvm.xml"));
            let out = Cmd::new(&["check", "--format", "json", "--no-qemu-caps-cache"])
                .args(&["--policy", &s(&policy)])
                .args(&["--caps", &s(&dir.join("capabilities.xml"))])
                .args(&["--caps", &s(&domcaps)])
                .args(&["--cpu-map", &s(&cpu_map)])
                .args(&["--libvirt-version", &libvirt, "--qemu-version", &qemu])
                .stdin(guest(&machine, &cpu))
                .run();
            let (v, findings) = check_json(&out, &format!("{g} {label}"));
            let errors: Vec<&(String, String, String)> =
                findings.iter().filter(|f| f.1 == "error").collect();
            let warned = findings.iter().any(|f| f.0 == "kvm-arch-capabilities");
            let cpu_refusal = error
                .lines()
                .map(|l| l.trim_start_matches("error: "))
                .find(|l| {
                    l.contains("the CPU is incompatible with host CPU")
                        || l.contains("guest CPU doesn't match specification")
                });
            let class = if started {
                if errors.is_empty() && !warned {
                    Class::Starts
                } else {
                    Class::Disagree
                }
            } else if crate::kvm::msr_abort(&error) {
                if errors.is_empty() && warned {
                    Class::MsrWarned
                } else {
                    Class::Disagree
                }
            } else if let Some(l) = cpu_refusal {
                let code = if l.contains("guest CPU doesn't match specification") {
                    "kvm-check-full"
                } else {
                    "cpu-incompatible"
                };
                let agree = errors
                    .iter()
                    .any(|(code, _, m)| crate::kvm::agrees(l, code, m));
                if agree {
                    Class::Refused
                } else if errors.iter().any(|(c, _, _)| c == code) {
                    Class::RefusedOtherList
                } else {
                    Class::Disagree
                }
            } else if !errors.is_empty() || v["verdict"] == "needs-rewrite" {
                // Refused as it is: the tool's error, or the rewrite that mends it (libvirt
                // 7.0's `maximum` becomes host-passthrough).
                Class::OtherRefused
            } else {
                Class::Disagree
            };
            *counts.entry(class).or_insert(0) += 1;
            total += 1;
            if class == Class::Disagree {
                let said: Vec<String> = findings
                    .iter()
                    .map(|(sev, code, m)| format!("{sev}[{code}]: {m}"))
                    .collect();
                failures.push(format!(
                    "{host} {g} {label} ({cpu}): libvirt {}; tool {said:?}",
                    if started {
                        "started".to_string()
                    } else {
                        crate::producers::reason(&error)
                    }
                ));
            }
        }
        eprintln!("kvm-truth: {host} {g} (libvirt {libvirt}, QEMU {qemu}): {counts:?}");
    }
    eprintln!(
        "kvm-truth: {total} cases of every recorded host, {} disagree",
        failures.len()
    );
    assert!(total > 0, "no case recorded");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The x86-64-v2 features in libvirt's names (the psABI's CMPXCHG16B, LAHF-SAHF, POPCNT, SSE3,
/// SSE4_1, SSE4_2, SSSE3).
const V2: [&str; 7] = [
    "cx16", "lahf_lm", "popcnt", "pni", "sse4.1", "sse4.2", "ssse3",
];

/// The features a `<cpu>` lists with `policy` (`disable`...).
fn features_of(cpu: &str, policy: &str) -> Vec<String> {
    let doc = roxmltree::Document::parse(cpu).expect("a <cpu>");
    doc.root_element()
        .children()
        .filter(|n| n.has_tag_name("feature") && n.attribute("policy") == Some(policy))
        .filter_map(|n| n.attribute("name").map(str::to_string))
        .collect()
}

/// The features of x86 model `model` in the cpu_map `dir` (its own and its ancestors', libvirt's
/// `<model name='PARENT'/>`), read from the files as libvirt lists them.
fn model_features(dir: &Path, model: &str) -> Vec<String> {
    for entry in std::fs::read_dir(dir).expect("a cpu_map") {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if !name.starts_with("x86_") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let doc = roxmltree::Document::parse(&text).expect("cpu_map XML");
        let Some(m) = doc.descendants().find(|n| {
            n.has_tag_name("model")
                && n.attribute("name") == Some(model)
                && n.parent().is_some_and(|p| p.has_tag_name("cpus"))
        }) else {
            continue;
        };
        let mut out = Vec::new();
        for c in m.children().filter(|c| c.is_element()) {
            match c.tag_name().name() {
                "model" => out.extend(model_features(dir, c.attribute("name").unwrap())),
                "feature" => out.extend(c.attribute("name").map(str::to_string)),
                _ => {}
            }
        }
        return out;
    }
    panic!("{}: no model {model}", dir.display())
}

/// The x86-64-v2 features a live CPU (libvirt's status XML of a started guest: a custom CPU,
/// its model and features as QEMU gave them) lacks, per the cpu_map `dir`.
fn v2_lacking(live: &str, dir: &Path) -> Vec<&'static str> {
    let doc = roxmltree::Document::parse(live).expect("a live <cpu>");
    let model = doc
        .descendants()
        .find(|n| n.has_tag_name("model"))
        .and_then(|m| m.text())
        .expect("a live CPU names its model");
    let mut has = model_features(dir, model.trim());
    has.extend(features_of(live, "require"));
    let disabled = features_of(live, "disable");
    let mut lacking: Vec<&str> = V2
        .iter()
        .copied()
        .filter(|f| !has.iter().any(|h| h == f) || disabled.iter().any(|d| d == f))
        .collect();
    lacking.sort_unstable();
    lacking
}

/// Every recorded host of `../shared/corpus/kvm-truth/` (both vendors: each directory there is
/// picked up), each generation: the guests libvirt started with a custom CPU under its default
/// `check='partial'` that reach x86-64-v2 as written, judged under a policy asking it. Where the
/// live CPU (libvirt's status XML, what QEMU gave: its model's features and those it lists,
/// less those it disables) lacks v2 features, the guest runs below the level: `cpu-level` must
/// refuse it naming exactly those features (the `qemu64-v2` case, CloudStack's default CPU
/// rewritten to v2, on every host; `match='minimum'`, which libvirt gives the host-model CPU);
/// where it lacks none, no `cpu-level` error.
#[test]
#[cfg_attr(
    not(vcp_shared_corpus),
    ignore = "needs ../shared/corpus beside the checkout"
)]
fn the_level_as_kvm_gives_it_agrees_with_every_recorded_host() {
    let tmp = Scratch::new("kvm-truth-level");
    let policy = tmp.write(
        "v2.toml",
        "version = 1\n[[rule]]\nname = \"v2\"\ncpu.min_level = \"x86-64-v2\"\n",
    );
    let hosts = recorded_hosts();
    let (mut dropped_cases, mut kept_cases, mut failures) = (0, 0, Vec::new());
    let mut qemu64_v2 = 0;
    for host in &hosts {
        for (g, dir) in recorded_generations(host) {
            let g = g.as_str();
            let (libvirt, qemu, cpu_map, cases) = recorded(&dir, g);
            for case in cases {
                let text = |k: &str| case[k].as_str().unwrap_or_default().to_string();
                let (label, machine, cpu, live) =
                    (text("case"), text("machine"), text("cpu"), text("live_cpu"));
                let custom = !cpu.contains("mode=") || cpu.contains("mode='custom'");
                if case["started"] != true || live.is_empty() || !custom || cpu.contains("check=") {
                    continue;
                }
                let domcaps = dir.join(format!("domcapabilities-x86_64-{machine}-kvm.xml"));
                let judge = |kvm_given: bool| {
                    let mut c = Cmd::new(&["check", "--format", "json", "--no-qemu-caps-cache"])
                        .args(&["--policy", &s(&policy)])
                        .args(&["--caps", &s(&dir.join("capabilities.xml"))])
                        .args(&["--cpu-map", &s(&cpu_map)])
                        .args(&["--libvirt-version", &libvirt, "--qemu-version", &qemu]);
                    if kvm_given {
                        c = c.args(&["--caps", &s(&domcaps)]);
                    }
                    c.stdin(guest(&machine, &cpu)).run()
                };
                let what = format!("{} {g} {label}", host.display());
                let (as_written, _) = check_json(&judge(false), &what);
                if as_written["verdict"] == "needs-rewrite" {
                    // Below v2 as written: the rewrite's question (its result judged as KVM
                    // gives it), not this CPU's as recorded.
                    continue;
                }
                let (v, findings) = check_json(&judge(true), &what);
                let expected = v2_lacking(&live, &cpu_map);
                let level = findings
                    .iter()
                    .find(|f| f.0 == "cpu-level" && f.1 == "error");
                match (expected.is_empty(), level) {
                    (true, None) => kept_cases += 1,
                    (false, Some((_, _, m))) => {
                        let named = m
                            .split_once("does not give ")
                            .and_then(|(_, rest)| rest.split_once(" (per"))
                            .map(|(list, _)| {
                                let mut l: Vec<&str> = list.split(", ").collect();
                                l.sort_unstable();
                                l
                            });
                        if named.as_deref() == Some(&expected[..]) {
                            dropped_cases += 1;
                            qemu64_v2 += usize::from(label == "qemu64-v2");
                        } else {
                            failures.push(format!(
                                "{what}: QEMU dropped {expected:?}, the tool named: {m}"
                            ));
                        }
                    }
                    (true, Some((_, _, m))) => {
                        failures.push(format!("{what}: QEMU dropped no v2 feature; tool: {m}"));
                    }
                    (false, None) => failures.push(format!(
                        "{what}: QEMU dropped {expected:?}; the tool said {}",
                        v["verdict"]
                    )),
                }
            }
        }
    }
    eprintln!(
        "kvm-truth level: {} hosts, {dropped_cases} guests below v2 as KVM gives them named exactly ({qemu64_v2} of them the qemu64-v2 rewrite), {kept_cases} kept v2, {} disagree",
        hosts.len(),
        failures.len()
    );
    assert_eq!(
        qemu64_v2,
        hosts.len() * 4,
        "the qemu64-v2 case on every host and generation"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// libvirt 9.0 on the recorded Intel Xeon (`kvm-truth/intel-xeon-pvm/bookworm`: its CPUID
/// decodes with `avx512f` in the model libvirt's "full" host CPU gets, not in its list) refused a
/// host-model CPU forbidding `avx512f` in the comparison's words, "the CPU is incompatible with
/// host CPU: Host CPU provides forbidden features: avx512f" (the project's CI on that machine,
/// `as_found::as_found_verdicts_agree_with_libvirt`, case `host-model-forbid-avx512f`); the
/// recorded AMD EPYC's libvirt 9.0, whose CPUID decodes to a model without it, in the lookup's,
/// "... forbidden feature 'avx512f'" (as this test's live twin, `kvm::forbidden_features_are_
/// refused_in_each_libvirts_words`, sees on an AMD machine). The tool, given each host's facts,
/// says each one's.
#[test]
#[cfg_attr(
    not(vcp_shared_corpus),
    ignore = "needs ../shared/corpus beside the checkout"
)]
fn a_forbidden_feature_is_refused_in_each_recorded_hosts_words() {
    let tmp = Scratch::new("kvm-truth-forbid");
    let policy = tmp.write("empty.toml", "version = 1\n");
    let cpu = "<cpu mode='host-model'><feature policy='disable' name='arch-capabilities'/><feature policy='forbid' name='avx512f'/></cpu>";
    let words = |host: &str| {
        let dir = shared_corpus()
            .join("kvm-truth")
            .join(host)
            .join("bookworm");
        let (libvirt, qemu, cpu_map, _) = recorded(&dir, "bookworm");
        let out = Cmd::new(&["check", "--format", "json", "--no-qemu-caps-cache"])
            .args(&["--policy", &s(&policy)])
            .args(&["--caps", &s(&dir.join("capabilities.xml"))])
            .args(&["--caps", &s(&dir.join("domcapabilities-x86_64-pc-kvm.xml"))])
            .args(&["--cpu-map", &s(&cpu_map)])
            .args(&["--libvirt-version", &libvirt, "--qemu-version", &qemu])
            .stdin(guest("pc", cpu))
            .run();
        let (_, findings) = check_json(&out, host);
        findings
            .into_iter()
            .find(|f| f.0 == "cpu-incompatible")
            .map(|f| f.2.split(" (").next().unwrap_or_default().to_string())
    };
    assert_eq!(
        words("intel-xeon-pvm").as_deref(),
        Some(
            "the CPU is incompatible with host CPU: Host CPU provides forbidden features: avx512f"
        )
    );
    assert_eq!(
        words("amd-epyc-nested").as_deref(),
        Some(
            "the CPU is incompatible with host CPU: Host CPU provides forbidden feature 'avx512f'"
        )
    );
}
