//! The documentation checked against the code: every page of `docs/` that lists codes or keys is
//! compared with what the binary really prints or accepts, both ways, so a page cannot promise a
//! key the tool no longer gives, nor leave out one it gives.
//!
//! * `docs/json.md` — the keys of every JSON report (`check`, `rewrite --explain`, `host`,
//!   `audit`, `baseline`, `traits`, `compare`), run on inputs that fill every list;
//! * `docs/exit-codes.md` — each command made to give each exit code the table lists;
//! * `docs/policy.md` — the keys the policy reader accepts (its own "expected one of" lists), the
//!   values of every key with a fixed set, and the levels table against the tool's levels;
//! * `docs/findings.md` — every finding code the golden cases make `check` print is listed, and
//!   every code listed is one the source gives;
//! * `docs/metrics.md` — the metrics `audit --format prometheus` and the daemon write;
//! * `docs/journal.md` — the `MESSAGE_ID` of every kind of decision;
//! * README.md's fleet examples (drain, admit, upgrade): each command run, its output compared;
//! * every relative link of the Markdown files, and the heading its anchor names.

use crate::golden::golden_cpu_map;
use crate::harness::{Cmd, Output, Scratch, root, s};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The page `docs/NAME`.
fn page(name: &str) -> String {
    std::fs::read_to_string(root().join("docs").join(name))
        .unwrap_or_else(|e| panic!("docs/{name}: {e}"))
}

/// The sections of a page: each `## ` heading's text and the lines under it.
fn sections(text: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = vec![(String::new(), String::new())];
    let mut fenced = false;
    for line in text.lines() {
        fenced ^= line.starts_with("```");
        match line.strip_prefix("## ") {
            Some(h) if !fenced => out.push((h.to_string(), String::new())),
            _ => {
                let body = &mut out.last_mut().unwrap().1;
                body.push_str(line);
                body.push('\n');
            }
        }
    }
    out
}

/// The section of `text` under the heading `heading`; panics naming the page when it is missing.
#[track_caller]
fn section(text: &str, heading: &str) -> String {
    sections(text)
        .into_iter()
        .find(|(h, _)| h == heading)
        .map(|(_, b)| b)
        .unwrap_or_else(|| panic!("no section `## {heading}`"))
}

/// The cells of a Markdown table row (`\|` is a pipe inside a cell).
fn cells(row: &str) -> Vec<String> {
    let inner = row.trim().trim_start_matches('|').trim_end_matches('|');
    let mut out = vec![String::new()];
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                out.last_mut().unwrap().push('|');
                chars.next();
            }
            '|' => out.push(String::new()),
            _ => out.last_mut().unwrap().push(c),
        }
    }
    out.into_iter().map(|c| c.trim().to_string()).collect()
}

/// The body rows of every table in `text`: header and separator lines left out.
fn table_rows(text: &str) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    let mut in_table = false;
    for line in text.lines() {
        if !line.starts_with('|') {
            in_table = false;
            continue;
        }
        if !in_table {
            in_table = true; // the header
            continue;
        }
        if line.starts_with("|---") {
            continue;
        }
        rows.push(cells(line));
    }
    rows
}

/// The words in backticks in `text`.
fn ticked(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// The backticked words of the first column of every table of `text`.
fn first_column(text: &str) -> BTreeSet<String> {
    table_rows(text)
        .iter()
        .flat_map(|r| ticked(&r[0]))
        .collect()
}

/// `virt-cpu-policy ARGS` run in `dir`.
fn run_in<S: AsRef<str>>(dir: &Path, args: &[S]) -> Output {
    Cmd::new(args).dir(dir).run()
}

/// A golden case's folder.
fn case(name: &str) -> PathBuf {
    root().join("tests/cases").join(name)
}

// ---------------------------------------------------------------------------------------------
// JSON keys
// ---------------------------------------------------------------------------------------------

/// Every key path of `v` (`a.b`, `a[].b`) into `out`; the paths in `maps` hold maps whose keys
/// are data (levels), not keys, and are not entered.
fn key_paths(v: &Value, path: &str, maps: &[&str], out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                out.insert(p.clone());
                if !maps.contains(&p.as_str()) {
                    key_paths(x, &p, maps, out);
                }
            }
        }
        Value::Array(a) => {
            for x in a {
                key_paths(x, &format!("{path}[]"), maps, out);
            }
        }
        _ => {}
    }
}

/// The key paths of the JSON `text` (stdout or stderr of `out`).
fn printed_keys(out: &Output, text: &str, maps: &[&str]) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    key_paths(&json_of(out, text), "", maps, &mut keys);
    keys
}

/// Two x86_64 host CPUs (a Haswell, a Nehalem) in `t`, as facts files: physical CPUs, with the
/// `ds` KVM never gives a guest (so `baseline` prints `kvm_left_out`).
fn two_hosts(t: &Scratch) -> (String, String) {
    let host = |model: &str| {
        s(&t.write(
            &format!("{model}.xml"),
            format!("<cpu><arch>x86_64</arch><model>{model}</model><vendor>Intel</vendor><feature name='ds'/></cpu>"),
        ))
    };
    (host("Haswell"), host("Nehalem"))
}

/// A kvm guest whose custom CPU is `model`, in `t`.
fn guest_of(t: &Scratch, model: &str) -> String {
    s(&t.write(
        &format!("{model}-guest.xml"),
        format!("<domain type='kvm'><name>g</name><os><type arch='x86_64'>hvm</type></os><cpu mode='custom'><model>{model}</model></cpu></domain>"),
    ))
}

fn json_of(out: &Output, text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): exit {}\nstdout:\n{}\nstderr:\n{}",
            out.code, out.stdout, out.stderr
        )
    })
}

/// Compares the key paths the runs printed with the documented ones, both ways.
#[track_caller]
fn same_keys(what: &str, printed: &BTreeSet<String>, documented: &BTreeSet<String>) {
    let undocumented: Vec<&String> = printed.difference(documented).collect();
    let unprinted: Vec<&String> = documented.difference(printed).collect();
    assert!(
        undocumented.is_empty() && unprinted.is_empty(),
        "{what}: keys printed but not in docs/json.md: {undocumented:?}; keys in docs/json.md never printed: {unprinted:?}"
    );
}

const CAPABILITIES: &str = "<capabilities><host><cpu><arch>x86_64</arch></cpu></host>\
<guest><os_type>hvm</os_type><arch name='x86_64'><machine maxCpus='288'>pc-q35-7.2</machine>\
<machine canonical='pc-q35-7.2' maxCpus='288'>q35</machine><machine canonical='pc-i440fx-7.2' maxCpus='255'>pc</machine>\
<machine maxCpus='255'>pc-i440fx-7.2</machine><domain type='kvm'/></arch></guest></capabilities>";

const DOMCAPABILITIES: &str = "<domainCapabilities><path>/usr/bin/qemu-system-x86_64</path>\
<domain>kvm</domain><machine>pc-q35-7.2</machine><arch>x86_64</arch><vcpu max='288'/><cpu>\
<mode name='host-passthrough' supported='yes'/><mode name='host-model' supported='yes'>\
<model fallback='forbid'>Skylake-Client-IBRS</model><vendor>Intel</vendor>\
<feature policy='require' name='ss'/><feature policy='disable' name='hle'/></mode>\
<mode name='custom' supported='yes'><model usable='yes'>Nehalem</model><model usable='no'>Cooperlake</model></mode>\
</cpu></domainCapabilities>";

#[test]
fn json_keys_are_the_documented_ones() {
    let doc = page("json.md");
    let report_doc: BTreeSet<String> = first_column(&section(&doc, "`check --format json`"))
        .into_iter()
        .chain(first_column(&section(&doc, "Each change")))
        .collect();
    let t = Scratch::new("docs-json");
    let policy = s(&root().join("packaging/policy.toml"));
    let cloudstack = s(&root().join("examples/cloudstack-default-cpu.xml"));
    let map = s(&golden_cpu_map());

    // check and rewrite --explain: changes (CloudStack's bare <cpu>) and a finding (a warning).
    let warned = case("topology-clusters-ignored-libvirt-9.0");
    let mut report = BTreeSet::new();
    for args in [
        vec![
            "check",
            "--format",
            "json",
            "--policy",
            &policy,
            "--no-qemu-caps-cache",
            &cloudstack,
        ],
        vec![
            "check",
            "--format",
            "json",
            "--policy",
            "policy.toml",
            "--libvirt-version",
            "9.0.0",
            "input.xml",
        ],
    ] {
        let out = run_in(&warned, &args);
        key_paths(&json_of(&out, &out.stdout), "", &[], &mut report);
    }
    assert!(report.contains("findings[].code"), "no finding: {report:?}");
    same_keys("check --format json", &report, &report_doc);
    let explained = Cmd::new(&[
        "rewrite",
        "--explain",
        "--format",
        "json",
        "--policy",
        &policy,
        "--no-qemu-caps-cache",
        &cloudstack,
    ])
    .run();
    let explain_keys = printed_keys(&explained, &explained.stderr, &[]);
    assert!(
        explain_keys.is_subset(&report_doc),
        "rewrite --explain --format json: {explain_keys:?}"
    );

    // host: a capabilities and a domcapabilities file, and every fact given.
    let caps = t.write("caps.xml", CAPABILITIES);
    let dcaps = t.write("domcaps.xml", DOMCAPABILITIES);
    let out = Cmd::new(&["host", "--format", "json", "--policy", &policy])
        .args(&["--caps", &s(&caps), "--caps", &s(&dcaps), "--cpu-map", &map])
        .args(&["--libvirt-version", "9.0.0", "--host-cpus", "64"])
        .args(&["--kvm-max-vcpus", "1024", "--no-qemu-caps-cache"])
        .args(&["--qemu-version", "7.2.22"])
        .run();
    same_keys(
        "host --format json",
        &printed_keys(&out, &out.stdout, &[]),
        &first_column(&section(&doc, "`host --format json`")),
    );

    // audit: a guest of each verdict that has changes or findings, and an unreadable file.
    let defs = t.path("defs");
    std::fs::create_dir(&defs).unwrap();
    std::fs::copy(&cloudstack, defs.join("cloudstack.xml")).unwrap();
    std::fs::copy(warned.join("input.xml"), defs.join("warned.xml")).unwrap();
    std::fs::write(defs.join("broken.xml"), "<domain").unwrap();
    let out = Cmd::new(&["audit", "--format", "json", "--policy", &policy])
        .args(&[
            "--caps",
            &s(&caps),
            "--no-qemu-caps-cache",
            "--libvirt-version",
            "9.0.0",
        ])
        .arg(s(&defs))
        .run();
    let audit = printed_keys(&out, &out.stdout, &[]);
    let audit_doc: BTreeSet<String> = first_column(&section(&doc, "`audit --format json`"))
        .into_iter()
        .chain(report_doc.iter().map(|k| format!("guests[].{k}")))
        .collect();
    same_keys("audit --format json", &audit, &audit_doc);

    // baseline and compare, of two host CPUs read with libvirt 9.0's cpu_map.
    let (haswell, nehalem) = two_hosts(&t);
    let out = Cmd::new(&["baseline", "--format", "json", "--cpu-map", &map])
        .args(&[&haswell, &nehalem])
        .run();
    let v = json_of(&out, &out.stdout);
    let mut baseline = BTreeSet::new();
    key_paths(&v, "", &["hosts[].lacks"], &mut baseline);
    // An AMD host whose CPU lists `cmp_legacy` and `arch-capabilities` with a bit, which the
    // baseline leaves out (`topology_left_out`, `arch_capabilities_left_out`).
    let amd = t.path("amd-host.xml");
    std::fs::write(
        &amd,
        "<cpu>\n  <arch>x86_64</arch>\n  <model>EPYC</model>\n  <vendor>AMD</vendor>\n  <feature name='cmp_legacy'/>\n  <feature name='arch-capabilities'/>\n  <feature name='mds-no'/>\n</cpu>\n",
    )
    .unwrap();
    let out = Cmd::new(&["baseline", "--format", "json", "--cpu-map", &map])
        .arg(s(&amd))
        .run();
    key_paths(
        &json_of(&out, &out.stdout),
        "",
        &["hosts[].lacks"],
        &mut baseline,
    );
    same_keys(
        "baseline --format json",
        &baseline,
        &first_column(&section(&doc, "`baseline --format json`")),
    );
    for h in v["hosts"].as_array().unwrap() {
        for level in h["lacks"].as_object().unwrap().keys() {
            assert!(level.starts_with("x86-64-v"), "lacks: {level}");
        }
    }
    let out = Cmd::new(&["traits", "--format", "json", "--cpu-map", &map])
        .args(&[&haswell, &nehalem])
        .run();
    let mut traits = BTreeSet::new();
    key_paths(&json_of(&out, &out.stdout), "", &[], &mut traits);
    same_keys(
        "traits --format json",
        &traits,
        &first_column(&section(&doc, "`traits --format json`")),
    );
    let out = Cmd::new(&["compare", "--format", "json", "--cpu-map", &map])
        .args(&["--host", &nehalem, &guest_of(&t, "Haswell")])
        .run();
    same_keys(
        "compare --format json",
        &printed_keys(&out, &out.stdout, &[]),
        &first_column(&section(&doc, "`compare --format json`")),
    );
    fleet_json_keys_are_the_documented_ones(&t, &doc);
}

/// The four views of `fleet --format json`, on libvirt 7.0's and 9.0's TCG
/// domcapabilities (one file a host; the admitted one 9.0's again), a host of 9.0's capabilities
/// alone, and three guests of 9.0's: `maximum` (7.0 refuses it; a policy of `host-model` fixes
/// it), `host-passthrough` (TCG refuses it everywhere) and a custom `Nehalem` checked `partial`
/// (not compared on the host without domcapabilities).
fn fleet_json_keys_are_the_documented_ones(t: &Scratch, doc: &str) {
    let tcg_caps = |g: &str| {
        root()
            .join("tests/data/generations")
            .join(g)
            .join("domcapabilities-x86_64-q35-qemu.xml")
    };
    std::fs::create_dir_all(t.path("fleet")).unwrap();
    std::fs::copy(tcg_caps("bookworm"), t.path("fleet/old.xml")).unwrap();
    std::fs::copy(tcg_caps("bullseye"), t.path("fleet/older.xml")).unwrap();
    let (older, new) = (t.path("older.xml"), t.path("new.xml"));
    std::fs::copy(tcg_caps("bullseye"), &older).unwrap();
    // The new host: libvirt 9.0's again (the golden cpu_map knows its host-model's features).
    std::fs::copy(tcg_caps("bookworm"), &new).unwrap();
    let domain = |name: &str, cpu: &str| {
        format!(
            "<domain type='qemu'><name>{name}</name><vcpu>1</vcpu><os><type arch='x86_64' machine='pc-q35-5.2'>hvm</type></os>{cpu}</domain>"
        )
    };
    t.write(
        "fleet/old.guests.xml",
        format!(
            "<guestFacts host='old'><guest name='a' state='shutoff'>{}</guest><guest name='b' state='running'>{}</guest><guest name='c' state='shutoff'>{}</guest></guestFacts>",
            domain("a", "<cpu mode='maximum'/>"),
            domain("b", "<cpu mode='host-passthrough'/>"),
            domain("c", "<cpu mode='custom' check='partial'><model>Nehalem</model></cpu>")
        ),
    );
    // A host known by its capabilities alone: `c`'s CPU, which libvirt compares with TCG's
    // host-model at start, is not compared there (`not-compared`).
    std::fs::copy(
        root().join("tests/data/generations/bookworm/capabilities.xml"),
        t.path("fleet/plain.xml"),
    )
    .unwrap();
    // What an answer cannot take into account, each named in `incomplete`: a file that is not
    // facts, guests of a host not among the facts, guests naming host `plain` by another name.
    t.write("fleet/broken.xml", "not XML");
    t.write(
        "fleet/gone.guests.xml",
        format!(
            "<guestFacts host='gone'><guest name='e' state='shutoff'>{}</guest></guestFacts>",
            domain("e", "<cpu mode='maximum'/>")
        ),
    );
    t.write(
        "fleet/plain.guests.xml",
        format!(
            "<guestFacts host='PLAIN.example.org'><guest name='d' state='shutoff'>{}</guest></guestFacts>",
            domain("d", "<cpu mode='maximum'/>")
        ),
    );
    let policy = t.write(
        "fleet-policy.toml",
        "version = 1\n[[rule]]\nname = \"tcg\"\nmatch = { type = \"qemu\" }\ncpu.mode = \"host-model\"\n",
    );
    let dir = s(&t.path("fleet"));
    let views: [(&str, Vec<String>); 5] = [
        ("`fleet --format json`", vec![]),
        ("`fleet --pairs --format json`", vec!["--pairs".into()]),
        (
            "`fleet --drain HOST --format json`",
            vec!["--drain".into(), "old".into()],
        ),
        (
            "`fleet --admit FACTS --format json`",
            vec!["--admit".into(), s(&new)],
        ),
        (
            "`fleet --upgrade HOST --to FACTS --format json`",
            vec!["--upgrade".into(), "old".into(), "--to".into(), s(&older)],
        ),
    ];
    for (heading, args) in views {
        let out = Cmd::new(&["fleet", "--format", "json", "--policy"])
            .arg(s(&policy))
            .args(&["--cpu-map", &s(&golden_cpu_map())])
            .args(&args)
            .arg(&dir)
            .run();
        same_keys(
            heading,
            &printed_keys(&out, &out.stdout, &[]),
            &first_column(&section(doc, heading)),
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Exit codes
// ---------------------------------------------------------------------------------------------

/// The exit code `cmd` gives: runs of the real binaries and hooks, one per documented code.
type Scenario = Box<dyn Fn(&Scratch) -> i32>;

/// A run of `virt-cpu-policy ARGS` in `dir`, as a scenario.
fn tool(dir: PathBuf, args: &[&str]) -> Scenario {
    let args: Vec<String> = args.iter().map(|a| (*a).to_string()).collect();
    Box::new(move |_| run_in(&dir, &args).code)
}

/// `audit` of a directory holding a copy of `file` (in the repository), with `policy`, and
/// with the recorded cpu_map when `recorded_map` (then this machine's CPU is not decoded).
fn audit_of(file: &'static str, policy: &'static str, recorded_map: bool) -> Scenario {
    Box::new(move |t: &Scratch| {
        let dir = t.path(&format!("audit-{}-{recorded_map}", file.replace('/', "_")));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(root().join(file), dir.join("guest.xml")).unwrap();
        let mut c = Cmd::new(&["audit", "--no-qemu-caps-cache", "--policy"]);
        c = c.arg(s(&root().join(policy)));
        if recorded_map {
            c = c.args(&["--cpu-map", &s(&golden_cpu_map())]);
        }
        c.arg(s(&dir)).run().code
    })
}

/// The oVirt VDSM hook on a copy of `domain` (in the repository), with the policy file `policy`.
fn vdsm(domain: &'static str, policy: PathBuf) -> Scenario {
    Box::new(move |t: &Scratch| {
        let file = t.path(&format!(
            "vdsm-{}.xml",
            policy.file_name().unwrap().to_string_lossy()
        ));
        std::fs::copy(root().join(domain), &file).unwrap();
        std::process::Command::new(root().join("hooks/vdsm/before_vm_start/50_virt_cpu_policy"))
            .env("VIRT_CPU_POLICY_BIN", crate::harness::bin())
            .env("VIRT_CPU_POLICY_POLICY", &policy)
            .env("_hook_domxml", &file)
            .output()
            .expect("run the VDSM hook")
            .status
            .code()
            .unwrap_or(-1)
    })
}

#[test]
#[cfg_attr(
    not(feature = "daemon"),
    ignore = "needs --features daemon (virt-cpu-policyd apply)"
)]
fn every_documented_exit_code_happens() {
    let t = Scratch::new("docs-exit");
    let r = root();
    let default = "packaging/policy.toml";
    let cloudstack = "examples/cloudstack-default-cpu.xml";
    let conforming = "tests/cases/conforming-identical/input.xml";
    let passthrough = "tests/cases/host-passthrough-self-closing-kvm/input.xml";
    let cannot = "tests/cases/policy-unknown-model/input.xml";
    let cannot_policy = "tests/cases/policy-unknown-model/policy.toml";
    let malformed = "tests/cases/malformed-xml/input.xml";
    let deny = t.write(
        "deny.toml",
        "version = 1\n[hook]\non_violation = \"deny\"\n[[rule]]\nname = \"v2\"\nmatch = { arch = \"x86_64\" }\ncpu.min_level = \"x86-64-v2\"\n",
    );
    let map = s(&golden_cpu_map());
    let (haswell, nehalem) = two_hosts(&t);
    let (nehalem_guest, haswell_guest) = (guest_of(&t, "Nehalem"), guest_of(&t, "Haswell"));
    // Two aarch64 host CPUs: no baseline, so no cluster CPU to name.
    let aarch64 = |name: &str| {
        s(&t.write(
            &format!("{name}.xml"),
            "<cpu><arch>aarch64</arch><model>Neoverse-V1</model><vendor>ARM</vendor></cpu>",
        ))
    };
    let (arm_a, arm_b) = (aarch64("arm-a"), aarch64("arm-b"));
    let p = |f: &str| s(&r.join(f));
    // fleet: one host (libvirt 9.0's TCG domcapabilities), a guest it runs and one it cannot.
    let tcg_host =
        s(&r.join("tests/data/generations/bookworm/domcapabilities-x86_64-q35-qemu.xml"));
    let tcg_guest = |name: &str, cpu: &str| {
        t.write(
            &format!("{name}.xml"),
            format!("<domain type='qemu'><name>{name}</name><vcpu>1</vcpu><os><type arch='x86_64' machine='pc-q35-7.2'>hvm</type></os>{cpu}</domain>"),
        )
    };
    let fleet_runs = s(&tcg_guest("runs", "<cpu mode='host-model'/>"));
    let fleet_cannot = s(&tcg_guest("cannot", "<cpu mode='host-passthrough'/>"));
    // ... and a host known by its capabilities alone, where a custom CPU libvirt compares with
    // TCG's host-model at start is not compared.
    let plain_host = p("tests/data/generations/bookworm/capabilities.xml");
    let fleet_unknown = s(&tcg_guest(
        "unknown",
        "<cpu mode='custom' check='partial'><model>Nehalem</model></cpu>",
    ));
    std::fs::create_dir_all(t.path("no-guests")).unwrap();
    std::fs::create_dir_all(t.path("bad-guests")).unwrap();
    std::fs::write(t.path("bad-guests/x.xml"), "<domain").unwrap();
    let hook = |policy: String, file: &str| -> Scenario {
        let xml = std::fs::read(r.join(file)).unwrap();
        let log = t.path("hook.log");
        let snap = t.path("hook-state");
        Box::new(move |_| {
            Cmd::new(&[
                "hook",
                "--policy",
                &policy,
                "--no-qemu-caps-cache",
                "--log-file",
            ])
            .arg(s(&log))
            .args(&["--snapshot-dir", &s(&snap)])
            .args(&["g", "prepare", "begin", "-"])
            .stdin(xml.clone())
            .run()
            .code
        })
    };
    let mut scenarios: BTreeMap<(&str, i32), Scenario> = BTreeMap::new();
    let mut add = |cmd: &'static str, code: i32, sc: Scenario| {
        assert!(scenarios.insert((cmd, code), sc).is_none());
    };
    // Runs of virt-cpu-policy itself: (command, code, arguments).
    let judge = |cmd: &str, policy: &str, file: &str| {
        vec![cmd.to_string(), "--policy".into(), p(policy), p(file)]
    };
    let with_map = |args: &[&str]| -> Vec<String> {
        let mut v = vec![args[0].to_string(), "--cpu-map".into(), map.clone()];
        v.extend(args[1..].iter().map(|a| (*a).to_string()));
        v
    };
    let runs: Vec<(&'static str, i32, Vec<String>)> = vec![
        // A custom KVM CPU is judged as this machine's KVM gives it (the project's machines give
        // no x86-64-v2: `cpu-level`): a host-passthrough guest conforms anywhere.
        ("rewrite", 0, judge("rewrite", default, passthrough)),
        ("rewrite", 1, judge("rewrite", cannot_policy, cannot)),
        ("rewrite", 2, judge("rewrite", default, malformed)),
        // A KVM custom CPU with a model is compared with the host's own CPU, which is this
        // machine's only with its libvirt's cpu_map: a host-passthrough guest conforms anywhere.
        ("check", 0, judge("check", default, passthrough)),
        ("check", 1, judge("check", cannot_policy, cannot)),
        ("check", 2, judge("check", default, malformed)),
        // Without this machine's QEMU capability cache: what its KVM gives does not decide.
        (
            "check",
            3,
            [
                judge("check", default, cloudstack),
                vec!["--no-qemu-caps-cache".into()],
            ]
            .concat(),
        ),
        // The recorded cpu_map is not this machine's libvirt's: its CPU is not decoded, and no
        // capabilities are given.
        (
            "check",
            4,
            with_map(&["check", "--policy", &p(default), &p(conforming)]),
        ),
        (
            "host",
            0,
            vec!["host".into(), "--no-qemu-caps-cache".into()],
        ),
        (
            "host",
            2,
            vec!["host".into(), "--caps".into(), "/nonexistent.xml".into()],
        ),
        ("baseline", 0, with_map(&["baseline", &haswell, &nehalem])),
        (
            "baseline",
            1,
            with_map(&["baseline", "--min-level", "x86-64-v3", &haswell, &nehalem]),
        ),
        ("baseline", 2, with_map(&["baseline", "/nonexistent.xml"])),
        (
            "compare",
            0,
            with_map(&["compare", "--host", &haswell, &nehalem_guest]),
        ),
        (
            "compare",
            1,
            with_map(&["compare", "--host", &nehalem, &haswell_guest]),
        ),
        (
            "compare",
            2,
            with_map(&["compare", "--host", "/nonexistent.xml", &haswell_guest]),
        ),
        ("traits", 0, with_map(&["traits", &haswell, &nehalem])),
        ("traits", 1, with_map(&["traits", &arm_a, &arm_b])),
        ("traits", 2, with_map(&["traits", "/nonexistent.xml"])),
        ("hook", 2, vec!["hook".into()]),
        (
            "policy",
            0,
            vec!["policy".into(), "check".into(), p(default)],
        ),
        (
            "policy",
            1,
            vec![
                "policy".into(),
                "check".into(),
                s(&t.write(
                    "typo.toml",
                    "version = 1\n[[rule]]\nname = \"typo\"\ncpu.model = \"Nehalm\"\n",
                )),
            ],
        ),
        (
            "policy",
            2,
            vec!["policy".into(), "check".into(), "/nonexistent.toml".into()],
        ),
        (
            "fleet",
            0,
            vec!["fleet".into(), tcg_host.clone(), fleet_runs.clone()],
        ),
        (
            "fleet",
            1,
            vec!["fleet".into(), tcg_host.clone(), fleet_cannot.clone()],
        ),
        ("fleet", 2, vec!["fleet".into(), "/nonexistent.xml".into()]),
        (
            "fleet",
            4,
            vec!["fleet".into(), plain_host.clone(), fleet_unknown.clone()],
        ),
        (
            "facts",
            0,
            vec![
                "facts".into(),
                "--guests".into(),
                "--config-dir".into(),
                s(&t.path("no-guests")),
                "--state-dir".into(),
                s(&t.path("no-guests")),
            ],
        ),
        (
            "facts",
            2,
            vec![
                "facts".into(),
                "--guests".into(),
                "--config-dir".into(),
                s(&t.path("bad-guests")),
                "--state-dir".into(),
                s(&t.path("no-guests")),
            ],
        ),
    ];
    for (cmd, code, args) in runs {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        add(cmd, code, tool(r.clone(), &args));
    }
    let audits: [(i32, &'static str, &'static str, bool); 5] = [
        (0, passthrough, default, false),
        (1, cannot, cannot_policy, false),
        (2, malformed, default, false),
        (3, cloudstack, default, false),
        (4, conforming, default, true),
    ];
    for (code, file, policy, recorded_map) in audits {
        add("audit", code, audit_of(file, policy, recorded_map));
    }
    add("hook", 0, hook(p(default), cloudstack));
    add("hook", 1, hook(s(&deny), cloudstack));
    #[cfg(feature = "daemon")]
    add(
        "virt-cpu-policyd apply",
        2,
        Box::new(|_| {
            Cmd::new(&[
                "--uri",
                "qemu+unix:///system?socket=/nonexistent/libvirt-sock",
                "--policy",
            ])
            .program(crate::harness::daemon_bin())
            .arg(s(&root().join("packaging/policy.toml")))
            .args(&["apply", "--all"])
            .run()
            .code
        }),
    );
    #[cfg(feature = "daemon")]
    add(
        "virt-cpu-policyd publish",
        2,
        Box::new(|t| {
            Cmd::new(&[
                "--uri",
                "qemu+unix:///system?socket=/nonexistent/libvirt-sock",
                "--publish",
            ])
            .program(crate::harness::daemon_bin())
            .arg(s(&t.path("published")))
            .arg("publish")
            .run()
            .code
        }),
    );
    add("50_virt_cpu_policy", 0, vdsm(passthrough, r.join(default)));
    add("50_virt_cpu_policy", 1, vdsm(cannot, r.join(cannot_policy)));
    // A domain that cannot conform, under on_violation = "deny".
    let cannot_deny = t.write(
        "cannot-deny.toml",
        std::fs::read_to_string(r.join(cannot_policy)).unwrap()
            + "\n[hook]\non_violation = \"deny\"\n",
    );
    add("50_virt_cpu_policy", 2, vdsm(cannot, cannot_deny));
    // Given by tests/e2e/daemon against a running libvirtd: apply's 0 (unchanged, changed) and 1
    // (a guest refused).
    // tests/fleet/migrate: publish's 0 against the generations' daemons.
    let elsewhere = [
        ("virt-cpu-policyd apply", 0),
        ("virt-cpu-policyd apply", 1),
        ("virt-cpu-policyd publish", 0),
    ];

    let table = section(&page("exit-codes.md"), "Every command");
    let mut documented = BTreeSet::new();
    for row in table_rows(&table) {
        let cmd = ticked(&row[0])
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("a row without a command: {row:?}"));
        for (code, cell) in row.iter().enumerate().skip(1) {
            if cell != "—" {
                documented.insert((cmd.clone(), i32::try_from(code - 1).unwrap()));
            }
        }
    }
    let known: BTreeSet<(String, i32)> = scenarios
        .keys()
        .map(|(c, n)| ((*c).to_string(), *n))
        .chain(elsewhere.iter().map(|(c, n)| ((*c).to_string(), *n)))
        .collect();
    assert_eq!(
        documented, known,
        "docs/exit-codes.md's table against the exit codes this test makes happen"
    );
    let mut wrong = Vec::new();
    for ((cmd, code), run) in &scenarios {
        let got = run(&t);
        if got != *code {
            wrong.push(format!("{cmd}: exit {got}, documented {code}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

// ---------------------------------------------------------------------------------------------
// Policy keys, values and levels
// ---------------------------------------------------------------------------------------------

/// The reference block of docs/policy.md: its first ```toml block.
fn policy_block() -> String {
    let doc = page("policy.md");
    doc.split("```toml\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("docs/policy.md has a ```toml block")
        .to_string()
}

/// The keys the block documents (`hook.on_error`, `rule.cpu.mode`...; commented-out keys too,
/// and `rule.match`'s keys from its comment), each with its comment.
fn documented_policy_keys(block: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut table = String::new();
    for line in block.lines() {
        let line = line.trim_start_matches('#').trim();
        if let Some(t) = line
            .strip_prefix("[[")
            .and_then(|l| l.split("]]").next())
            .or_else(|| line.strip_prefix('[').and_then(|l| l.split(']').next()))
        {
            table = format!("{t}.");
            out.insert(t.to_string(), String::new());
            continue;
        }
        let Some((key, rest)) = line.split_once(" = ") else {
            continue;
        };
        let key = key.trim();
        if key.is_empty() || key.contains(' ') {
            continue;
        }
        let comment = rest
            .split_once('#')
            .map_or("", |(_, c)| c)
            .trim()
            .to_string();
        let full = format!("{table}{key}");
        if key == "match" {
            let keys = comment
                .split_once("keys ")
                .map(|(_, k)| k.split(';').next().unwrap_or(""))
                .expect("match's comment names its keys");
            for k in keys.split(", ") {
                let k = k.split_whitespace().next().unwrap();
                out.insert(format!("{full}.{k}"), String::new());
            }
        }
        out.insert(full, comment);
    }
    out
}

/// What the reader answers to a value it does not know at each of `keys` (`table.key`, one a
/// line in the file it is given): key → its error line.
fn policy_errors(t: &Scratch, text: &str) -> BTreeMap<String, String> {
    let p = t.write("probe.toml", text);
    let out = Cmd::new(&["check", "--policy", &s(&p)])
        .arg(s(&root().join("examples/cloudstack-default-cpu.xml")))
        .run();
    out.status(2);
    out.stderr
        .lines()
        .filter_map(|l| {
            let (_, rest) = l.split_once(": key `")?;
            let (key, msg) = rest.split_once("`: ")?;
            Some((key.to_string(), msg.to_string()))
        })
        .collect()
}

/// The backticked words after "expected" in a reader's error.
fn expected_words(msg: &str) -> BTreeSet<String> {
    msg.split_once("expected")
        .map(|(_, e)| ticked(e).into_iter().collect())
        .unwrap_or_default()
}

#[test]
fn policy_keys_and_values_are_the_readers() {
    let block = policy_block();
    let documented = documented_policy_keys(&block);
    let t = Scratch::new("docs-policy");
    // An unknown key at every level: the reader lists the keys it accepts there.
    let unknown = policy_errors(
        &t,
        "version = 1\nzzz = 1\n[hook]\nzzz = 1\n[host]\nzzz = 1\n[[rule]]\nname = \"a\"\nzzz = 1\nmatch = { zzz = \"x\" }\ncpu.zzz = 1\nvcpu.zzz = 1\n",
    );
    let mut accepted = BTreeSet::new();
    for (key, msg) in &unknown {
        let table = key.strip_suffix("zzz").expect(key);
        for k in expected_words(msg) {
            accepted.insert(format!("{table}{k}"));
        }
    }
    assert_eq!(unknown.len(), 7, "{unknown:#?}");
    let names: BTreeSet<String> = documented.keys().cloned().collect();
    // The tables the block writes with dots (rule.cpu.mode) are keys of their parent.
    let names: BTreeSet<String> = names
        .into_iter()
        .chain(["rule.cpu".to_string(), "rule.vcpu".to_string()])
        .collect();
    assert_eq!(
        names, accepted,
        "docs/policy.md's keys against the reader's (\"expected one of\")"
    );

    // Every key with a fixed set of values documents exactly the values the reader accepts.
    let fixed: Vec<(&String, BTreeSet<String>)> = documented
        .iter()
        .filter(|(_, c)| c.contains("\" | \""))
        .map(|(k, c)| {
            // The quoted words of the comment (before any parenthesis): `"a" | "b"`.
            let alternatives = c.split(" (").next().unwrap();
            let values = alternatives
                .split('"')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect();
            (k, values)
        })
        .collect();
    assert!(fixed.len() >= 8, "{fixed:?}");
    let mut top = String::from("version = 1\n");
    let mut tables: BTreeMap<&str, String> = BTreeMap::new();
    for (key, _) in &fixed {
        match key.split_once('.') {
            None => top.push_str(&format!("{key} = \"zz\"\n")),
            Some((table, rest)) => tables
                .entry(table)
                .or_default()
                .push_str(&format!("{rest} = \"zz\"\n")),
        }
    }
    let mut probe = top;
    for (table, body) in &tables {
        if *table == "rule" {
            probe.push_str("[[rule]]\nname = \"a\"\n");
        } else {
            probe.push_str(&format!("[{table}]\n"));
        }
        probe.push_str(body);
    }
    let errors = policy_errors(&t, &probe);
    for (key, values) in fixed {
        let msg = errors
            .get(key.as_str())
            .unwrap_or_else(|| panic!("no error for {key} = \"zz\": {errors:#?}"));
        assert_eq!(
            expected_words(msg),
            values,
            "{key}: docs/policy.md against the reader: {msg}"
        );
    }

    // The block itself is a policy the tool loads.
    let p = t.write("reference.toml", &block);
    let out = Cmd::new(&["check", "--policy", &s(&p), "--no-qemu-caps-cache"])
        .args(&["--cpu-map", &s(&golden_cpu_map()), "--host-cpus", "8"])
        .arg(s(&root().join("examples/cloudstack-default-cpu.xml")))
        .run();
    assert_ne!(
        out.code, 2,
        "the reference block does not load:\n{}",
        out.stderr
    );
}

#[test]
fn the_levels_table_is_the_tools() {
    use virt_cpu_policy::cpu::Level;
    let doc = page("policy.md");
    let levels = section(&doc, "Levels (x86-64 psABI, in libvirt feature names)");
    let mut features: Vec<String> = Vec::new();
    let mut seen = Vec::new();
    for row in table_rows(&levels) {
        let level: Level = row[0].parse().unwrap_or_else(|e| panic!("{row:?}: {e:?}"));
        features.extend(
            ticked(&row[1])
                .iter()
                .flat_map(|w| w.split_whitespace().map(str::to_string).collect::<Vec<_>>()),
        );
        let mut want: Vec<&str> = level.features();
        let mut got: Vec<&str> = features.iter().map(String::as_str).collect();
        want.sort_unstable();
        got.sort_unstable();
        assert_eq!(got, want, "{}", level.as_str());
        seen.push(level);
    }
    assert_eq!(seen, Level::ALL);
}

// ---------------------------------------------------------------------------------------------
// Finding codes
// ---------------------------------------------------------------------------------------------

#[test]
fn finding_codes_printed_are_documented_and_documented_ones_exist() {
    let documented = first_column(&page("findings.md"));
    assert!(documented.len() >= 50, "{documented:?}");
    // Every code the golden cases make `check` print.
    let mut printed = BTreeSet::new();
    for c in crate::golden::cases()
        .into_iter()
        .filter(|c| !c.needs_corpus())
    {
        let mut args = vec![
            "check".to_string(),
            "--format".into(),
            "json".into(),
            "--policy".into(),
            c.policy_arg(),
            "--cpu-map".into(),
            s(&golden_cpu_map()),
        ];
        args.extend(c.args().unwrap());
        if !args.iter().any(|a| a.ends_with("qemu-caps-cache")) {
            args.push("--no-qemu-caps-cache".into());
        }
        args.push("input.xml".into());
        let out = run_in(&c.dir, &args);
        if out.code == 2 {
            continue;
        }
        let v: Value = serde_json::from_str(&out.stdout).unwrap();
        for f in v["findings"].as_array().unwrap() {
            printed.insert(f["code"].as_str().unwrap().to_string());
        }
    }
    assert!(printed.len() >= 10, "{printed:?}");
    let undocumented: Vec<&String> = printed.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "codes printed but not in docs/findings.md: {undocumented:?}"
    );
    // Every documented code is one the binary can give: a code of the enum, whose names follow
    // from it (src/finding.rs).
    let unknown: Vec<&String> = documented
        .iter()
        .filter(|c| c.parse::<virt_cpu_policy::finding::Code>().is_err())
        .collect();
    assert!(
        unknown.is_empty(),
        "docs/findings.md lists codes src/ never gives: {unknown:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Metrics and journal message ids
// ---------------------------------------------------------------------------------------------

/// Metric name → type, from the `# TYPE` lines of a Prometheus text exposition.
fn exposition(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|rest| {
            let (name, ty) = rest.split_once(' ').unwrap();
            (name.to_string(), ty.to_string())
        })
        .collect()
}

#[test]
fn the_metrics_table_is_what_audit_and_the_daemon_write() {
    let doc = page("metrics.md");
    let mut documented = BTreeMap::new();
    let mut fleet_doc = BTreeMap::new();
    let mut cluster_doc = BTreeMap::new();
    for row in table_rows(&doc) {
        if let (Some(name), Some(ty)) = (ticked(&row[0]).first(), row.get(1)) {
            let ty = ty.split_whitespace().next().unwrap().to_string();
            if row[1].contains("(fleet)") {
                fleet_doc.insert(name.clone(), ty);
                continue;
            }
            if row[1].contains("(cluster)") {
                cluster_doc.insert(name.clone(), ty);
                continue;
            }
            let daemon_only = row[1].contains("(daemon)");
            documented.insert(name.clone(), (ty, daemon_only));
        }
    }
    let t = Scratch::new("docs-metrics");
    let f = t.write(
        "g.xml",
        std::fs::read(root().join("examples/cloudstack-default-cpu.xml")).unwrap(),
    );
    let out = Cmd::new(&[
        "audit",
        "--format",
        "prometheus",
        "--no-qemu-caps-cache",
        "--policy",
    ])
    .arg(s(&root().join("packaging/policy.toml")))
    .arg(s(&f))
    .run();
    let audit = exposition(&out.stdout);
    // The daemon's: the gauges as audit counts them, and its counters.
    let mut gauges = virt_cpu_policy::metrics::Gauges::default();
    gauges.count(
        virt_cpu_policy::verdict::Verdict::NeedsRewrite,
        &["r".to_string()],
    );
    let daemon = exposition(&virt_cpu_policy::metrics::render(
        &gauges,
        Some(&virt_cpu_policy::metrics::Counters::default()),
        &["r".to_string()],
    ));
    let doc_audit: BTreeMap<String, String> = documented
        .iter()
        .filter(|(_, (_, d))| !d)
        .map(|(n, (t, _))| (n.clone(), t.clone()))
        .collect();
    let doc_all: BTreeMap<String, String> = documented
        .iter()
        .map(|(n, (t, _))| (n.clone(), t.clone()))
        .collect();
    assert_eq!(
        audit, doc_audit,
        "audit --format prometheus against docs/metrics.md"
    );
    assert_eq!(
        daemon, doc_all,
        "the daemon's metrics against docs/metrics.md"
    );
    // With a cluster CPU: the daemon adds its series and its changes' counter.
    gauges.cluster = Some(virt_cpu_policy::cluster::watch::Seen::default());
    let mut with_cluster = exposition(&virt_cpu_policy::metrics::render(
        &gauges,
        Some(&virt_cpu_policy::metrics::Counters::default()),
        &["r".to_string()],
    ));
    with_cluster.retain(|n, _| !daemon.contains_key(n));
    assert_eq!(
        with_cluster, cluster_doc,
        "the daemon's cluster CPU metrics against docs/metrics.md"
    );
    // fleet --format prometheus: one host (libvirt 9.0's TCG domcapabilities), one guest.
    let host = root().join("tests/data/generations/bookworm/domcapabilities-x86_64-q35-qemu.xml");
    let guest = t.write(
        "fleet-guest.xml",
        "<domain type='qemu'><name>g</name><vcpu>1</vcpu><os><type arch='x86_64' machine='pc-q35-7.2'>hvm</type></os></domain>",
    );
    let out = Cmd::new(&["fleet", "--format", "prometheus"])
        .arg(s(&host))
        .arg(s(&guest))
        .run();
    assert_eq!(
        exposition(&out.stdout),
        fleet_doc,
        "fleet --format prometheus against docs/metrics.md"
    );
}

#[test]
fn the_journal_message_ids_are_the_codes() {
    use virt_cpu_policy::cluster::watch::CLUSTER_CPU_CHANGED_ID;
    use virt_cpu_policy::log::{Decision, HOOK_WARNING_ID};
    let doc = page("journal.md");
    let documented: BTreeSet<(String, String)> = table_rows(&doc)
        .into_iter()
        .filter(|r| r.len() == 4 && r[0].len() == 34)
        .map(|r| (r[0].trim_matches('`').to_string(), r[1].clone()))
        .collect();
    let code: BTreeSet<(String, String)> = Decision::ALL
        .iter()
        .map(|d| (d.message_id().to_string(), d.name().to_string()))
        .chain([
            (HOOK_WARNING_ID.to_string(), "hook-warning".to_string()),
            (
                CLUSTER_CPU_CHANGED_ID.to_string(),
                "cluster-cpu-changed".to_string(),
            ),
        ])
        .collect();
    assert_eq!(documented, code, "docs/journal.md's MESSAGE_ID table");
}

// ---------------------------------------------------------------------------------------------
// Links
// ---------------------------------------------------------------------------------------------

/// GitHub's anchor of a heading: lower case, punctuation dropped, spaces made hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown file's headings (a repeated one gets `-1`, `-2`... as on GitHub).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        fenced ^= line.starts_with("```");
        if fenced || !line.starts_with('#') {
            continue;
        }
        let s = slug(line.trim_start_matches('#'));
        let n = seen.entry(s.clone()).or_default();
        out.insert(if *n == 0 {
            s.clone()
        } else {
            format!("{s}-{n}")
        });
        *n += 1;
    }
    out
}

#[test]
fn every_relative_link_resolves() {
    let r = root();
    let mut files: Vec<PathBuf> = [
        "README.md",
        "CONTRIBUTING.md",
        "CHANGELOG.md",
        "ARCHITECTURE.md",
    ]
    .iter()
    .map(|f| r.join(f))
    .chain([r.join("tests/data/README.md")])
    .collect();
    for e in std::fs::read_dir(r.join("docs")).unwrap() {
        files.push(e.unwrap().path());
    }
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let mut fenced = false;
        for line in text.lines() {
            fenced ^= line.starts_with("```");
            if fenced {
                continue;
            }
            for target in line.split("](").skip(1).filter_map(|t| t.split(')').next()) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                checked += 1;
                let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
                let dest = if path.is_empty() {
                    file.clone()
                } else {
                    file.parent().unwrap().join(path)
                };
                if !dest.exists() {
                    broken.push(format!("{}: {target}: no such file", file.display()));
                    continue;
                }
                if !anchor.is_empty() {
                    let headings = anchors(&std::fs::read_to_string(&dest).unwrap());
                    if !headings.contains(anchor) {
                        broken.push(format!(
                            "{}: {target}: no heading #{anchor} in {}",
                            file.display(),
                            dest.display()
                        ));
                    }
                }
            }
        }
    }
    assert!(checked > 50, "{checked} links");
    assert!(broken.is_empty(), "{broken:#?}");
}

/// The worked examples of README.md's fleet section (drain, one guest, admit, upgrade): each `$ virt-cpu-policy
/// ...` command of a `console` block (`\` continues a line) is run in `tests/data`, as the
/// section says, and what it writes (stdout, then stderr) must be the lines under it, and
/// `$ echo $?` its exit code: an example that no longer matches the binary fails here.
#[test]
fn readme_fleet_examples_are_the_binarys_output() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let sec = section(&readme, "Before acting: drain, admit, upgrade");
    let data = root().join("tests/data");
    let mut commands = 0;
    let mut block: Option<Vec<&str>> = None;
    for line in sec.lines() {
        match (&mut block, line) {
            (None, "```console") => block = Some(Vec::new()),
            (Some(lines), "```") => {
                commands += check_console(&data, lines);
                block = None;
            }
            (Some(lines), l) => lines.push(l),
            (None, _) => {}
        }
    }
    assert_eq!(
        commands, 4,
        "the section shows drain, one guest, admit and upgrade"
    );
}

/// Runs the commands of one `console` block's `lines` in `dir` and compares; returns how many.
#[track_caller]
fn check_console(dir: &Path, lines: &[&str]) -> usize {
    let mut runs = 0;
    let mut i = 0;
    let mut last: Option<Output> = None;
    while i < lines.len() {
        let Some(mut command) = lines[i].strip_prefix("$ ").map(str::to_string) else {
            panic!("output without a command: {}", lines[i]);
        };
        i += 1;
        while let Some(head) = command.strip_suffix('\\') {
            command = format!("{head} {}", lines[i].trim());
            i += 1;
        }
        let mut expected = String::new();
        while i < lines.len() && !lines[i].starts_with("$ ") {
            expected.push_str(lines[i]);
            expected.push('\n');
            i += 1;
        }
        if command == "echo $?" {
            let out = last.as_ref().expect("echo $? after a command");
            assert_eq!(
                out.code.to_string(),
                expected.trim(),
                "exit code of the example"
            );
            continue;
        }
        let words: Vec<&str> = command.split_whitespace().collect();
        assert_eq!(words[0], "virt-cpu-policy", "{command}");
        let out = run_in(dir, &words[1..]);
        assert_eq!(
            format!("{}{}", out.stdout, out.stderr),
            expected,
            "README example `{command}` (run in {})",
            dir.display()
        );
        last = Some(out);
        runs += 1;
    }
    runs
}

/// `virt-cpu-policy --help` lists every exit code docs/exit-codes.md's table has, and each
/// command it names for 3 and 4 has that code in the table.
#[test]
fn help_lists_the_exit_codes_the_table_documents() {
    let help = Cmd::new(&["--help"]).run();
    assert_eq!(help.code, 0);
    let text = help.stdout.replace('\n', " ");
    let codes = text
        .split_once("Exit codes")
        .map(|(_, rest)| rest.to_string())
        .expect("--help says the exit codes");
    let table = section(&page("exit-codes.md"), "Every command");
    let mut documented: BTreeMap<String, BTreeSet<i32>> = BTreeMap::new();
    for row in table_rows(&table) {
        let cmd = ticked(&row[0]).into_iter().next().unwrap();
        for (code, cell) in row.iter().enumerate().skip(1) {
            if cell != "—" {
                documented
                    .entry(cmd.clone())
                    .or_default()
                    .insert(i32::try_from(code - 1).unwrap());
            }
        }
    }
    let all: BTreeSet<i32> = documented.values().flatten().copied().collect();
    for code in &all {
        assert!(
            codes.contains(&format!(" {code} ")) || codes.contains(&format!("; {code} ")),
            "--help does not list exit code {code}: {codes}"
        );
    }
    for code in [3, 4] {
        let named = codes
            .split_once(&format!("; {code} ("))
            .and_then(|(_, r)| r.split_once(')'))
            .map(|(list, _)| list.to_string())
            .unwrap_or_else(|| panic!("--help names the commands of exit {code}: {codes}"));
        for cmd in named.split(", ") {
            assert!(
                documented.get(cmd).is_some_and(|c| c.contains(&code)),
                "--help says {cmd} exits {code}; docs/exit-codes.md does not"
            );
        }
    }
}
