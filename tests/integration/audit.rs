//! `audit` against `check` run file by file: over `../shared/corpus/virt-manager/domains/` (203
//! real documents) and over a directory of 1,000 generated definitions plus a malformed file and
//! files that cannot be read. Every guest's JSON must be `check --format json`'s plus the audit's
//! own keys, every total must be the count of `check`'s verdicts, and the text and Prometheus
//! formats must say the same figures.
//!
//! Unreadable files: as root `chmod 000` does not stop a read, so the tests use what stops root
//! too: a directory named `x.xml` and a dangling symlink (and, when not root, a `chmod 000` file).

use crate::harness::{Cmd, Output, Scratch, s, shared_corpus};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Host facts fixed on the command line, so the figures do not depend on this machine's libvirt
/// caches and KVM (the same options go to `audit` and to every `check`).
const FACTS: [&str; 5] = [
    "--no-qemu-caps-cache",
    "--kvm-max-vcpus",
    "1024",
    "--host-cpus",
    "16",
];

/// The keys `audit` adds to `check`'s object.
const AUDIT_KEYS: [&str; 6] = [
    "file",
    "running",
    "level",
    "vcpu_max",
    "machine_limit",
    "rules",
];

fn audit(args: &[String]) -> Output {
    Cmd::new(&["audit"]).args(&FACTS).args(args).run()
}

/// `check --format json FILE` for every file, 4 at a time: file → (exit code, JSON or None).
fn check_each(files: &[PathBuf], policy: Option<&Path>) -> BTreeMap<String, (i32, Option<Value>)> {
    let chunks: Vec<Vec<PathBuf>> = files
        .chunks(files.len().div_ceil(4).max(1))
        .map(<[PathBuf]>::to_vec)
        .collect();
    let policy: Vec<String> = policy
        .map(|p| vec!["--policy".into(), s(p)])
        .unwrap_or_default();
    std::thread::scope(|sc| {
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                let policy = policy.clone();
                sc.spawn(move || {
                    chunk
                        .iter()
                        .map(|f| {
                            let out = Cmd::new(&["check", "--format", "json"])
                                .args(&FACTS)
                                .args(&policy)
                                .arg(s(f))
                                .run();
                            let json = serde_json::from_str(&out.stdout).ok();
                            (s(f), (out.code, json))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    })
}

/// The figures `check` gives: verdict → count, plus files it could not judge (exit 2).
fn check_totals(each: &BTreeMap<String, (i32, Option<Value>)>) -> BTreeMap<String, u64> {
    let mut t = BTreeMap::new();
    for (code, json) in each.values() {
        let key = match (code, json) {
            (2, _) | (_, None) => "unreadable".to_string(),
            (_, Some(j)) => j["verdict"].as_str().unwrap().to_string(),
        };
        *t.entry(key).or_default() += 1;
    }
    t
}

/// Compare an audit JSON report with `check` file by file; returns the audit's totals.
fn compare(report: &Value, each: &BTreeMap<String, (i32, Option<Value>)>) -> BTreeMap<String, u64> {
    let guests = report["guests"].as_array().expect("guests");
    let unreadable = report["unreadable"].as_array().expect("unreadable");
    assert_eq!(
        guests.len() + unreadable.len(),
        each.len(),
        "one entry per file"
    );
    for g in guests {
        let file = g["file"].as_str().unwrap();
        let (code, check) = &each[file];
        let check = check
            .as_ref()
            .unwrap_or_else(|| panic!("check gave no JSON for {file}"));
        let mut mine = g.as_object().unwrap().clone();
        for k in AUDIT_KEYS {
            assert!(mine.remove(k).is_some(), "{file}: no {k}");
        }
        assert_eq!(
            &Value::Object(mine),
            check,
            "{file}: audit and check differ"
        );
        assert_eq!(g["exit"].as_i64(), Some(i64::from(*code)), "{file}");
        let rules = g["rules"].as_array().unwrap();
        if g["verdict"] == "needs-rewrite" || g["verdict"] == "cannot-conform" {
            assert!(
                !rules.is_empty(),
                "{file}: a non-conforming guest names the rules involved"
            );
        }
    }
    for u in unreadable {
        let file = u["file"].as_str().unwrap();
        assert_eq!(
            each[file].0, 2,
            "{file}: audit says unreadable, check did not exit 2"
        );
        assert!(!u["error"].as_str().unwrap().is_empty());
    }
    let totals: BTreeMap<String, u64> = report["totals"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
        .collect();
    let mut from_check = check_totals(each);
    from_check.insert("files".into(), each.len() as u64);
    for (k, v) in &totals {
        assert_eq!(
            from_check.get(k).copied().unwrap_or(0),
            *v,
            "total {k}: audit {v}, check {from_check:?}"
        );
    }
    totals
}

/// The Prometheus text's guest gauges must say the totals.
fn prometheus_matches(text: &str, totals: &BTreeMap<String, u64>) {
    for v in [
        "conforms",
        "needs-rewrite",
        "cannot-conform",
        "out-of-scope",
        "not-compared",
    ] {
        let n = totals.get(v).copied().unwrap_or(0);
        let line = format!("virt_cpu_policy_guests{{verdict=\"{v}\"}} {n}");
        assert!(text.lines().any(|l| l == line), "no {line:?} in:\n{text}");
    }
    let line = format!(
        "virt_cpu_policy_unreadable_definitions {}",
        totals["unreadable"]
    );
    assert!(text.lines().any(|l| l == line), "no {line:?} in:\n{text}");
}

/// The text report's totals line.
fn totals_line(t: &BTreeMap<String, u64>) -> String {
    // The not-compared count only when there are some, as audit prints it.
    let not_compared = match t.get("not-compared").copied().unwrap_or(0) {
        0 => String::new(),
        n => format!(", {n} not-compared"),
    };
    format!(
        "totals: {} files, {} conforms, {} needs-rewrite, {} cannot-conform, {} out-of-scope{not_compared}, {} unreadable",
        t["files"],
        t["conforms"],
        t["needs-rewrite"],
        t["cannot-conform"],
        t["out-of-scope"],
        t["unreadable"]
    )
}

/// The exit code an audit with these totals gives.
fn expected_exit(t: &BTreeMap<String, u64>) -> i32 {
    if t["unreadable"] > 0 {
        2
    } else if t["cannot-conform"] > 0 {
        1
    } else if t["needs-rewrite"] > 0 {
        3
    } else if t.get("not-compared").copied().unwrap_or(0) > 0 {
        4
    } else {
        0
    }
}

fn all_three_formats(
    dir: &Path,
    each: &BTreeMap<String, (i32, Option<Value>)>,
) -> BTreeMap<String, u64> {
    let json = audit(&["--format".into(), "json".into(), s(dir)]);
    let report: Value =
        serde_json::from_str(&json.stdout).unwrap_or_else(|e| panic!("{e}: {}", json.stderr));
    let totals = compare(&report, each);
    assert_eq!(json.code, expected_exit(&totals), "{}", json.stderr);
    assert_eq!(report["exit"].as_i64(), Some(i64::from(json.code)));
    assert!(
        !json.stderr.contains("audit: "),
        "no progress indicator off a terminal: {}",
        json.stderr
    );
    let text = audit(&[s(dir)]);
    assert_eq!(text.code, json.code);
    assert!(text.stdout.starts_with("GUEST "), "{}", text.stdout);
    assert!(
        text.stdout.lines().any(|l| l == totals_line(&totals)),
        "{}",
        text.stdout
    );
    let prom = audit(&["--format".into(), "prometheus".into(), s(dir)]);
    assert_eq!(prom.code, json.code);
    prometheus_matches(&prom.stdout, &totals);
    totals
}

#[test]
#[cfg_attr(
    not(vcp_shared_corpus),
    ignore = "needs ../shared/corpus beside the checkout"
)]
fn audit_of_the_corpus_matches_check_file_by_file() {
    let c = shared_corpus();
    let dir = c.join("virt-manager/domains");
    let files: Vec<PathBuf> = {
        let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "xml"))
            .collect();
        v.sort();
        v
    };
    assert!(files.len() >= 200, "{} files", files.len());
    let each = check_each(&files, None);
    let totals = all_three_formats(&dir, &each);
    eprintln!("corpus audit totals (= check file by file): {totals:?}");
    assert_eq!(totals["files"], files.len() as u64);
    assert!(
        totals["needs-rewrite"] > 0 && totals["conforms"] > 0,
        "{totals:?}"
    );
}

/// Definition `i` of the generated set: kvm, qemu and xen guests; no `<cpu>`, CloudStack's bare
/// one, Nehalem (v2), Penryn (v1), host-model, a topology libvirt refuses; pc and q35; now and
/// then a second `<cpu>`.
fn generated(i: usize) -> String {
    let vt = if i % 10 == 9 {
        "xen"
    } else if i % 7 == 3 {
        "qemu"
    } else {
        "kvm"
    };
    let machine = if i % 2 == 0 { "pc" } else { "q35" };
    let (vcpu, cpu) = match i % 6 {
        0 => (2, String::new()),
        1 => (2, "<cpu><topology sockets='1' cores='2' threads='1'/></cpu>".into()),
        2 => (4, "<cpu mode='custom' match='exact'><model fallback='forbid'>Nehalem</model></cpu>".into()),
        3 => (2, "<cpu mode='custom' match='exact'><model fallback='allow'>Penryn</model><feature policy='require' name='aes'/></cpu>".into()),
        4 => (8, "<cpu mode='host-model' check='partial'/>".into()),
        _ => (3, "<cpu mode='custom'><model>Haswell-noTSX</model><topology sockets='1' cores='2' threads='1'/></cpu>".into()),
    };
    let extra = if i % 50 == 7 {
        "\n  <cpu><numa><cell id='0' cpus='0-1' memory='524288' unit='KiB'/></numa></cpu>"
    } else {
        ""
    };
    format!(
        "<domain type='{vt}'>\n  <name>gen-{i:04}</name>\n  <uuid>00000000-0000-4000-8000-{i:012}</uuid>\n  <memory unit='KiB'>524288</memory>\n  <vcpu placement='static'>{vcpu}</vcpu>\n  <os>\n    <type arch='x86_64' machine='{machine}'>hvm</type>\n  </os>\n  {cpu}{extra}\n  <devices>\n    <emulator>/usr/bin/qemu-system-x86_64</emulator>\n  </devices>\n</domain>\n"
    )
}

/// Write the 1,000 generated definitions into `dir`; returns their paths.
pub fn write_generated(dir: &Path, n: usize) -> Vec<PathBuf> {
    (0..n)
        .map(|i| {
            let p = dir.join(format!("gen-{i:04}.xml"));
            std::fs::write(&p, generated(i)).unwrap();
            p
        })
        .collect()
}

#[test]
fn audit_of_1000_definitions_and_unreadable_files_matches_check() {
    let t = Scratch::new("audit-1000");
    let mut files = write_generated(&t.0, 1000);
    // A malformed file, a directory named like a definition, a dangling link: reported, counted.
    files.push(t.write("broken.xml", "<domain type='kvm'><name>half"));
    std::fs::create_dir(t.path("dir.xml")).unwrap();
    files.push(t.path("dir.xml"));
    std::os::unix::fs::symlink(t.path("gone"), t.path("dangling.xml")).unwrap();
    files.push(t.path("dangling.xml"));
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        let p = t.write("no-permission.xml", generated(1));
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o000)).unwrap();
        files.push(p);
    }
    // Not a definition: never read.
    t.write("notes.txt", "not xml");
    files.sort();
    let each = check_each(&files, None);
    let totals = all_three_formats(&t.0, &each);
    eprintln!("1,000 generated + bad files (= check file by file): {totals:?}");
    assert_eq!(totals["unreadable"], if root { 3 } else { 4 });
    for v in [
        "conforms",
        "needs-rewrite",
        "cannot-conform",
        "out-of-scope",
    ] {
        assert!(totals[v] > 50, "{v}: {totals:?}");
    }
    let text = audit(&[s(&t.0)]);
    for bad in ["broken.xml", "dir.xml", "dangling.xml"] {
        assert!(
            text.stdout
                .lines()
                .any(|l| l.starts_with("unreadable: ") && l.contains(bad)),
            "{bad} not reported:\n{}",
            text.stdout
        );
    }
    assert!(
        text.stdout.contains("dir.xml: a directory"),
        "{}",
        text.stdout
    );
}

#[test]
fn audit_columns_name_level_vcpus_and_rules() {
    let t = Scratch::new("audit-columns");
    // A versioned machine type: its limit is in the built-in table. An alias (`pc`) is known only
    // from a host file.
    let penryn = generated(3).replace("machine='q35'", "machine='pc-q35-7.2'");
    std::fs::write(t.path("penryn.xml"), penryn).unwrap();
    std::fs::write(t.path("hostmodel.xml"), generated(4)).unwrap();
    let find = |r: &Value, n: &str| -> Value {
        let guests = r["guests"].as_array().unwrap();
        guests.iter().find(|g| g["guest"] == n).unwrap().clone()
    };
    let out = audit(&["--format".into(), "json".into(), s(&t.0)]);
    let r: Value = serde_json::from_str(&out.stdout).unwrap();
    let penryn = find(&r, "gen-0003");
    assert_eq!(penryn["verdict"], "needs-rewrite");
    assert_eq!(penryn["level"]["value"], "x86-64-v1");
    assert_eq!(penryn["level"]["basis"], "model");
    assert_eq!(penryn["vcpu_max"], 2);
    assert_eq!(penryn["machine_limit"]["value"], 288, "{penryn}");
    assert_eq!(penryn["rules"], serde_json::json!(["x86-64-v2 baseline"]));
    let hm = find(&r, "gen-0004");
    assert_eq!(hm["level"]["basis"], "no domcapabilities");
    assert_eq!(
        hm["machine_limit"],
        Value::Null,
        "the alias pc, no host file: {hm}"
    );
    let text = audit(&[s(&t.0)]);
    let row = |name: &str| {
        let line = text.stdout.lines().find(|l| l.starts_with(name)).unwrap();
        line.split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        row("gen-0003")[..4],
        ["gen-0003", "needs-rewrite", "x86-64-v1", "2/288"]
    );
    assert_eq!(row("gen-0004")[..4], ["gen-0004", "conforms", "?", "8/?"]);
    assert!(text.stdout.contains("note: LEVEL ?"), "{}", text.stdout);
}

#[test]
#[cfg_attr(
    not(vcp_shared_corpus),
    ignore = "needs ../shared/corpus beside the checkout"
)]
fn audit_columns_with_this_hosts_files() {
    let t = Scratch::new("audit-columns-host");
    std::fs::write(t.path("hostmodel.xml"), generated(4)).unwrap();
    let find = |r: &Value, n: &str| -> Value {
        let guests = r["guests"].as_array().unwrap();
        guests.iter().find(|g| g["guest"] == n).unwrap().clone()
    };
    // With this host's files: its KVM drops pni and popcnt, so host-model reaches v1 only;
    // capabilities.xml resolves the alias pc to pc-i440fx-7.2 (255).
    let dir = shared_corpus().join("host-libvirt-9.0-qemu-7.2");
    let mut args = vec!["--format".to_string(), "json".into()];
    for f in ["domcapabilities-x86_64-q35-kvm.xml", "capabilities.xml"] {
        args.extend(["--caps".to_string(), s(&dir.join(f))]);
    }
    args.push(s(&t.0));
    let r: Value = serde_json::from_str(&audit(&args).stdout).unwrap();
    let hm = find(&r, "gen-0004");
    assert_eq!(hm["level"]["basis"], "domcapabilities", "{hm}");
    assert_eq!(hm["level"]["value"], "x86-64-v1", "{hm}");
    assert_eq!(hm["machine_limit"]["value"], 255, "{hm}");
    assert_eq!(hm["machine_limit"]["machine"], "pc-i440fx-7.2", "{hm}");
}

#[test]
fn audit_fails_whole_on_a_bad_policy_and_reads_files_it_is_given() {
    let t = Scratch::new("audit-bad");
    let p = t.write(
        "p.toml",
        "version = 1\n[[rule]]\nname = 'x'\ncpu.modle = 'custom'\n",
    );
    t.write("a.xml", generated(2));
    let out = audit(&["--policy".into(), s(&p), s(&t.0)]);
    assert_eq!(out.code, 2);
    assert!(out.stdout.is_empty(), "nothing on stdout: {}", out.stdout);
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(out.stderr.contains("modle"), "{}", out.stderr);
    // Files named one by one; all conform: exit 0. A file named again (itself, through its
    // directory) is one stored definition, counted once.
    let a = t.path("a.xml");
    let b = t.write("b.xml", generated(4));
    // The recorded host: the KVM comparison of the Nehalem guest is made on any machine.
    let mut args: Vec<String> = crate::harness::recorded_host_without_kvm_domcaps()
        .into_iter()
        .filter(|a| a != "--no-qemu-caps-cache")
        .collect();
    args.extend([s(&a), s(&b), s(&a), s(&t.0)]);
    let out = audit(&args);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("totals: 2 files, 2 conforms"),
        "{}",
        out.stdout
    );
    // An empty directory: no guests, exit 0.
    let empty = Scratch::new("audit-empty");
    let out = audit(&[s(&empty.0)]);
    assert_eq!(out.code, 0);
    assert!(out.stdout.starts_with("totals: 0 files"), "{}", out.stdout);
}

/// The Prometheus text without the two lines that change every run (when, how long).
fn without_times(text: &str) -> String {
    text.lines()
        .filter(|l| {
            !l.starts_with("virt_cpu_policy_last_reconcile")
                && !l.starts_with("virt_cpu_policy_reconcile_duration")
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn prometheus_output_is_the_same_every_run() {
    let t = Scratch::new("audit-prom-order");
    write_generated(&t.0, 60);
    let run = || {
        let out = audit(&["--format".into(), "prometheus".into(), s(&t.0)]);
        assert!(matches!(out.code, 1 | 3), "{}", out.stderr);
        without_times(&out.stdout)
    };
    let first = run();
    assert!(
        first.matches("virt_cpu_policy_rule_guests{").count() >= 2,
        "several series to order:\n{first}"
    );
    for _ in 0..4 {
        assert_eq!(run(), first, "the same figures, the same text");
    }
}

#[test]
#[cfg_attr(
    not(all(target_arch = "x86_64", vcp_shared_corpus)),
    ignore = "needs ../shared/corpus beside the checkout, on an x86_64 host (the host level is an x86_64 host's)"
)]
fn prometheus_host_level_prefers_the_qemu_capability_cache_to_cpuinfo() {
    let c = shared_corpus();
    let t = Scratch::new("audit-prom-level");
    let guest = t.write("g.xml", generated(2));
    let cache = t.path("cache");
    std::fs::create_dir(&cache).unwrap();
    // Named by hashes, as libvirt names them; the i386 emulator's file comes first and is not it.
    let host = c.join("host-libvirt-9.0-qemu-7.2");
    std::fs::copy(host.join("qemucaps-i686.xml"), cache.join("0a.xml")).unwrap();
    std::fs::copy(host.join("qemucaps-x86_64.xml"), cache.join("9f.xml")).unwrap();
    let level = |cache_args: &[&str]| {
        let out = Cmd::new(&["audit", "--format", "prometheus"])
            .args(cache_args)
            .arg(s(&guest))
            .run();
        out.status(0);
        out.stdout
            .lines()
            .find(|l| l.starts_with("virt_cpu_policy_host_level_info{"))
            .expect("the host level gauge")
            .to_string()
    };
    // That host's KVM gives guests no pni, ssse3, sse4.x or popcnt: x86-64-v1.
    assert_eq!(
        level(&["--qemu-caps-cache", &s(&cache)]),
        "virt_cpu_policy_host_level_info{level=\"x86-64-v1\",source=\"qemu capability cache\"} 1"
    );
    // Without the cache: the physical CPU, and the label says it is not what guests get.
    let physical = level(&["--no-qemu-caps-cache"]);
    assert!(
        physical.contains("source=\"/proc/cpuinfo (physical CPU, not what KVM gives guests)\"")
            || physical.contains("source=\"unknown\""),
        "{physical}"
    );
}

/// The cron line of docs/metrics.md ("Without the daemon: a cron job"), with the node_exporter
/// directory `dir`.
fn documented_cron_line(dir: &Path) -> String {
    let page = std::fs::read_to_string(crate::harness::root().join("docs/metrics.md")).unwrap();
    let line = page
        .lines()
        .find_map(|l| l.strip_prefix("*/10 * * * * root "))
        .expect("docs/metrics.md has the cron recipe");
    assert!(
        line.contains("D=/var/lib/prometheus/node-exporter;"),
        "{line}"
    );
    line.replace(
        "D=/var/lib/prometheus/node-exporter;",
        &format!("D={};", dir.display()),
    )
}

#[test]
fn documented_cron_recipe_keeps_the_old_file_when_audit_fails() {
    let t = Scratch::new("audit-cron");
    let defs = t.path("defs");
    std::fs::create_dir(&defs).unwrap();
    write_generated(&defs, 10);
    let out_dir = t.path("node-exporter");
    std::fs::create_dir(&out_dir).unwrap();
    let prom = out_dir.join("virt_cpu_policy.prom");
    let bad_policy = t.write(
        "bad.toml",
        "version = 1\n[[rule]]\nname = 'x'\ncpu.modle = 'custom'\n",
    );
    let bin_dir = t.path("bin");
    std::fs::create_dir(&bin_dir).unwrap();
    // `virt-cpu-policy` on PATH: the real one, with this test's facts and inputs.
    let run = |extra: &str| {
        let wrapper = bin_dir.join("virt-cpu-policy");
        std::fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\nexec '{}' \"$@\" {} {extra}\n",
                crate::harness::bin(),
                FACTS.join(" ")
            ),
        )
        .unwrap();
        std::fs::set_permissions(
            &wrapper,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let path = format!(
            "{}:{}",
            bin_dir.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let st = std::process::Command::new("sh")
            .arg("-c")
            .arg(documented_cron_line(&out_dir))
            .env("PATH", path)
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(st.code().is_some(), "sh ran");
        let left: Vec<String> = std::fs::read_dir(&out_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, ["virt_cpu_policy.prom"], "no temporary file left");
        std::fs::read_to_string(&prom).unwrap()
    };
    std::fs::write(&prom, "OLD\n").unwrap();
    // A guest needs a rewrite (exit 3): the new figures.
    let good = run(&s(&defs));
    assert!(
        good.contains("virt_cpu_policy_guests{verdict=\"needs-rewrite\"}"),
        "{good}"
    );
    // A policy that does not load (exit 2, nothing on stdout): the old file stays.
    std::fs::write(&prom, "OLD\n").unwrap();
    assert_eq!(
        run(&format!("--policy {} {}", s(&bad_policy), s(&defs))),
        "OLD\n"
    );
    // An unreadable definition (exit 2, the figures complete): the new figures, counting it.
    std::fs::create_dir(defs.join("x.xml")).unwrap();
    let counted = run(&s(&defs));
    assert!(
        counted.contains("virt_cpu_policy_unreadable_definitions 1\n"),
        "{counted}"
    );
}

#[test]
fn audit_shows_progress_on_a_terminal_above_200_files() {
    // util-linux's `script` (Debian's essential bsdutils) gives the audit a terminal.
    assert!(
        std::process::Command::new("script")
            .arg("--version")
            .output()
            .is_ok(),
        "needs util-linux's `script` to give the audit a terminal"
    );
    let t = Scratch::new("audit-progress");
    write_generated(&t.0, 201);
    // `script` runs the command on a pseudo-terminal; stdout goes to a file, stderr stays on it.
    let out_file = t.path("out.txt");
    let cmd = format!(
        "{} audit {} {} >{} ",
        crate::harness::bin(),
        FACTS.join(" "),
        s(&t.0),
        s(&out_file)
    );
    let out = std::process::Command::new("script")
        .args(["-qefc", &cmd, "/dev/null"])
        .output()
        .unwrap();
    let tty = String::from_utf8_lossy(&out.stdout);
    assert!(
        tty.contains("audit: 201/201 files"),
        "no progress on the terminal: {tty:?}"
    );
    let report = std::fs::read_to_string(&out_file).unwrap();
    assert!(!report.contains("audit: "), "progress leaked into stdout");
    assert!(report.contains("totals: 201 files"), "{report}");
    // 200 files: no progress.
    std::fs::remove_file(t.path("gen-0200.xml")).unwrap();
    let out = std::process::Command::new("script")
        .args(["-qefc", &cmd, "/dev/null"])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&out.stdout).contains("audit: "));
}

/// libvirt's own stored definitions: a guest defined through libvirtd shows up in
/// `audit`'s default directory with the verdict `check` gives its `virsh dumpxml --inactive`.
#[test]
#[ignore = "needs a running libvirtd: .ci/run starts one"]
fn audit_reads_the_definitions_libvirtd_stores() {
    crate::harness::require_libvirtd();
    let name = format!("vcp-audit-{}", std::process::id());
    let t = Scratch::new("audit-libvirt");
    let xml = format!(
        "<domain type='qemu'>\n  <name>{name}</name>\n  <memory unit='MiB'>128</memory>\n  <vcpu>2</vcpu>\n  <os>\n    <type arch='x86_64' machine='pc'>hvm</type>\n  </os>\n  <cpu>\n    <topology sockets='1' cores='2' threads='1'/>\n  </cpu>\n</domain>\n"
    );
    let f = t.write("g.xml", &xml);
    let d = crate::harness::virsh(&["define", &s(&f)]);
    assert!(d.ok, "virsh define: {}", d.stderr);
    let stored = Path::new("/etc/libvirt/qemu").join(format!("{name}.xml"));
    let run = || {
        // Default directory: /etc/libvirt/qemu.
        let out = Cmd::new(&["audit", "--format", "json"]).run();
        let dump = crate::harness::virsh(&["dumpxml", "--inactive", &name]);
        let check = Cmd::new(&["check", "--format", "json", "-"])
            .stdin(dump.stdout)
            .run();
        (out, check)
    };
    let (out, check) = run();
    let _ = crate::harness::virsh(&["undefine", &name]);
    let r: Value =
        serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.stderr));
    let g = r["guests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["guest"] == name.as_str())
        .unwrap_or_else(|| {
            panic!(
                "{name} not in the audit of /etc/libvirt/qemu: {}",
                out.stdout
            )
        });
    assert_eq!(g["file"], s(&stored));
    let check: Value = serde_json::from_str(&check.stdout).unwrap();
    assert_eq!(g["verdict"], "needs-rewrite");
    assert_eq!(g["verdict"], check["verdict"]);
    assert_eq!(g["changes"], check["changes"]);
}
