//! `virt-cpu-policy fleet` on the four generations' captured facts (`tests/data/generations/`):
//! each host judged with its own capabilities, domcapabilities (kvm and qemu) and cpu_map, the
//! verdicts those of the real `virsh define`/`start` of each generation (notes in
//! docs/generations.md; the live proof is `tests/fleet/migrate`); the views' exit codes and
//! shapes; `facts --guests`.

use crate::harness::{Cmd, Scratch, generation_facts, s};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;

mod guest;
mod page;

/// The generations, oldest first.
const GENERATIONS: [&str; 4] = ["bullseye", "bookworm", "trixie", "forky"];

/// A `<hostFacts>` of generation `g` as `virt-cpu-policyd publish` writes it: its libvirt and
/// QEMU releases, capabilities, and the q35 domcapabilities for kvm and qemu, from the captured
/// facts.
fn host_facts(t: &Scratch, dir: &str, g: &str) -> PathBuf {
    let d = generation_facts(g);
    let version = std::fs::read_to_string(d.join("version")).unwrap();
    let release = |prefix: &str| {
        version
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap()
            .trim()
            .to_string()
    };
    let (libvirt, qemu) = (release("libvirt "), release("qemu "));
    let mut doc = format!("<hostFacts name='{g}' libvirt='{libvirt}' qemu='{qemu}'>\n");
    for f in [
        "capabilities.xml",
        "domcapabilities-x86_64-q35-kvm.xml",
        "domcapabilities-x86_64-q35-qemu.xml",
    ] {
        doc.push_str(&body(&d.join(f)));
        doc.push('\n');
    }
    doc.push_str("</hostFacts>\n");
    std::fs::create_dir_all(t.path(dir)).unwrap();
    t.write(&format!("{dir}/{g}.xml"), doc)
}

/// `--cpu-map HOST=DIR` for every generation (each host's own libvirt's cpu_map).
fn cpu_maps() -> Vec<String> {
    GENERATIONS
        .iter()
        .flat_map(|g| {
            [
                "--cpu-map".to_string(),
                format!("{g}={}", s(&generation_facts(g).join("cpu_map"))),
            ]
        })
        .collect()
}

/// A small diskless TCG guest: `machine`, `cpu` (a whole `<cpu>` element or "").
fn guest(name: &str, machine: &str, cpu: &str) -> String {
    format!(
        "<domain type='qemu'><name>{name}</name><memory unit='KiB'>65536</memory><vcpu>1</vcpu>\
         <os><type arch='x86_64' machine='{machine}'>hvm</type></os>{cpu}\
         <devices><emulator>/usr/bin/qemu-system-x86_64</emulator><memballoon model='none'/></devices></domain>"
    )
}

fn custom(model: &str, extra: &str) -> String {
    format!(
        "<cpu mode='custom' match='exact'><model fallback='forbid'>{model}</model>{extra}</cpu>"
    )
}

fn run_fleet(args: &[String]) -> crate::harness::Output {
    let out = Cmd::new(&["fleet"])
        .args(&cpu_maps())
        .args(args)
        .arg("--policy")
        .arg(s(&crate::harness::root().join("packaging/policy.toml")))
        .run();
    // Hosts alike are judged once with a placeholder for their facts file: never shown.
    assert!(!out.stdout.contains('\u{1}'), "{}", out.stdout);
    out
}

fn json(out: &crate::harness::Output) -> Value {
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}\n{}", out.stdout, out.stderr))
}

/// The facts directory `dir` of `t` with the host facts of generations `gens`.
fn hosts_dir(t: &Scratch, dir: &str, gens: &[&str]) -> PathBuf {
    for g in gens {
        host_facts(t, dir, g);
    }
    t.path(dir)
}

/// `fleet VIEW... --format json FACTS...` (with every generation's cpu_map and the packaged
/// policy): its exit status checked, its JSON.
#[track_caller]
fn fleet_json(view: &[&str], facts: &[PathBuf], status: i32) -> Value {
    let mut args: Vec<String> = view.iter().map(|a| a.to_string()).collect();
    args.extend(["--format".to_string(), "json".to_string()]);
    if !view
        .iter()
        .any(|a| ["--drain", "--admit", "--upgrade"].contains(a))
    {
        // The matrix: every pair.
        args.push("--pairs".to_string());
        summary_agrees_with_pairs(&args, facts);
    }
    args.extend(facts.iter().map(|f| s(f)));
    let out = run_fleet(&args);
    out.status(status);
    json(&out)
}

/// The summary (`fleet --format json`) says what the pairs (`--pairs`, of the same `args`
/// otherwise, `facts` last) say: each host's counts, each guest's hosts that run it, and per kind
/// of host that cannot, the hosts that cannot and their reasons (as the first such host's).
#[track_caller]
fn summary_agrees_with_pairs(args: &[String], facts: &[PathBuf]) {
    let mut summary_args: Vec<String> = args.iter().filter(|a| *a != "--pairs").cloned().collect();
    summary_args.extend(facts.iter().map(|f| s(f)));
    let mut pair_args = args.to_vec();
    pair_args.extend(facts.iter().map(|f| s(f)));
    let (sum, pairs) = (run_fleet(&summary_args), run_fleet(&pair_args));
    assert_eq!(sum.code, pairs.code, "{}", sum.stderr);
    assert_eq!(sum.stderr, pairs.stderr);
    let (sum, got) = (json(&sum), pair_reasons(&json(&pairs)));
    assert_eq!(sum["schema_version"], 2);
    let keys: Vec<&str> = sum
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "guests",
            "hosts",
            "incomplete",
            "kinds",
            "pairs",
            "schema_version"
        ]
    );
    let kinds: BTreeMap<u64, Vec<String>> = sum["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            let hosts = k["hosts"].as_array().unwrap();
            (
                k["kind"].as_u64().unwrap(),
                hosts
                    .iter()
                    .map(|h| h.as_str().unwrap().to_string())
                    .collect(),
            )
        })
        .collect();
    // Each pair's verdict from its reasons: none, runs; `not-compared` alone, not compared.
    let verdict = |g: &str, h: &str| {
        let r = &got[&(g.to_string(), h.to_string())];
        if r.is_empty() {
            "runs"
        } else if r.iter().all(|(code, _)| code == "not-compared") {
            "not-compared"
        } else {
            "cannot"
        }
    };
    let runs = |g: &str, h: &str| verdict(g, h) == "runs";
    let guests = field_of_each(&sum["guests"], "guest");
    let mut totals = BTreeMap::new();
    for h in sum["hosts"].as_array().unwrap() {
        let name = h["host"].as_str().unwrap();
        let count = |v: &str| guests.iter().filter(|g| verdict(g, name) == v).count();
        assert_eq!(h["runs"].as_u64().unwrap() as usize, count("runs"), "{h}");
        assert_eq!(
            h["cannot"].as_u64().unwrap() as usize,
            count("cannot"),
            "{h}"
        );
        assert_eq!(
            h["not_compared"].as_u64().unwrap() as usize,
            count("not-compared"),
            "{h}"
        );
        for v in ["runs", "cannot", "not-compared"] {
            *totals.entry(v).or_insert(0usize) += count(v);
        }
    }
    assert_eq!(
        sum["pairs"]["runs"].as_u64().unwrap() as usize,
        totals["runs"]
    );
    assert_eq!(
        sum["pairs"]["cannot"].as_u64().unwrap() as usize,
        totals["cannot"]
    );
    assert_eq!(
        sum["pairs"]["not_compared"].as_u64().unwrap() as usize,
        totals["not-compared"]
    );
    let all_hosts: Vec<&String> = kinds.values().flatten().collect();
    for g in sum["guests"].as_array().unwrap() {
        let name = g["guest"].as_str().unwrap();
        let n = all_hosts.iter().filter(|h| runs(name, h)).count();
        assert_eq!(g["runs_on"].as_u64().unwrap() as usize, n, "{g}");
        let nc = all_hosts
            .iter()
            .filter(|h| verdict(name, h) == "not-compared")
            .count();
        assert_eq!(g["not_compared_on"].as_u64().unwrap() as usize, nc, "{g}");
        let mut covered = 0;
        for (key, v) in [("cannot", "cannot"), ("not_compared", "not-compared")] {
            for c in g[key].as_array().unwrap() {
                let members = &kinds[&c["kind"].as_u64().unwrap()];
                let except: Vec<&str> = c["except"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|e| e.as_str().unwrap())
                    .collect();
                let these: Vec<&String> = members
                    .iter()
                    .filter(|h| !except.contains(&h.as_str()))
                    .collect();
                assert!(these.iter().all(|h| verdict(name, h) == v), "{g}");
                assert!(except.iter().all(|h| verdict(name, h) != v), "{g}");
                assert_eq!(c["hosts"].as_u64().unwrap() as usize, these.len(), "{g}");
                let first = &got[&(name.to_string(), these[0].clone())];
                assert_eq!(&reasons_of(&c["reasons"]), first, "{g}");
                covered += these.len();
            }
        }
        assert_eq!(covered + n, all_hosts.len(), "{g}");
    }
}

/// A pair whose CPU comparison needs a fact the facts lack (a host known by its capabilities
/// alone, a TCG guest whose custom CPU libvirt compares with TCG's host-model at start) is
/// `not-compared`: neither runs nor cannot, in every view, each naming the fact; exit 4 when
/// nothing cannot run. The same guest `check='none'` (libvirt compares nothing) runs there.
#[test]
fn a_pair_not_compared_is_neither_runs_nor_cannot() {
    let t = Scratch::new("fleet-not-compared");
    let dir = hosts_dir(&t, "nc", &["bookworm"]);
    std::fs::copy(
        crate::harness::root().join("tests/data/generations/bookworm/capabilities.xml"),
        dir.join("plain.xml"),
    )
    .unwrap();
    let host = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .find(|f| f != "plain.xml")
        .unwrap()
        .trim_end_matches(".xml")
        .to_string();
    let checked = guest(
        "checked",
        "pc-q35-7.2",
        &custom("Nehalem", "").replace("match='exact'", "match='exact' check='partial'"),
    );
    let unchecked = guest(
        "unchecked",
        "pc-q35-7.2",
        &custom("Nehalem", "").replace("match='exact'", "match='exact' check='none'"),
    );
    t.write(
        "nc/guests.xml",
        format!(
            "<guestFacts host='{host}'><guest name='checked' state='shutoff'>{checked}</guest><guest name='unchecked' state='shutoff'>{unchecked}</guest></guestFacts>"
        ),
    );
    let pairs = fleet_json(&[], std::slice::from_ref(&dir), 4);
    let verdicts: BTreeMap<(String, String), String> = pairs["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let f = |k: &str| p[k].as_str().unwrap().to_string();
            ((f("guest"), f("host")), f("verdict"))
        })
        .collect();
    let v = |g: &str, h: &str| verdicts[&(g.to_string(), h.to_string())].as_str();
    assert_eq!(v("checked", "plain"), "not-compared", "{pairs}");
    assert_eq!(v("checked", &host), "runs", "{pairs}");
    assert_eq!(v("unchecked", "plain"), "runs", "{pairs}");
    let reason = &pairs["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["guest"] == "checked" && p["host"] == "plain")
        .unwrap()["reasons"][0];
    assert_eq!(reason["code"], "not-compared");
    assert!(
        reason["message"]
            .as_str()
            .unwrap()
            .contains("host-model CPU is unknown"),
        "{reason}"
    );
    let mut args: Vec<String> = vec![s(&dir)];
    let text = run_fleet(&args);
    text.status(4);
    assert!(
        text.stdout
            .contains("3 pairs run, 0 cannot, 1 not compared"),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains("checked (shutoff, on "),
        "{}",
        text.stdout
    );
    assert!(text.stdout.contains("not compared on 1"), "{}", text.stdout);
    assert!(text.stderr.contains("1 not compared"), "{}", text.stderr);
    args.splice(0..0, ["--format".to_string(), "prometheus".to_string()]);
    let prom = run_fleet(&args);
    prom.status(4);
    assert!(
        prom.stdout
            .contains("virt_cpu_policy_fleet_pairs{verdict=\"not-compared\"} 1"),
        "{}",
        prom.stdout
    );
    let drain = fleet_json(&["--drain", &host], std::slice::from_ref(&dir), 4);
    let checked = drain["guests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["guest"] == "checked")
        .unwrap();
    assert_eq!(checked["stuck"], false, "{drain}");
    assert_eq!(checked["not_compared"], true, "{drain}");
}

/// A guest (name, machine type, `<cpu>`) and the generations that refuse it, each with the code.
type Case = (
    &'static str,
    &'static str,
    String,
    &'static [(&'static str, &'static str)],
);

/// Every stopped guest × generation: `runs` exactly where the generation's libvirt defined and
/// started it (docs/generations.md, "What define refuses vs what only start refuses"), and
/// each `cannot` with the code of libvirt's refusal.
#[test]
fn each_generation_is_judged_with_its_own_facts() {
    let t = Scratch::new("fleet-gens");
    let hosts = hosts_dir(&t, "hosts", &GENERATIONS);
    // (guest, machine, cpu, the generations that refuse it and the code).
    let cases: [Case; 12] = [
        (
            "maximum",
            "pc-q35-5.2",
            "<cpu mode='maximum'/>".into(),
            &[("bullseye", "cpu-mode-unsupported")],
        ),
        (
            "host-model",
            "pc-q35-5.2",
            "<cpu mode='host-model'/>".into(),
            &[],
        ),
        (
            "passthrough",
            "pc-q35-5.2",
            "<cpu mode='host-passthrough'/>".into(),
            &[
                ("bullseye", "cpu-mode-unsupported"),
                ("bookworm", "cpu-mode-unsupported"),
                ("trixie", "cpu-mode-unsupported"),
                ("forky", "cpu-mode-unsupported"),
            ],
        ),
        (
            "old-i440fx",
            "pc-i440fx-2.11",
            custom("Nehalem", ""),
            &[("forky", "machine-unsupported")],
        ),
        (
            "q35-5.1",
            "pc-q35-5.1",
            String::new(),
            &[("forky", "machine-unsupported")],
        ),
        ("q35-5.2", "pc-q35-5.2", String::new(), &[]),
        (
            "newest-q35",
            "pc-q35-11.1",
            String::new(),
            &[
                ("bullseye", "machine-unsupported"),
                ("bookworm", "machine-unsupported"),
                ("trixie", "machine-unsupported"),
            ],
        ),
        (
            "haswell-v2",
            "pc-q35-5.2",
            custom("Haswell-v2", ""),
            &[
                ("bullseye", "cpu-model-unknown"),
                ("bookworm", "cpu-model-unknown"),
            ],
        ),
        (
            "epyc-genoa",
            "pc-q35-5.2",
            custom("EPYC-Genoa", ""),
            &[
                ("bullseye", "cpu-model-unknown"),
                ("bookworm", "cpu-model-unknown"),
            ],
        ),
        (
            "epyc-turin",
            "pc-q35-5.2",
            custom("EPYC-Turin", ""),
            &[
                ("bullseye", "cpu-model-unknown"),
                ("bookworm", "cpu-model-unknown"),
                ("trixie", "cpu-model-unknown"),
            ],
        ),
        (
            "avx10",
            "pc-q35-5.2",
            custom("qemu64", "<feature policy='require' name='avx10'/>"),
            &[
                ("bullseye", "cpu-feature-unknown"),
                ("bookworm", "cpu-feature-unknown"),
            ],
        ),
        (
            "haswell-notsx",
            "pc-q35-5.2",
            custom("Haswell-noTSX", ""),
            &[],
        ),
    ];
    std::fs::create_dir_all(t.path("guests")).unwrap();
    for (name, machine, cpu, _) in &cases {
        t.write(&format!("guests/{name}.xml"), guest(name, machine, cpu));
    }
    let v = fleet_json(&[], &[hosts.clone(), t.path("guests")], 1);
    assert_eq!(v["schema_version"], 1);
    let mut got: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for p in v["pairs"].as_array().unwrap() {
        let codes = field_of_each(&p["reasons"], "code");
        assert_eq!(
            p["verdict"].as_str().unwrap(),
            if codes.is_empty() { "runs" } else { "cannot" }
        );
        got.insert(
            (
                p["guest"].as_str().unwrap().to_string(),
                p["host"].as_str().unwrap().to_string(),
            ),
            codes,
        );
    }
    assert_eq!(got.len(), cases.len() * GENERATIONS.len());
    for (name, _, _, refused) in &cases {
        for g in GENERATIONS {
            let codes = &got[&(name.to_string(), g.to_string())];
            match refused.iter().find(|(h, _)| *h == g) {
                Some((_, code)) => assert!(
                    codes.iter().any(|c| c == code),
                    "{name} on {g}: wanted {code}, got {codes:?}"
                ),
                None => assert!(codes.is_empty(), "{name} on {g}: runs there, got {codes:?}"),
            }
        }
    }
    // The text matrix: a line per host with its counts.
    let out = run_fleet(&[s(&hosts), s(&t.path("guests"))]);
    out.status(1);
    let forky = out
        .stdout
        .lines()
        .find(|l| l.starts_with("forky "))
        .unwrap();
    let cells: Vec<&str> = forky.split_whitespace().collect();
    assert_eq!(
        cells,
        ["forky", "12.8.0", "0", "9", "3", "0"],
        "{}",
        out.stdout
    );
    assert!(out.stderr.contains("pair(s) cannot run"), "{}", out.stderr);
}

/// A running guest's facts (its live CPU, as `facts --guests` publishes it) on bookworm: TCG
/// 7.2's host-model features, which QEMU 5.2's TCG lacks (avx2) and 10.0's and 11.1's lack
/// (pcommit): it cannot leave. A stopped guest of the same CPU can (QEMU drops what TCG lacks).
#[test]
fn drain_says_where_each_guest_can_go_and_exits_1_when_one_cannot_leave() {
    let t = Scratch::new("fleet-drain");
    let hosts = hosts_dir(&t, "hosts", &GENERATIONS);
    let live = "<cpu mode='custom' match='exact' check='partial'><model fallback='forbid'>EPYC</model><vendor>AMD</vendor>\
                <feature policy='require' name='pcommit'/><feature policy='require' name='avx2'/></cpu>";
    let domain = |name: &str, cpu: &str| {
        let d = guest(name, "pc-q35-5.2", cpu);
        d.replace("<name>", "\n<name>")
    };
    // Stored, not running: libvirt's default check for a TCG custom CPU is 'none'.
    let stored = live.replace(" check='partial'", "");
    let doc = format!(
        "<guestFacts host='bookworm'>\n<guest name='live' state='running' persistent='yes'>\n{}\n</guest>\n\
         <guest name='stopped' state='shutoff' persistent='yes'>\n{}\n</guest>\n\
         <guest name='plain' state='running' persistent='no'>\n{}\n</guest>\n</guestFacts>\n",
        domain("live", live),
        domain("stopped", &stored),
        guest("plain", "pc-q35-5.2", "")
    );
    t.write("bookworm.guests.xml", doc);
    let facts = [s(&hosts), s(&t.path("bookworm.guests.xml"))];
    let mut args = vec![
        "--drain".to_string(),
        "bookworm".into(),
        "--format".into(),
        "json".into(),
    ];
    args.extend(facts.iter().cloned());
    let out = run_fleet(&args);
    out.status(1);
    assert!(
        out.stderr
            .contains("1 guest(s) cannot leave bookworm: live"),
        "{}",
        out.stderr
    );
    let v = json(&out);
    assert_eq!(v["host"], "bookworm");
    let by_name: BTreeMap<&str, &Value> = v["guests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (g["guest"].as_str().unwrap(), g))
        .collect();
    assert_eq!(by_name["live"]["stuck"], true);
    assert_eq!(by_name["live"]["state"], "running");
    let refused: BTreeMap<&str, Vec<&str>> = by_name["live"]["refused"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let codes = r["reasons"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["code"].as_str().unwrap())
                .collect();
            (r["host"].as_str().unwrap(), codes)
        })
        .collect();
    for g in ["bullseye", "trixie", "forky"] {
        assert_eq!(refused[g], ["cpu-incompatible"], "{g}: {refused:?}");
    }
    let missing = |host: &str| -> String {
        by_name["live"]["refused"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["host"] == host)
            .unwrap()["reasons"][0]["message"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(
        missing("bullseye").contains("avx2"),
        "{}",
        missing("bullseye")
    );
    assert!(missing("forky").contains("pcommit"), "{}", missing("forky"));
    assert_eq!(by_name["stopped"]["stuck"], false);
    assert_eq!(
        by_name["plain"]["destinations"],
        serde_json::json!(["bullseye", "forky", "trixie"])
    );
    // Text: the same, for people; a host without guests drains at once (exit 0).
    let mut args = vec!["--drain".to_string(), "bookworm".into()];
    args.extend(facts.iter().cloned());
    let out = run_fleet(&args);
    out.status(1);
    assert!(
        out.stdout
            .starts_with("drain bookworm: 3 guests, 2 can leave, 1 cannot\n"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("  live (live migration): CANNOT LEAVE\n"),
        "{}",
        out.stdout
    );
    // forky published no guest facts: its guests are not known, which is no "0 guests, safe"
    // (exit 4, the report saying so).
    let mut args = vec!["--drain".to_string(), "forky".into()];
    args.extend(facts.iter().cloned());
    let out = run_fleet(&args);
    out.status(4);
    assert!(
        out.stdout
            .starts_with("drain forky: its guests are not known: no guest facts name forky\n"),
        "{}",
        out.stdout
    );
    // Prometheus: the guests that cannot leave each host, the guests each cannot take.
    let mut args = vec!["--format".to_string(), "prometheus".into()];
    args.extend(facts.iter().cloned());
    let out = run_fleet(&args);
    let series: BTreeMap<&str, &str> = out
        .stdout
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .collect();
    assert_eq!(
        series["virt_cpu_policy_fleet_undrainable_guests{host=\"bookworm\"}"], "1",
        "{}",
        out.stdout
    );
    assert_eq!(
        series["virt_cpu_policy_fleet_undrainable_guests{host=\"forky\"}"],
        "0"
    );
    assert_eq!(
        series["virt_cpu_policy_fleet_guests{host=\"bookworm\"}"],
        "3"
    );
    assert_eq!(
        series["virt_cpu_policy_fleet_untakeable_guests{host=\"forky\"}"],
        "1"
    );
    assert_eq!(
        series["virt_cpu_policy_fleet_untakeable_guests{host=\"bookworm\"}"],
        "0"
    );
    // An unknown host is bad input.
    let mut args = vec!["--drain".to_string(), "nohost".into()];
    args.extend(facts.iter().cloned());
    let out = run_fleet(&args);
    out.status(2);
    assert!(out.stdout.is_empty());
    assert!(
        out.stderr.contains("no host named 'nohost'"),
        "{}",
        out.stderr
    );
}

/// Admitting forky to bullseye, bookworm and trixie: every guest judged on it, the cluster's
/// CPU judged on it, the baseline before and after.
#[test]
fn admit_judges_the_new_host_and_the_clusters_cpu() {
    let t = Scratch::new("fleet-admit");
    let hosts = hosts_dir(&t, "hosts", &["bullseye", "bookworm", "trixie"]);
    let new = host_facts(&t, "new", "forky");
    std::fs::create_dir_all(t.path("guests")).unwrap();
    t.write("guests/old.xml", guest("old", "pc-i440fx-2.11", ""));
    t.write("guests/ok.xml", guest("ok", "pc-q35-5.2", ""));
    let v = fleet_json(&["--admit", &s(&new)], &[hosts, t.path("guests")], 1);
    assert_eq!(v["host"], "forky");
    let verdicts: BTreeMap<&str, &str> = v["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["guest"].as_str().unwrap(), p["verdict"].as_str().unwrap()))
        .collect();
    assert_eq!(verdicts["old"], "cannot");
    assert_eq!(verdicts["ok"], "runs");
    let before = &v["cluster"]["before"];
    assert!(before["model"].is_string(), "{v:#}");
    // A directory's files are read in name order.
    assert_eq!(
        before["hosts"],
        serde_json::json!(["bookworm", "bullseye", "trixie"])
    );
    assert_eq!(
        v["cluster"]["after"]["hosts"],
        serde_json::json!(["bookworm", "bullseye", "trixie", "forky"])
    );
    let model = clusters_cpu(&v);
    assert_eq!(model["verdict"], "runs", "{model:#}");
}

/// The admit view's judgement of the cluster's CPU (its first `cluster_models` entry).
#[track_caller]
fn clusters_cpu(v: &Value) -> &Value {
    let model = &v["cluster_models"][0];
    let what = model["what"].as_str().unwrap_or_default();
    assert!(what.starts_with("the cluster's CPU"), "{v:#}");
    model
}

/// Upgrading bookworm to forky: a machine type QEMU 11.1 removed cannot run there, and the
/// policy cannot change a machine type.
#[test]
fn upgrade_judges_a_hosts_guests_on_the_next_generation() {
    let t = Scratch::new("fleet-upgrade");
    let hosts = hosts_dir(&t, "hosts", &["bookworm"]);
    let next = host_facts(&t, "next", "forky");
    let g = t.write(
        "g.xml",
        guest_facts(
            "bookworm",
            &[
                ("old", "shutoff", guest("old", "pc-i440fx-2.11", "")),
                ("ok", "shutoff", guest("ok", "pc-q35-7.2", "")),
            ],
        ),
    );
    let to = ["--upgrade", "bookworm", "--to", &s(&next)];
    let v = fleet_json(&to, &[hosts, g], 1);
    assert_eq!(v["to"], "bookworm (upgraded)");
    let g = v["guests"].as_array().unwrap();
    assert_eq!(g[0]["guest"], "old");
    assert_eq!(g[0]["verdict"], "cannot");
    assert_eq!(g[0]["reasons"][0]["code"], "machine-unsupported");
    assert_eq!(g[1]["verdict"], "runs");
    assert!(g[1]["fix"].is_null());

    // The same upgrade to libvirt 12.8 driving a QEMU before 7.2 (src/hazards.toml,
    // libvirt-12.4-qemu-7.2: libvirt 12.4 needs QEMU 7.2): no guest starts there.
    let text = std::fs::read_to_string(&next).unwrap();
    let at = text.find(" qemu='").expect("a qemu release");
    let end = at + 7 + text[at + 7..].find('\'').unwrap() + 1;
    let old_qemu = t.write(
        "next/forky-old-qemu.xml",
        format!("{} qemu='7.1.0'{}", &text[..at], &text[end..]),
    );
    let to = ["--upgrade", "bookworm", "--to", &s(&old_qemu)];
    let v = fleet_json(
        &to,
        &[hosts_dir(&t, "hosts", &["bookworm"]), t.path("g.xml")],
        1,
    );
    let g = v["guests"].as_array().unwrap();
    assert_eq!(g[1]["guest"], "ok");
    assert_eq!(g[1]["verdict"], "cannot", "{}", g[1]);
    let hazard = g[1]["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["code"] == "stack-hazard")
        .unwrap_or_else(|| panic!("{}", g[1]));
    assert!(
        hazard["message"]
            .as_str()
            .unwrap()
            .contains("libvirt-12.4-qemu-7.2"),
        "{hazard}"
    );
}

/// `facts --guests` reads libvirt's files: the live XML wins, and nothing secret is written.
#[test]
fn facts_guests_publishes_what_the_judge_needs_only() {
    let t = Scratch::new("fleet-facts");
    std::fs::create_dir_all(t.path("etc")).unwrap();
    std::fs::create_dir_all(t.path("run")).unwrap();
    let def = guest("web", "pc-q35-7.2", &custom("Nehalem", ""))
        .replace("<devices>", "<devices><graphics type='spice' passwd='t0psecret'/><disk type='file'><source file='/srv/secret.img'/></disk>");
    t.write("etc/web.xml", &def);
    t.write(
        "run/web.xml",
        format!(
            "<domstatus state='running' pid='1'>{}</domstatus>",
            def.replace("Nehalem", "Westmere")
        ),
    );
    let out = Cmd::new(&["facts", "--guests", "--host", "node-a", "--config-dir"])
        .arg(s(&t.path("etc")))
        .arg("--state-dir")
        .arg(s(&t.path("run")))
        .run();
    out.status(0);
    assert!(
        out.stdout.starts_with(
            "<guestFacts host='node-a'>\n<guest name='web' state='running' persistent='yes'>\n"
        ),
        "{}",
        out.stdout
    );
    // The live CPU (Westmere) is the guest's domain; its definition (Nehalem) follows.
    let (live, definition) = out.stdout.split_once("<definition>").unwrap();
    assert!(
        live.contains("Westmere") && !live.contains("Nehalem"),
        "{}",
        out.stdout
    );
    assert!(definition.contains("Nehalem"), "{}", out.stdout);
    assert!(!out.stdout.contains("t0psecret") && !out.stdout.contains("secret.img"));
    // --out: written as DIR/HOST.guests.xml; an unreadable definition is named, exit 2.
    t.write("etc/broken.xml", "<domain");
    let out = Cmd::new(&["facts", "--guests", "--host", "node-a", "--config-dir"])
        .arg(s(&t.path("etc")))
        .arg("--state-dir")
        .arg(s(&t.path("run")))
        .arg("--out")
        .arg(s(&t.path("pub")))
        .run();
    out.status(2);
    assert!(
        out.stderr.contains("broken.xml: not read"),
        "{}",
        out.stderr
    );
    let written = std::fs::read_to_string(t.path("pub/node-a.guests.xml")).unwrap();
    assert!(written.contains("<guest name='web'"));
}

/// Bad input: a file that is no facts, a directory without hosts, a bad --cpu-map.
#[test]
fn bad_fleet_input_is_exit_2_with_one_message() {
    let t = Scratch::new("fleet-bad");
    let not_facts = t.write("x.xml", "<network/>");
    let guest_only = t.write("g.xml", guest("g", "pc-q35-7.2", ""));
    for (args, needle) in [
        (vec![s(&not_facts)], "<network> is neither host facts"),
        (vec![s(&guest_only)], "no host facts among the files given"),
        (
            vec!["--cpu-map".into(), s(&t.0), s(&guest_only)],
            "not a libvirt cpu_map directory",
        ),
        (vec![s(&t.path("missing.xml"))], "missing.xml"),
    ] {
        let out = Cmd::new(&["fleet"]).args(&args).run();
        out.status(2);
        assert!(out.stdout.is_empty(), "{}", out.stdout);
        assert!(out.stderr.contains(needle), "{needle}: {}", out.stderr);
    }
}

/// Progress is for a terminal only: with stderr a pipe (scripts, CI, these tests) it is what it
/// was, byte for byte, even with the quiet second set to none; on a pseudo-terminal
/// (`script`) the steps are drawn, and stdout is the same.
#[test]
fn progress_is_shown_on_a_terminal_only() {
    let t = Scratch::new("fleet-progress");
    let dir = hosts_dir(&t, "facts", &GENERATIONS);
    t.write(
        "facts/g.xml",
        guest_facts(
            "bullseye",
            &[("g1", "shutoff", guest("g1", "pc-q35-5.2", ""))],
        ),
    );
    let run = |quiet: Option<&str>| {
        let mut c = std::process::Command::new(crate::harness::bin());
        c.arg("fleet").args(cpu_maps()).arg(s(&dir));
        c.env_remove("VIRT_CPU_POLICY_PROGRESS_AFTER_MS");
        if let Some(q) = quiet {
            c.env("VIRT_CPU_POLICY_PROGRESS_AFTER_MS", q);
        }
        c.output().unwrap()
    };
    let (before, now) = (run(None), run(Some("0")));
    assert_eq!(before.stderr, now.stderr);
    assert_eq!(before.stdout, now.stdout);
    let err = String::from_utf8_lossy(&now.stderr);
    assert!(
        !err.contains("reading facts") && !err.contains('\u{1b}'),
        "{err}"
    );
    // On a pseudo-terminal: script(1) runs the command under one, stdout to a file.
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("script(1) not found: the terminal case is not run");
        return;
    }
    let out = t.path("stdout");
    let cmd = format!(
        "{} fleet {} {} >{}",
        crate::harness::bin(),
        cpu_maps().join(" "),
        s(&dir),
        s(&out)
    );
    let tty = std::process::Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .env("VIRT_CPU_POLICY_PROGRESS_AFTER_MS", "0")
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&tty.stdout);
    assert!(shown.contains("reading facts"), "{shown}");
    assert!(shown.contains("judging"), "{shown}");
    assert_eq!(std::fs::read(&out).unwrap(), before.stdout);
}

/// A `--cpu-map HOST=DIR` naming no host of the facts (a typo would judge that host with
/// another cpu_map, in silence) is a warning on stderr; the verdicts stand.
#[test]
fn a_cpu_map_for_no_host_is_a_warning() {
    let out = Cmd::new(&["fleet", "--cpu-map"])
        .arg(format!(
            "nosuch={}",
            s(&generation_facts("bookworm").join("cpu_map"))
        ))
        .arg(s(&generation_facts("bookworm").join("capabilities.xml")))
        .run();
    out.status(0);
    assert!(
        out.stderr.contains(
            "warning: --cpu-map nosuch=...: no host named 'nosuch' among the facts given; its cpu_map is not used"
        ),
        "{}",
        out.stderr
    );
}

/// The `<guestFacts>` of `host`: each guest (name, state, its `<domain>`), persistent.
fn guest_facts(host: &str, guests: &[(&str, &str, String)]) -> String {
    let mut doc = format!("<guestFacts host='{host}'>\n");
    for (name, state, domain) in guests {
        doc.push_str(&format!(
            "<guest name='{name}' state='{state}' persistent='yes'>\n{domain}\n</guest>\n"
        ));
    }
    doc.push_str("</guestFacts>\n");
    doc
}

/// A small diskless KVM guest of `arch` with `cpu` (a whole `<cpu>` element).
fn kvm_guest(name: &str, arch: &str, machine: &str, cpu: &str) -> String {
    guest(name, machine, cpu)
        .replace("type='qemu'", "type='kvm'")
        .replace("arch='x86_64'", &format!("arch='{arch}'"))
        .replace("qemu-system-x86_64", &format!("qemu-system-{arch}"))
}

/// The string `key` of each object of the JSON list `list`.
fn field_of_each(list: &Value, key: &str) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|o| o[key].as_str().unwrap().to_string())
        .collect()
}

/// A JSON list of reasons as (code, message).
fn reasons_of(v: &Value) -> Vec<(String, String)> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["code"].as_str().unwrap().to_string(),
                r["message"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Every pair's reasons from `fleet --pairs --format json`: (guest, host) → [(code, message)].
fn pair_reasons(v: &Value) -> BTreeMap<(String, String), Vec<(String, String)>> {
    v["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let name = |k: &str| p[k].as_str().unwrap().to_string();
            ((name("guest"), name("host")), reasons_of(&p["reasons"]))
        })
        .collect()
}

/// The `passthrough-group` reason of guest `g` on host `h` among `pair_reasons`, if any.
fn group_reason(
    got: &BTreeMap<(String, String), Vec<(String, String)>>,
    g: &str,
    h: &str,
) -> Option<String> {
    got[&(g.to_string(), h.to_string())]
        .iter()
        .find(|(c, _)| c == "passthrough-group")
        .map(|(_, m)| m.clone())
}

/// A host-passthrough guest migrates only inside its group of identical CPUs, judged on real
/// host CPUs (libvirt's CPU test data, each as `virsh capabilities` gives it, with libvirt
/// 12.8's cpu_map): it may go to a second host of the same CPU, not to another Haswell-EP
/// (one feature apart), a Skylake-SP or an AMD EPYC, each sentence naming both hosts and what
/// differs; a stopped one starts anywhere (it takes that host's CPU); a running one of unknown
/// source runs nowhere on a guess.
#[test]
#[cfg_attr(
    not(vcp_shared_corpus),
    ignore = "needs ../shared/corpus beside the checkout"
)]
fn host_passthrough_guests_migrate_only_inside_their_group() {
    let t = Scratch::new("fleet-passthrough");
    std::fs::create_dir_all(t.path("hosts")).unwrap();
    for (host, cpu) in [
        ("e5-2650-v3", "Xeon-E5-2650-v3"),
        ("e5-2650-v3-twin", "Xeon-E5-2650-v3"),
        ("e5-2630-v3", "Xeon-E5-2630-v3"),
        ("gold-6148", "Xeon-Gold-6148"),
        ("epyc-7601", "EPYC-7601-32-Core-ibpb"),
    ] {
        corpus_cpu_capabilities(&t, &format!("hosts/{host}.xml"), cpu);
    }
    let pt = "<cpu mode='host-passthrough' check='none' migratable='on'/>";
    t.write(
        "e5.guests.xml",
        guest_facts(
            "e5-2650-v3",
            &[
                ("pt", "running", kvm_guest("pt", "x86_64", "pc-q35-7.2", pt)),
                (
                    "pt-stopped",
                    "shutoff",
                    kvm_guest("pt-stopped", "x86_64", "pc-q35-7.2", pt),
                ),
            ],
        ),
    );
    // A running guest's status file alone: its host is unknown.
    t.write(
        "lone.xml",
        format!(
            "<domstatus state='running' pid='1'>{}</domstatus>",
            kvm_guest("lone", "x86_64", "pc-q35-7.2", pt)
        ),
    );
    let forky_map = s(&generation_facts("forky").join("cpu_map"));
    let out = Cmd::new(&[
        "fleet",
        "--format",
        "json",
        "--pairs",
        "--cpu-map",
        &forky_map,
    ])
    .arg(s(&t.path("hosts")))
    .arg(s(&t.path("e5.guests.xml")))
    .arg(s(&t.path("lone.xml")))
    .run();
    out.status(1);
    let got = pair_reasons(&json(&out));
    let group = |g: &str, h: &str| group_reason(&got, g, h);
    assert_eq!(group("pt", "e5-2650-v3"), None);
    assert_eq!(group("pt", "e5-2650-v3-twin"), None);
    assert!(got[&("pt".into(), "e5-2650-v3-twin".into())].is_empty());
    let m = group("pt", "e5-2630-v3").unwrap();
    assert!(
        m.contains("e5-2650-v3 and e5-2630-v3 differ: features only on e5-2650-v3: zero-fcs-fds"),
        "{m}"
    );
    let m = group("pt", "gold-6148").unwrap();
    assert!(
        m.contains("signature family 6 model 63 stepping 2 vs family 6 model 85 stepping 4")
            && m.contains("features only on gold-6148: ")
            && m.contains("avx512f"),
        "{m}"
    );
    let m = group("pt", "epyc-7601").unwrap();
    assert!(m.contains("vendor Intel vs AMD"), "{m}");
    for h in ["e5-2650-v3", "e5-2630-v3", "gold-6148", "epyc-7601"] {
        assert_eq!(group("pt-stopped", h), None, "a stopped guest on {h}");
        let m = group("lone", h).unwrap();
        assert!(m.contains("its source host is unknown"), "{m}");
    }
}

/// `trixie.guests.xml` in `t`: guest facts of trixie running `pt`, a host-passthrough KVM guest.
fn passthrough_guest_on_trixie(t: &Scratch) -> PathBuf {
    let pt = "<cpu mode='host-passthrough' check='none' migratable='on'/>";
    t.write(
        "trixie.guests.xml",
        guest_facts(
            "trixie",
            &[("pt", "running", kvm_guest("pt", "x86_64", "pc-q35-5.2", pt))],
        ),
    )
}

/// The four generations share one physical CPU, which their libvirts name differently
/// (`Broadwell-noTSX-IBRS` on 7.0 and 9.0, `Icelake-Server-v2` on 11.3 and 12.8, each listing
/// the features its cpu_map knows): one migration group, so a running host-passthrough KVM guest
/// may go to each of them (as real live migrations between them do: tests/fleet/migrate).
#[test]
fn one_cpu_named_by_four_libvirts_is_one_group() {
    let t = Scratch::new("fleet-passthrough-gens");
    let hosts = hosts_dir(&t, "hosts", &GENERATIONS);
    let guests = passthrough_guest_on_trixie(&t);
    let v = fleet_json(&[], &[hosts, guests], 0);
    for ((g, h), reasons) in pair_reasons(&v) {
        assert!(reasons.is_empty(), "{g} on {h}: {reasons:?}");
    }
}

/// The same CPU read through one cpu_map for hosts of two libvirts (forky's 12.8 map for the
/// facts of bookworm, 9.0, and trixie, 11.3): features bookworm's libvirt could not name count
/// as missing there, and the sentence says the hosts' signature and microcode agree, names the
/// cpu_map each was read through and asks for `--cpu-map HOST=DIR`; with each host's own
/// cpu_map they are one group (above). A real difference between hosts of one libvirt read
/// through one cpu_map (a feature dropped from a copy of trixie's facts) says nothing of
/// cpu_maps.
#[test]
fn hosts_that_differ_only_through_cpu_maps_are_told_so() {
    let t = Scratch::new("fleet-passthrough-maps");
    let hosts = hosts_dir(&t, "hosts", &["bookworm", "trixie"]);
    let guests = passthrough_guest_on_trixie(&t);
    let forky_map = s(&generation_facts("forky").join("cpu_map"));
    let group = |hosts: &PathBuf, maps: &[&str]| {
        let mut args = vec!["fleet".to_string()];
        for m in maps {
            args.extend(["--cpu-map".to_string(), m.to_string()]);
        }
        let out = Cmd::new(&args)
            .args(&["--format", "json", "--pairs"])
            .arg(s(hosts))
            .arg(s(&guests))
            .run();
        pair_reasons(&json(&out))
    };
    let got = group(&hosts, &[&forky_map]);
    let reasons = &got[&("pt".to_string(), "bookworm".to_string())];
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    let (code, m) = &reasons[0];
    assert_eq!(code, "passthrough-group");
    assert!(
        m.contains("trixie and bookworm differ: features only on trixie: bhi-ctrl")
            && m.contains("their arch, vendor, signature (family 6 model 167 stepping 8) and microcode (1) are the same")
            && m.contains(&format!("trixie's facts (libvirt 11.3.0) through {forky_map}"))
            && m.contains(&format!("bookworm's facts (libvirt 9.0.0) through {forky_map}"))
            && m.contains("(--cpu-map trixie=DIR --cpu-map bookworm=DIR"),
        "{m}"
    );
    // Each host's own cpu_map: one group, nothing said.
    let own = [
        format!(
            "bookworm={}",
            s(&generation_facts("bookworm").join("cpu_map"))
        ),
        format!("trixie={}", s(&generation_facts("trixie").join("cpu_map"))),
    ];
    let got = group(&hosts, &[&own[0], &own[1]]);
    assert!(
        got[&("pt".to_string(), "bookworm".to_string())].is_empty(),
        "{got:?}"
    );
    // Two hosts of one libvirt read through its cpu_map, one without a feature: a difference of
    // the CPUs, not of cpu_maps.
    let trixie = std::fs::read_to_string(hosts.join("trixie.xml")).unwrap();
    let twin = trixie
        .replacen("name='trixie'", "name='trixie-twin'", 1)
        .replacen("<feature name='avx512-fp16'/>", "", 1);
    assert_ne!(
        twin,
        trixie.replacen("name='trixie'", "name='trixie-twin'", 1)
    );
    let only = t.path("trixies");
    std::fs::create_dir_all(&only).unwrap();
    std::fs::write(only.join("trixie.xml"), &trixie).unwrap();
    std::fs::write(only.join("trixie-twin.xml"), twin).unwrap();
    let got = group(&only, &[&own[1].replacen("trixie=", "", 1)]);
    let (code, m) = &got[&("pt".to_string(), "trixie-twin".to_string())][0];
    assert_eq!(code, "passthrough-group");
    assert!(
        m.contains("trixie and trixie-twin differ: features only on trixie: avx512-fp16")
            && !m.contains("cpu_map"),
        "{m}"
    );
}

/// `file` in `t`: a `virsh capabilities` document whose host CPU is libvirt's CPU test data
/// `x86_64-cpuid-{cpu}-host.xml` (a host known by its physical CPU only).
fn corpus_cpu_capabilities(t: &Scratch, file: &str, cpu: &str) -> PathBuf {
    let data = crate::harness::shared_corpus().join("libvirt-cputestdata");
    let body = body(&data.join(format!("x86_64-cpuid-{cpu}-host.xml")));
    t.write(
        file,
        format!("<capabilities><host>{body}</host></capabilities>\n"),
    )
}

/// The XML of file `path` without its `<?xml ...?>` declaration.
fn body(path: &std::path::Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    match text.trim_start().strip_prefix("<?xml") {
        Some(rest) => rest.split_once("?>").unwrap().1.trim().to_string(),
        None => text.trim().to_string(),
    }
}

/// aarch64 hosts and guests in one fleet with an x86 host, on real facts: two hosts of the
/// Neoverse-N1 KVM host of virt-manager's test data (its capabilities and domcapabilities),
/// one of libvirt's QEMU 11.0 `virt` domcapabilities only (no host CPU), and bookworm (libvirt
/// 9.0, x86). `host-model` is not offered to aarch64 KVM guests (libvirt: "CPU mode
/// 'host-model' for aarch64 kvm domain on aarch64 host is not supported by hypervisor"); a
/// running host-passthrough guest goes only to the host of the same CPU, never on a guess to a
/// host whose CPU its facts do not give; no guest runs on a host of another arch, for that one
/// reason.
#[test]
#[cfg_attr(
    not(vcp_shared_corpus),
    ignore = "needs ../shared/corpus beside the checkout"
)]
fn aarch64_hosts_and_guests_in_the_fleet() {
    let t = Scratch::new("fleet-aarch64");
    let c = crate::harness::shared_corpus();
    let caps = body(&c.join("virt-manager/capabilities/kvm-aarch64.xml"));
    let domcaps = body(&c.join("virt-manager/capabilities/kvm-aarch64-domcaps.xml"));
    std::fs::create_dir_all(t.path("hosts")).unwrap();
    for n in ["arm-1", "arm-2"] {
        t.write(
            &format!("hosts/{n}.xml"),
            format!("<hostFacts name='{n}' libvirt='10.0.0'>\n{caps}\n{domcaps}\n</hostFacts>\n"),
        );
    }
    let virt = body(&c.join("libvirt-domaincapsdata/qemu_11.0.0-virt.aarch64.xml"));
    t.write(
        "hosts/arm-3.xml",
        format!("<hostFacts name='arm-3' libvirt='11.0.0'>\n{virt}\n</hostFacts>\n"),
    );
    let hosts = hosts_dir(&t, "hosts", &["bookworm"]);
    let arm = |name: &str, cpu: &str| kvm_guest(name, "aarch64", "virt-8.2", cpu);
    t.write(
        "arm-1.guests.xml",
        guest_facts(
            "arm-1",
            &[
                (
                    "a-pt",
                    "running",
                    arm("a-pt", "<cpu mode='host-passthrough' check='none'/>"),
                ),
                (
                    "a-hm",
                    "shutoff",
                    arm("a-hm", "<cpu mode='host-model' check='partial'/>"),
                ),
                (
                    "a-max",
                    "running",
                    arm("a-max", "<cpu mode='maximum' check='none'/>"),
                ),
            ],
        ),
    );
    let x86 = |name: &str, cpu: &str| kvm_guest(name, "x86_64", "pc-q35-7.2", cpu);
    t.write(
        "bookworm.guests.xml",
        guest_facts(
            "bookworm",
            &[
                (
                    "x-pt",
                    "running",
                    x86("x-pt", "<cpu mode='host-passthrough' check='none'/>"),
                ),
                (
                    "x-hm",
                    "running",
                    x86("x-hm", "<cpu mode='host-model' check='partial'/>"),
                ),
            ],
        ),
    );
    let facts = [
        hosts,
        t.path("arm-1.guests.xml"),
        t.path("bookworm.guests.xml"),
    ];
    let got = pair_reasons(&fleet_json(&[], &facts, 1));
    let codes = |g: &str, h: &str| -> Vec<String> {
        got[&(g.to_string(), h.to_string())]
            .iter()
            .map(|(c, _)| c.clone())
            .collect()
    };
    let message = |g: &str, h: &str| got[&(g.to_string(), h.to_string())][0].1.clone();
    for h in ["arm-1", "arm-2", "arm-3"] {
        assert_eq!(codes("a-hm", h), ["cpu-mode-unsupported"], "a-hm on {h}");
        assert!(message("a-hm", h).contains("CPU mode 'host-model' for aarch64 kvm domain"));
        // `maximum` under KVM is host-passthrough (libvirt's formatdomain): its group too.
        let want: &[&str] = if h == "arm-3" {
            &["passthrough-group"]
        } else {
            &[]
        };
        assert_eq!(codes("a-max", h), want, "a-max on {h}");
        for g in ["x-pt", "x-hm"] {
            assert_eq!(codes(g, h), ["arch-unsupported"], "{g} on {h}");
        }
    }
    assert!(
        message("x-hm", "arm-1")
            .contains("could not find capabilities for arch=x86_64 domaintype=kvm"),
        "{}",
        message("x-hm", "arm-1")
    );
    assert!(message("x-hm", "arm-3").contains("its domcapabilities offer aarch64 kvm"));
    for g in ["a-pt", "a-hm", "a-max"] {
        assert_eq!(
            codes(g, "bookworm"),
            ["arch-unsupported"],
            "{g} on bookworm"
        );
    }
    // host-passthrough on Arm: the same Neoverse-N1 is one group; a host whose CPU the facts
    // do not give is not joined on a guess.
    assert!(
        codes("a-pt", "arm-2").is_empty(),
        "{:?}",
        codes("a-pt", "arm-2")
    );
    assert_eq!(codes("a-pt", "arm-3"), ["passthrough-group"]);
    assert!(
        message("a-pt", "arm-3").contains("the CPU of arm-3 is not known"),
        "{}",
        message("a-pt", "arm-3")
    );
    // Drain arm-1: the host-passthrough guest and the maximum one (KVM: host-passthrough) to
    // arm-2 only; the host-model one runs nowhere (exit 1).
    let v = fleet_json(&["--drain", "arm-1"], &facts, 1);
    let dest: BTreeMap<&str, &Value> = v["guests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (g["guest"].as_str().unwrap(), &g["destinations"]))
        .collect();
    assert_eq!(dest["a-pt"], &serde_json::json!(["arm-2"]));
    assert_eq!(dest["a-max"], &serde_json::json!(["arm-2"]));
    assert!(
        message("a-max", "arm-3")
            .starts_with("a running maximum (under KVM, host-passthrough) guest"),
        "{}",
        message("a-max", "arm-3")
    );
    assert_eq!(dest["a-hm"], &serde_json::json!([]));
}

/// A host known only by `virsh capabilities` (no domcapabilities: no host-model CPU) is judged
/// against its physical CPU, as libvirt compares a custom CPU at start (the host's own CPU with
/// what QEMU's KVM adds, `virQEMUCapsInitHostCPUModel`'s "full" CPU): a stopped
/// `check='partial'` KVM guest requiring features the EPYC 7601 lacks (`la57`, `gfni`: libvirt
/// refuses its start, "Host CPU does not provide required features: gfni, la57") cannot run
/// there; one requiring a feature its CPUID lists but KVM never gives (`monitor`) passes that
/// comparison and starts (QEMU drops the feature), as a plain `pentium3` runs; `--admit`
/// judges the cluster's CPU on it likewise, and a baseline with it that cannot be computed (its
/// `EPYC-v4` is not in libvirt 9.0's cpu_map) is an error of the view (exit 1, `changes` null),
/// never "CHANGES".
#[test]
#[cfg_attr(
    not(vcp_shared_corpus),
    ignore = "needs ../shared/corpus beside the checkout"
)]
fn a_capabilities_only_host_is_judged_against_its_physical_cpu() {
    let t = Scratch::new("fleet-caps-only");
    let epyc = corpus_cpu_capabilities(&t, "epyc.xml", "EPYC-7601-32-Core-ibpb");
    let bookworm = crate::harness::root().join("tests/data/facts/bookworm.xml");
    std::fs::create_dir_all(t.path("guests")).unwrap();
    let partial = |extra: &str| {
        format!(
            "<cpu mode='custom' match='exact' check='partial'><model>pentium3</model>{extra}</cpu>"
        )
    };
    for (name, extra) in [
        (
            "wide",
            "<feature policy='require' name='la57'/><feature policy='require' name='gfni'/>",
        ),
        ("monitor", "<feature policy='require' name='monitor'/>"),
        ("plain", ""),
    ] {
        t.write(
            &format!("guests/{name}.xml"),
            kvm_guest(name, "x86_64", "pc-q35-7.2", &partial(extra)),
        );
    }
    let trixie_map = s(&generation_facts("trixie").join("cpu_map"));
    let bookworm_map = s(&generation_facts("bookworm").join("cpu_map"));
    let out = Cmd::new(&[
        "fleet",
        "--format",
        "json",
        "--pairs",
        "--cpu-map",
        &trixie_map,
    ])
    .arg(s(&bookworm))
    .arg(s(&epyc))
    .arg(s(&t.path("guests")))
    .run();
    out.status(1);
    let got = pair_reasons(&json(&out));
    let on = |g: &str, h: &str| got[&(g.to_string(), h.to_string())].clone();
    let wide = on("wide", "epyc");
    assert_eq!(wide.len(), 1, "{wide:?}");
    assert_eq!(wide[0].0, "cpu-incompatible");
    assert!(
        wide[0]
            .1
            .contains("Host CPU does not provide required features: gfni, la57")
            && wide[0].1.contains("capabilities host CPU"),
        "{wide:?}"
    );
    assert!(
        on("monitor", "epyc").is_empty(),
        "{:?}",
        on("monitor", "epyc")
    );
    assert!(on("plain", "epyc").is_empty());
    for g in ["wide", "plain"] {
        assert!(on(g, "bookworm").is_empty(), "{g} on bookworm");
    }
    // Nor does bookworm's own CPU (a nested VM's CPUID) list `monitor`.
    assert!(!on("monitor", "bookworm").is_empty());
    // `compare`, the same judge of the same CPUs.
    let cmp = Cmd::new(&["compare", "--host", &s(&epyc), "--cpu-map", &trixie_map])
        .arg(s(&t.path("guests/wide.xml")))
        .run();
    cmp.status(1);
    assert!(
        cmp.stdout
            .contains("Host CPU does not provide required features: gfni, la57"),
        "{}",
        cmp.stdout
    );

    // --admit: the cluster's CPU (bookworm's baseline: la57, gfni...) cannot run on the EPYC.
    let guests = s(&t.path("guests"));
    let admit = |map: &str, format: &str| {
        Cmd::new(&["fleet", "--format", format, "--cpu-map", map, "--admit"])
            .arg(s(&epyc))
            .arg(s(&bookworm))
            .arg(&guests)
            .run()
    };
    let out = admit(&trixie_map, "json");
    out.status(1);
    let v = json(&out);
    let model = clusters_cpu(&v);
    assert_eq!(model["verdict"], "cannot", "{model:#}");
    assert_eq!(model["reasons"][0]["code"], "cpu-incompatible", "{model:#}");
    assert_eq!(v["cluster"]["changes"], true, "{v:#}");
    // With libvirt 9.0's cpu_map the EPYC's own model is unknown: no baseline with it.
    let out = admit(&bookworm_map, "json");
    out.status(1);
    let v = json(&out);
    assert!(v["cluster"]["changes"].is_null(), "{v:#}");
    let e = v["cluster"]["after"]["error"].as_str().unwrap();
    assert!(e.contains("EPYC-v4"), "{e}");
    assert!(out.stderr.contains("cannot be computed"), "{}", out.stderr);
    let out = admit(&bookworm_map, "text");
    out.status(1);
    assert!(
        out.stdout
            .contains("error: the cluster's CPU with epyc cannot be computed")
            && !out.stdout.contains("CHANGES"),
        "{}",
        out.stdout
    );
}

/// The migration group of running host-passthrough guests, whatever the order of the facts
/// and whatever their source: guest facts given before their host's facts are still on that
/// host (drain lists them, their group is that host's CPU); a host whose CPU lacks one feature
/// (bookworm's capabilities without `sha-ni`) is another group for a guest that keeps the
/// feature, not for one whose `<cpu>` turns it off (guests alike but for that answer apart); a
/// guest whose host has no facts is said so on every host, its host named. Two files naming one
/// host, or a new host named as one of the fleet, are bad input.
#[test]
fn host_passthrough_groups_follow_each_guests_own_source_and_cpu() {
    let t = Scratch::new("fleet-passthrough-sources");
    let hosts = hosts_dir(&t, "hosts", &["bookworm", "trixie"]);
    let bookworm = std::fs::read_to_string(hosts.join("bookworm.xml")).unwrap();
    assert!(bookworm.contains("<feature name='sha-ni'/>"));
    let lacking = bookworm
        .replace("<feature name='sha-ni'/>", "")
        .replace("name='bookworm'", "name='bookworm-no-sha'");
    t.write("hosts/bookworm-no-sha.xml", lacking);
    let pt = "<cpu mode='host-passthrough' check='none' migratable='on'/>";
    let pt_off = "<cpu mode='host-passthrough' check='none' migratable='on'><feature policy='disable' name='sha-ni'/></cpu>";
    let guests = t.write(
        "bookworm.guests.xml",
        guest_facts(
            "bookworm",
            &[
                ("pt", "running", kvm_guest("pt", "x86_64", "pc-q35-5.2", pt)),
                (
                    "pt-sha-off",
                    "running",
                    kvm_guest("pt-sha-off", "x86_64", "pc-q35-5.2", pt_off),
                ),
            ],
        ),
    );
    let gone = t.write(
        "gone.guests.xml",
        guest_facts(
            "gone",
            &[(
                "pt-gone",
                "running",
                kvm_guest("pt-gone", "x86_64", "pc-q35-5.2", pt),
            )],
        ),
    );
    let bookworm_map = format!(
        "bookworm-no-sha={}",
        s(&generation_facts("bookworm").join("cpu_map"))
    );
    // The guests first, then their hosts.
    let facts = [guests.clone(), gone.clone(), hosts.clone()];
    let v = fleet_json(&["--cpu-map", &bookworm_map], &facts, 1);
    let got = pair_reasons(&v);
    let group = |g: &str, h: &str| group_reason(&got, g, h);
    let rule = "a running host-passthrough guest sees its host's CPU as is and migrates only to a host of the same CPU (libvirt: between hosts not identical in hardware and microcode the guest may hang or crash): ";
    for h in ["bookworm", "trixie"] {
        assert_eq!(group("pt", h), None, "pt on {h}");
        assert_eq!(group("pt-sha-off", h), None, "pt-sha-off on {h}");
    }
    assert_eq!(
        group("pt", "bookworm-no-sha").as_deref(),
        Some(format!("{rule}bookworm and bookworm-no-sha differ: features only on bookworm: sha-ni (each host's capabilities host CPU)").as_str())
    );
    assert_eq!(group("pt-sha-off", "bookworm-no-sha"), None);
    for h in ["bookworm", "bookworm-no-sha", "trixie"] {
        assert_eq!(
            group("pt-gone", h).as_deref(),
            Some(format!("{rule}its source host gone has no facts among those given, so whether {h}'s CPU is the same cannot be told").as_str()),
        );
    }
    // Drain bookworm: its guests, read before it; pt only to trixie. The guests of `gone`, a
    // host not among the facts, make the answer incomplete (exit 4, named in `incomplete`).
    let v = fleet_json(
        &["--cpu-map", &bookworm_map, "--drain", "bookworm"],
        &facts,
        4,
    );
    assert_eq!(
        v["incomplete"]["unknown_hosts"],
        serde_json::json!([{"host": "gone", "guests": 1, "ambiguous": []}])
    );
    let leaving: Vec<(&str, Vec<&str>)> = v["guests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            let to = g["destinations"].as_array().unwrap();
            let to = to.iter().map(|h| h.as_str().unwrap()).collect();
            (g["guest"].as_str().unwrap(), to)
        })
        .collect();
    assert_eq!(
        leaving,
        [
            ("pt", vec!["trixie"]),
            ("pt-sha-off", vec!["bookworm-no-sha", "trixie"])
        ]
    );
    // One host in two files; a new host of a name the fleet has.
    let twin = t.write(
        "twin.xml",
        std::fs::read_to_string(hosts.join("trixie.xml")).unwrap(),
    );
    for args in [
        vec![s(&hosts), s(&twin)],
        vec!["--admit".to_string(), s(&twin), s(&hosts)],
    ] {
        let out = run_fleet(&args);
        out.status(2);
        assert!(out.stdout.is_empty(), "{}", out.stdout);
        assert!(
            out.stderr.contains(&format!(
                "twin.xml: names host 'trixie' as {} does already; one file per host",
                s(&hosts.join("trixie.xml"))
            )),
            "{}",
            out.stderr
        );
    }
    // One guests file given twice (by a path of its own, through a symbolic link, a hard link):
    // its guests would count twice; refused, naming both.
    let link = t.path("again.guests.xml");
    std::os::unix::fs::symlink(&guests, &link).unwrap();
    let hard = t.path("hard.guests.xml");
    std::fs::hard_link(&guests, &hard).unwrap();
    for again in [guests.clone(), link, hard] {
        let out = run_fleet(&[s(&guests), s(&hosts), s(&again)]);
        out.status(2);
        assert!(out.stdout.is_empty(), "{}", out.stdout);
        assert!(
            out.stderr.contains(&format!(
                "{}: given twice (also as {}); each facts file once",
                s(&again),
                s(&guests)
            )),
            "{}",
            out.stderr
        );
    }
    // Found in a directory given: the message says which.
    let out = run_fleet(&[s(&hosts.join("trixie.xml")), s(&hosts)]);
    out.status(2);
    assert!(
        out.stderr.contains(&format!(
            "{}: given twice (also as {}); each facts file once",
            format_args!("{} (in {})", s(&hosts.join("trixie.xml")), s(&hosts)),
            s(&hosts.join("trixie.xml"))
        )),
        "{}",
        out.stderr
    );
}

/// Hosts alike in everything the judge reads are judged as one (a fleet of a thousand real hosts
/// costs a few judgements), yet each in its own words, and never hosts that differ in a judged
/// fact: three copies of libvirt 7.0's facts, one with its own `<uuid>` and NUMA topology (what
/// every real host has of its own), one that also lacks the machine type `pc-q35-5.2`.
#[test]
fn hosts_alike_in_what_is_judged_are_one_kind_each_named_by_its_own_file() {
    let t = Scratch::new("fleet-host-kinds");
    let first = host_facts(&t, "hosts", "bullseye");
    let doc = std::fs::read_to_string(&first).unwrap();
    assert!(doc.contains("<uuid>") && doc.contains("<topology>"));
    let uuid = &doc[doc.find("<uuid>").unwrap()..doc.find("</uuid>").unwrap()];
    let own = doc
        .replacen("name='bullseye'", "name='twin'", 1)
        .replacen(uuid, "<uuid>00000000-0000-4000-8000-000000000002", 1)
        .replacen(
            "<topology>",
            "<topology><!-- this host's own NUMA cells -->",
            1,
        );
    t.write("hosts/twin.xml", own.clone());
    let less = own
        .replacen("name='twin'", "name='older'", 1)
        .replace("<machine maxCpus='288'>pc-q35-5.2</machine>", "")
        .replace(
            "<machine canonical='pc-q35-5.2' maxCpus='288'>q35</machine>",
            "",
        );
    t.write("hosts/older.xml", less);
    let guests = guest_facts(
        "elsewhere",
        &[
            ("on-5.2", "shutoff", guest("on-5.2", "pc-q35-5.2", "")),
            ("on-9.2", "shutoff", guest("on-9.2", "pc-q35-9.2", "")),
        ],
    );
    t.write("guests.xml", guests);
    let args = [
        "--cpu-map".to_string(),
        format!("twin={}", s(&generation_facts("bullseye").join("cpu_map"))),
        "--cpu-map".to_string(),
        format!("older={}", s(&generation_facts("bullseye").join("cpu_map"))),
    ];
    let mut all: Vec<String> = args.to_vec();
    all.extend(["--format", "json", "--pairs"].map(String::from));
    all.extend([s(&t.path("hosts")), s(&t.path("guests.xml"))]);
    let out = run_fleet(&all);
    out.status(1);
    let got = pair_reasons(&json(&out));
    let reasons = |g: &str, h: &str| got[&(g.to_string(), h.to_string())].clone();
    // The twin: the first host's verdicts, its own file named where the first's is.
    for g in ["on-5.2", "on-9.2"] {
        let mine: Vec<(String, String)> = reasons(g, "bullseye")
            .into_iter()
            .map(|(c, m)| (c, m.replace(&s(&first), &s(&t.path("hosts/twin.xml")))))
            .collect();
        assert_eq!(reasons(g, "twin"), mine, "{g}");
    }
    let refused = reasons("on-9.2", "twin");
    assert!(
        refused.iter().any(|(c, m)| c == "machine-unsupported"
            && m.contains(&s(&t.path("hosts/twin.xml")))
            && !m.contains(&s(&first))),
        "{refused:#?}"
    );
    // A machine type fewer: another kind of host.
    assert!(reasons("on-5.2", "bullseye").is_empty());
    let older = reasons("on-5.2", "older");
    assert!(
        older.iter().any(|(c, m)| c == "machine-unsupported"
            && m.contains("pc-q35-5.2")
            && m.contains(&s(&t.path("hosts/older.xml")))),
        "{older:#?}"
    );
}

/// A host's facts file named by a bare word (`host`, `node`) is named where its reasons name a
/// file, and nowhere else: the words of the sentences stay as they are.
#[test]
fn a_facts_file_named_like_a_word_is_named_only_as_the_file() {
    let t = Scratch::new("fleet-bare-names");
    let facts = std::fs::read_to_string(crate::harness::root().join("tests/data/facts/trixie.xml"))
        .unwrap();
    for name in ["host", "node"] {
        t.write(
            name,
            facts.replacen("name='trixie'", &format!("name='{name}'"), 1),
        );
    }
    let guest = kvm_guest(
        "x2",
        "x86_64",
        "pc-q35-10.0",
        "<cpu mode='custom' match='exact' check='partial'><model fallback='forbid'>qemu64</model></cpu>",
    );
    t.write("g.xml", guest_facts("host", &[("x2", "running", guest)]));
    let map = s(&generation_facts("trixie").join("cpu_map"));
    let out = Cmd::new(&["fleet", "--pairs", "--format", "json", "--cpu-map", &map])
        .args(&["host", "node", "g.xml"])
        .dir(&t.path(""))
        .run();
    let got = pair_reasons(&json(&out));
    let node = &got[&("x2".to_string(), "node".to_string())];
    assert!(!node.is_empty(), "{}", out.stdout);
    for (code, message) in node {
        assert!(
            !message.contains("this node") && !message.contains("node-model"),
            "{code}: {message}"
        );
        assert!(!message.contains('\u{1}'), "{message}");
    }
    assert!(
        node.iter()
            .any(|(_, m)| m.contains("this host") && m.contains("from node")),
        "{node:#?}"
    );
}

/// A stopped guest whose domain names its OS (libosinfo's id, as virt-install writes it) is
/// judged against that OS's floor on every host: a RHEL 10 guest on `Nehalem` (x86-64-v2) starts
/// nowhere (`os-floor`, the reason naming the OS and the level), the same guest rewritten to its
/// floor by the default policy (golden case `os-floor-rhel10-libosinfo-raised-to-v3`) has no such
/// reason anywhere. The guest facts carry the OS: the reduced copy keeps the libosinfo id alone.
#[test]
fn a_guest_below_its_os_floor_starts_on_no_host() {
    let t = Scratch::new("fleet-os-floor");
    let hosts = hosts_dir(&t, "hosts", &GENERATIONS);
    let case = crate::harness::root().join("tests/cases/os-floor-rhel10-libosinfo-raised-to-v3");
    let below = std::fs::read_to_string(case.join("input.xml")).unwrap();
    let raised = std::fs::read_to_string(case.join("expected-stdout")).unwrap();
    std::fs::create_dir_all(t.path("guests")).unwrap();
    t.write(
        "guests/below.xml",
        below.replace("<name>rhel10</name>", "<name>below</name>"),
    );
    t.write(
        "guests/raised.xml",
        raised.replace("<name>rhel10</name>", "<name>raised</name>"),
    );
    let v = fleet_json(&[], &[hosts, t.path("guests")], 1);
    let mut seen = 0;
    for p in v["pairs"].as_array().unwrap() {
        let codes = field_of_each(&p["reasons"], "code");
        match p["guest"].as_str().unwrap() {
            "below" => {
                assert!(codes.contains(&"os-floor".to_string()), "{p}");
                let msg = p["reasons"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|r| r["code"] == "os-floor")
                    .unwrap()["message"]
                    .as_str()
                    .unwrap();
                assert!(
                    msg.starts_with("rhel10.0 needs x86-64-v3 (")
                        && msg.contains("reaches x86-64-v2"),
                    "{msg}"
                );
            }
            _ => assert!(!codes.contains(&"os-floor".to_string()), "{p}"),
        }
        seen += 1;
    }
    assert_eq!(seen, 8);
    // The reduced copy keeps the OS id, and nothing else of the metadata.
    let dom = virt_cpu_policy::domain::Domain::parse(&below, "below").unwrap();
    let reduced = virt_cpu_policy::fleet::guest::reduce(&dom);
    assert!(
        reduced.contains("<libosinfo:os id='http://redhat.com/rhel/10.0'/>"),
        "{reduced}"
    );
    assert!(!reduced.contains("<description>"));
}

/// A stopped RHEL 10 guest with a host-model CPU, on a host known by its capabilities alone: its
/// OS's floor (x86-64-v3) cannot be judged there (no host-model CPU known), so the pair is
/// `not-compared`, not `runs`; on its own host (libvirt 9.0's capture, whose KVM host-model
/// reaches x86-64-v1) it cannot start (`os-floor`). A guest only not compared elsewhere is not
/// counted stuck. And a host admitted as a bare `virsh capabilities` file is judged by its own
/// arch (`<host><cpu><arch>`), not the first emulated one's.
#[test]
fn a_floor_that_cannot_be_judged_is_not_compared() {
    let t = Scratch::new("fleet-floor-nc");
    let dir = hosts_dir(&t, "fl", &["bookworm"]);
    let caps = crate::harness::root().join("tests/data/generations/bookworm/capabilities.xml");
    std::fs::copy(&caps, dir.join("plain.xml")).unwrap();
    let host = "bookworm";
    let rhel10 = kvm_guest("rhel10", "x86_64", "pc-q35-7.2", "<cpu mode='host-model'/>").replace(
        "<vcpu",
        "<metadata><libosinfo:libosinfo xmlns:libosinfo='http://libosinfo.org/xmlns/libvirt/domain/1.0'><libosinfo:os id='http://redhat.com/rhel/10.0'/></libosinfo:libosinfo></metadata><vcpu",
    );
    t.write(
        "fl/guests.xml",
        guest_facts(host, &[("rhel10", "shutoff", rhel10)]),
    );
    let pairs = fleet_json(&[], std::slice::from_ref(&dir), 1);
    let pair = |h: &str| {
        pairs["pairs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["host"] == h)
            .unwrap()
            .clone()
    };
    let (own, plain) = (pair(host), pair("plain"));
    assert_eq!(own["verdict"], "cannot", "{own}");
    assert_eq!(own["reasons"][0]["code"], "os-floor", "{own}");
    assert_eq!(plain["verdict"], "not-compared", "{plain}");
    let why = plain["reasons"][0]["message"].as_str().unwrap();
    assert!(
        why.contains("rhel10.0 needs x86-64-v3") && why.contains("not known"),
        "{plain}"
    );
    let summary = run_fleet(&["--format".into(), "json".into(), s(&dir)]);
    summary.status(1);
    let summary = json(&summary);
    let own_row = summary["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["host"] == host)
        .unwrap()
        .clone();
    assert_eq!(own_row["stuck"], 0, "{own_row}");
    let bare = t.path("forky-caps.xml");
    std::fs::copy(
        crate::harness::root().join("tests/data/generations/forky/capabilities.xml"),
        &bare,
    )
    .unwrap();
    let admit = run_fleet(&["--admit".into(), s(&bare), s(&dir)]);
    assert!(!admit.stdout.contains("armv6l"), "{}", admit.stdout);
    assert!(
        !admit.stdout.contains("[arch-unsupported]"),
        "{}",
        admit.stdout
    );
}

/// The stack's known hazards as fleet reasons (`stack-hazard`, `src/hazards.toml`): a running
/// KVM guest with two threads per core on libvirt 9.0/QEMU 7.2 cannot go live to libvirt
/// 11.3/QEMU 10.0 ("extra features: ht", as the rig's migration shows: tests/fleet/migrate) and
/// meets no hazard going to 12.8/11.1; one thread per core, a TCG guest or a stopped guest meets
/// none; without the destination's QEMU release in its facts, nothing is claimed.
#[test]
fn a_known_hazard_of_the_stack_is_named_for_its_pair_only() {
    let t = Scratch::new("fleet-hazard");
    let dir = hosts_dir(&t, "hosts", &["bookworm", "trixie", "forky"]);
    let threads = |n: u32| {
        format!(
            "<cpu mode='custom' match='exact'><model fallback='forbid'>qemu64</model><topology sockets='1' dies='1' cores='{}' threads='{n}'/></cpu>",
            2 / n
        )
    };
    let guests = guest_facts(
        "bookworm",
        &[
            (
                "kvm-ht",
                "running",
                kvm_guest("kvm-ht", "x86_64", "pc-q35-7.2", &threads(2))
                    .replace("<vcpu>1</vcpu>", "<vcpu>2</vcpu>"),
            ),
            (
                "kvm-one",
                "running",
                kvm_guest("kvm-one", "x86_64", "pc-q35-7.2", &threads(1))
                    .replace("<vcpu>1</vcpu>", "<vcpu>2</vcpu>"),
            ),
            (
                "tcg-ht",
                "running",
                guest("tcg-ht", "pc-q35-7.2", &threads(2))
                    .replace("<vcpu>1</vcpu>", "<vcpu>2</vcpu>"),
            ),
            (
                "kvm-ht-stopped",
                "shutoff",
                kvm_guest("kvm-ht-stopped", "x86_64", "pc-q35-7.2", &threads(2))
                    .replace("<vcpu>1</vcpu>", "<vcpu>2</vcpu>"),
            ),
        ],
    );
    let guests_file = t.write("bookworm.guests.xml", guests);
    // The matrix and its summary agree (fleet_json checks it), and a pair that cannot is exit 1.
    let v = fleet_json(&[], &[dir.clone(), guests_file.clone()], 1);
    let got = pair_reasons(&v);
    // The text matrix counts it too.
    let text = run_fleet(&[s(&dir), s(&guests_file)]);
    text.status(1);
    let mut args: Vec<String> = ["--pairs", "--format", "json"].map(String::from).to_vec();
    args.push(s(&dir));
    args.push(s(&guests_file));
    let hazard = |g: &str, h: &str| {
        got[&(g.to_string(), h.to_string())]
            .iter()
            .find(|(c, _)| c == "stack-hazard")
            .map(|(_, m)| m.clone())
    };
    let named = hazard("kvm-ht", "trixie").expect("the failing pair names the hazard");
    assert!(
        named.contains("ht-extra-after-qemu-10")
            && named.contains("extra features: ht")
            && named.contains("KubeVirt issue #16386"),
        "{named}"
    );
    for (g, h) in [
        ("kvm-ht", "forky"),
        ("kvm-one", "trixie"),
        ("tcg-ht", "trixie"),
        ("kvm-ht-stopped", "trixie"),
    ] {
        assert_eq!(hazard(g, h), None, "{g} -> {h}");
    }
    // The destination's QEMU release not given: not taken as one either way, the pair not
    // compared, naming what is missing (exit 1 still: other pairs cannot).
    let old = t.path("hosts/trixie.xml");
    let text = std::fs::read_to_string(&old).unwrap();
    let at = text.find(" qemu='").expect("a qemu release");
    let end = at + 7 + text[at + 7..].find('\'').unwrap() + 1;
    std::fs::write(&old, format!("{}{}", &text[..at], &text[end..])).unwrap();
    let out = run_fleet(&args);
    out.status(1);
    let got = pair_reasons(&json(&out));
    let pair = &got[&("kvm-ht".to_string(), "trixie".to_string())];
    assert!(!pair.iter().any(|(c, _)| c == "stack-hazard"), "{pair:?}");
    assert!(
        pair.iter().any(|(c, m)| c == "not-compared"
            && m.contains("ht-extra-after-qemu-10")
            && m.contains("the destination's QEMU release")),
        "{pair:?}"
    );
}
