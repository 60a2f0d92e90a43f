//! The command line, end to end: the real binary, its exit codes, its messages, and what it
//! writes (and does not write) to stdout and to files.
//!
//! Conventions checked on every failure: the documented exit code, one clear message on stderr
//! (prefixed with the program name, never a panic), and nothing at all on stdout.
//!
//! Every test passes `--policy` explicitly, so a `/etc/virt-cpu-policy/policy.toml` on the machine
//! running the tests cannot change the results.

use crate::harness::{
    Cmd, Output, Scratch, bin, is_root, recorded_host_without_kvm_domcaps, root, s, shared_corpus,
};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

/// The shipped default policy (the same text the binary has built in).
fn default_policy() -> String {
    s(&root().join("packaging/policy.toml"))
}

/// The shipped CloudStack example: no model, so the default policy must add the v2 features.
fn cloudstack() -> PathBuf {
    root().join("examples/cloudstack-default-cpu.xml")
}

fn cloudstack_text() -> String {
    std::fs::read_to_string(cloudstack()).expect("examples/cloudstack-default-cpu.xml")
}

/// This machine's QEMU capability cache left out, for tests of a command's mechanics (files,
/// diffs, exit codes) on the shipped KVM example: what this machine's KVM gives (on the
/// project's machines, no x86-64-v2: `cpu-level` refuses the example there) must not decide them.
const NO_QEMU_CACHE: [&str; 1] = ["--no-qemu-caps-cache"];

/// A kvm x86_64 domain that already reaches x86-64-v2 (Nehalem has every v2 feature).
const CONFORMING: &str = "<domain type='kvm'>
  <name>ok</name>
  <memory unit='KiB'>1048576</memory>
  <vcpu>2</vcpu>
  <os>
    <type arch='x86_64' machine='pc'>hvm</type>
  </os>
  <cpu mode='custom' match='exact'>
    <model fallback='forbid'>Nehalem</model>
  </cpu>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
  </devices>
</domain>
";

/// A kvm x86_64 domain with a model, for policies without a level.
const WITH_MODEL: &str = "<domain type='kvm'>
  <name>m</name>
  <os>
    <type arch='x86_64' machine='pc'>hvm</type>
  </os>
  <cpu mode='custom' match='exact'>
    <model>Nehalem</model>
  </cpu>
</domain>
";

/// Two `<cpu>` elements with different `<numa>`: cannot conform.
const TWO_NUMA: &str = "<domain type='kvm'>
  <name>n</name>
  <os>
    <type arch='x86_64' machine='pc'>hvm</type>
  </os>
  <cpu mode='host-model'>
    <numa>
      <cell id='0' cpus='0' memory='1048576' unit='KiB'/>
    </numa>
  </cpu>
  <cpu>
    <numa>
      <cell id='0' cpus='0-1' memory='2097152' unit='KiB'/>
    </numa>
  </cpu>
</domain>
";

/// Two rules: one requires `aes`, the other disables it.
const CONFLICT_POLICY: &str = "version = 1
[[rule]]
name = \"wants aes\"
cpu.require = [\"aes\"]

[[rule]]
name = \"no aes\"
cpu.disable = [\"aes\"]
";

/// Assert a refusal: the exit code, nothing on stdout, one message on stderr (no panic) that
/// contains every needle (case-insensitive).
#[track_caller]
fn refused(out: &Output, code: i32, needles: &[&str]) {
    out.status(code);
    assert!(
        out.stdout.is_empty(),
        "stdout must be empty on exit {code}, got:\n{}",
        out.stdout
    );
    no_panic(out);
    assert!(
        !out.stderr.trim().is_empty(),
        "exit {code} needs a message on stderr"
    );
    let lower = out.stderr.to_lowercase();
    for n in needles {
        assert!(
            lower.contains(&n.to_lowercase()),
            "stderr should mention {n:?}:\n{}",
            out.stderr
        );
    }
}

/// Assert a bad-input refusal (exit 2): as [`refused`], and the message is a single line
/// prefixed with the program name.
#[track_caller]
fn bad_input(out: &Output, needles: &[&str]) {
    refused(out, 2, needles);
    assert_eq!(
        out.stderr.trim_end().lines().count(),
        1,
        "bad input should give one message line:\n{}",
        out.stderr
    );
    assert!(
        out.stderr.starts_with("virt-cpu-policy: "),
        "message should be prefixed with the program name:\n{}",
        out.stderr
    );
}

#[track_caller]
fn no_panic(out: &Output) {
    assert!(
        !out.stderr.contains("panicked") && !out.stderr.contains("RUST_BACKTRACE"),
        "the tool panicked:\n{}",
        out.stderr
    );
}

fn rewrite(args: &[&str]) -> Cmd {
    Cmd::new(&["rewrite"]).args(args)
}

fn check(args: &[&str]) -> Cmd {
    Cmd::new(&["check"]).args(args)
}

/// Run and time a command.
fn timed(cmd: Cmd) -> (Output, Duration) {
    let t = Instant::now();
    let out = cmd.run();
    (out, t.elapsed())
}

/// Parse `check --format json` output and return (verdict, exit field).
#[track_caller]
fn json_verdict(out: &Output) -> (String, i64) {
    let v: serde_json::Value = serde_json::from_str(out.stdout.trim())
        .unwrap_or_else(|e| panic!("check --format json is not JSON ({e}):\n{}", out.stdout));
    let verdict = v["verdict"]
        .as_str()
        .unwrap_or_else(|| panic!("no string `verdict` field in {v}"))
        .to_string();
    (verdict, v["exit"].as_i64().unwrap_or(-1))
}

// ---------------------------------------------------------------------------------------------
// Exit codes of `rewrite`
// ---------------------------------------------------------------------------------------------

#[test]
fn rewrite_exit_0_writes_the_whole_document() {
    let p = default_policy();
    let out = rewrite(&["--policy", &p, &s(&cloudstack())])
        .args(&NO_QEMU_CACHE)
        .run();
    out.status(0);
    no_panic(&out);
    assert!(
        out.stdout.starts_with("<domain type='kvm'>"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.trim_end().ends_with("</domain>"),
        "{}",
        out.stdout
    );
    for f in ["lahf_lm", "popcnt", "sse4.1", "sse4.2", "ssse3"] {
        assert!(
            out.stdout
                .contains(&format!("<feature policy='require' name='{f}'/>")),
            "{f} missing:\n{}",
            out.stdout
        );
    }
    roxmltree::Document::parse(&out.stdout).expect("output is XML");
    // Stdin gives the same bytes as a file argument.
    let via_stdin = rewrite(&["--policy", &p])
        .stdin(cloudstack_text())
        .args(&NO_QEMU_CACHE)
        .run();
    via_stdin.status(0);
    assert_eq!(via_stdin.stdout, out.stdout);
    let via_dash = rewrite(&["--policy", &p, "-"])
        .stdin(cloudstack_text())
        .args(&NO_QEMU_CACHE)
        .run();
    via_dash.status(0);
    assert_eq!(via_dash.stdout, out.stdout);
}

#[test]
fn rewrite_exit_1_when_rules_require_and_disable_the_same_feature() {
    let t = Scratch::new("conflict");
    let pol = t.write("policy.toml", CONFLICT_POLICY);
    let dom = t.write("d.xml", WITH_MODEL);
    let out = rewrite(&["--policy", &s(&pol), &s(&dom)]).run();
    refused(&out, 1, &["aes", "wants aes", "no aes"]);
}

#[test]
fn rewrite_exit_1_on_two_different_numa() {
    let t = Scratch::new("numa");
    let dom = t.write("d.xml", TWO_NUMA);
    let out = rewrite(&["--policy", &default_policy(), &s(&dom)]).run();
    refused(&out, 1, &["numa"]);
}

#[test]
fn rewrite_identical_numa_in_two_cpus_is_kept_once() {
    let same = TWO_NUMA.replace("cpus='0-1' memory='2097152'", "cpus='0' memory='1048576'");
    let out = rewrite(&["--policy", &default_policy()]).stdin(same).run();
    out.status(0);
    assert_eq!(out.stdout.matches("<cpu").count(), 1, "{}", out.stdout);
    assert_eq!(out.stdout.matches("<numa>").count(), 1, "{}", out.stdout);
}

// ---------------------------------------------------------------------------------------------
// Exit codes of `check`, text and JSON
// ---------------------------------------------------------------------------------------------

#[test]
fn check_exit_0_when_conforming() {
    let p = default_policy();
    let out = check(&["--policy", &p])
        .args(&recorded_host_without_kvm_domcaps())
        .stdin(CONFORMING)
        .run();
    out.status(0);
    no_panic(&out);
    assert!(out.stdout.contains("conforms"), "{}", out.stdout);
    let j = check(&["--policy", &p, "--format", "json"])
        .args(&recorded_host_without_kvm_domcaps())
        .stdin(CONFORMING)
        .run();
    j.status(0);
    assert_eq!(json_verdict(&j), ("conforms".to_string(), 0));
    // And `rewrite` leaves it byte-identical.
    let r = rewrite(&["--policy", &p])
        .args(&recorded_host_without_kvm_domcaps())
        .stdin(CONFORMING)
        .run();
    r.status(0);
    assert_eq!(r.stdout, CONFORMING);
}

#[test]
fn check_exit_3_when_a_rewrite_is_needed() {
    let p = default_policy();
    let c = s(&cloudstack());
    let out = check(&["--policy", &p, &c])
        .args(&recorded_host_without_kvm_domcaps())
        .run();
    out.status(3);
    no_panic(&out);
    assert!(
        out.stdout.contains("lahf_lm"),
        "changes listed:\n{}",
        out.stdout
    );
    let j = check(&["--policy", &p, "--format", "json", &c])
        .args(&recorded_host_without_kvm_domcaps())
        .run();
    j.status(3);
    assert_eq!(json_verdict(&j), ("needs-rewrite".to_string(), 3));
    let v: serde_json::Value = serde_json::from_str(&j.stdout).unwrap();
    assert_eq!(v["schema_version"], 1, "{v}");
    let changes = v["changes"].as_array().expect("changes listed in JSON");
    // Each change as data: CloudStack's bare <cpu> gets qemu64 written out, svm disabled and the
    // v2 features required.
    let find = |element: &str, name: Option<&str>| {
        changes
            .iter()
            .find(|c| c["element"] == element && (name.is_none() || c["name"] == name.unwrap()))
            .unwrap_or_else(|| panic!("no change of <{element}> {name:?} in {v}"))
    };
    let model = find("model", None);
    assert_eq!(
        (&model["action"], &model["old"], &model["new"]),
        (
            &serde_json::json!("add"),
            &serde_json::Value::Null,
            &serde_json::json!("qemu64")
        )
    );
    let popcnt = find("feature", Some("popcnt"));
    assert_eq!(popcnt["action"], "add");
    assert_eq!(popcnt["attribute"], "policy");
    assert_eq!(popcnt["new"], "require");
    assert_eq!(popcnt["rule"], "x86-64-v2 baseline");
    assert!(popcnt["what"].as_str().unwrap().contains("popcnt"));
    let svm = find("feature", Some("svm"));
    assert_eq!(svm["new"], "disable");
    // rewrite --explain --format json gives the same report on stderr, the document on stdout.
    let r = rewrite(&["--policy", &p, "--explain", "--format", "json", &c])
        .args(&recorded_host_without_kvm_domcaps())
        .run();
    r.status(0);
    let e: serde_json::Value = serde_json::from_str(r.stderr.trim()).expect("JSON on stderr");
    assert_eq!(e["changes"], v["changes"]);
    assert!(r.stdout.contains("<model>qemu64</model>"), "{}", r.stdout);
    // The rewritten document then conforms.
    let r = rewrite(&["--policy", &p, &c])
        .args(&recorded_host_without_kvm_domcaps())
        .run();
    r.status(0);
    check(&["--policy", &p])
        .args(&recorded_host_without_kvm_domcaps())
        .stdin(r.stdout.clone())
        .run()
        .status(0);
}

#[test]
fn check_exit_1_when_it_cannot_conform() {
    let t = Scratch::new("check1");
    let pol = t.write("policy.toml", CONFLICT_POLICY);
    let dom = t.write("d.xml", WITH_MODEL);
    let out = check(&["--policy", &s(&pol), &s(&dom)]).run();
    out.status(1);
    no_panic(&out);
    assert!(out.stdout.contains("aes"), "{}", out.stdout);
    let j = check(&["--policy", &s(&pol), "--format", "json", &s(&dom)]).run();
    j.status(1);
    assert_eq!(json_verdict(&j), ("cannot-conform".to_string(), 1));

    let numa = t.write("numa.xml", TWO_NUMA);
    let out = check(&["--policy", &default_policy(), &s(&numa)]).run();
    out.status(1);
    let j = check(&["--policy", &default_policy(), "--format", "json", &s(&numa)]).run();
    j.status(1);
    assert_eq!(json_verdict(&j).0, "cannot-conform");
}

#[test]
fn check_exit_2_on_bad_input() {
    let p = default_policy();
    bad_input(
        &check(&["--policy", &p]).stdin("<domain type='kvm'>").run(),
        &[],
    );
    bad_input(
        &check(&["--policy", &p, "--format", "json", "/nonexistent/d.xml"]).run(),
        &["/nonexistent/d.xml"],
    );
}

// ---------------------------------------------------------------------------------------------
// Bad input: exit 2, one message, nothing on stdout
// ---------------------------------------------------------------------------------------------

#[test]
fn bad_input_missing_file() {
    let out = rewrite(&["--policy", &default_policy(), "/nonexistent/dir/domain.xml"]).run();
    bad_input(&out, &["/nonexistent/dir/domain.xml"]);
}

#[test]
fn bad_input_is_a_directory() {
    let t = Scratch::new("dir");
    let out = rewrite(&["--policy", &default_policy(), &s(&t.0)]).run();
    bad_input(&out, &[&s(&t.0), "directory"]);
}

#[test]
fn bad_input_empty_stdin() {
    let out = rewrite(&["--policy", &default_policy()]).stdin("").run();
    bad_input(&out, &["standard input"]);
    let out = rewrite(&["--policy", &default_policy()]).run(); // stdin is /dev/null
    bad_input(&out, &["standard input"]);
}

#[test]
fn bad_input_malformed_xml() {
    let x =
        "<domain type='kvm'>\n  <os>\n    <type arch='x86_64'>hvm</type>\n  </oss>\n</domain>\n";
    let out = rewrite(&["--policy", &default_policy()]).stdin(x).run();
    bad_input(&out, &["XML", "4:"]);
}

#[test]
fn bad_input_truncated_xml() {
    let text = cloudstack_text();
    let cut = &text[..text.len() / 2];
    let out = rewrite(&["--policy", &default_policy()]).stdin(cut).run();
    bad_input(&out, &["XML"]);
}

#[test]
fn bad_input_dtd_entity_bomb_is_refused_quickly() {
    let mut bomb = String::from("<?xml version='1.0'?>\n<!DOCTYPE domain [\n <!ENTITY a0 'lol'>\n");
    for i in 1..=12 {
        let p = format!("&a{};", i - 1);
        bomb.push_str(&format!(" <!ENTITY a{i} '{}'>\n", p.repeat(10)));
    }
    bomb.push_str("]>\n<domain type='kvm'><name>&a12;</name><os><type arch='x86_64'>hvm</type></os></domain>\n");
    let (out, took) = timed(rewrite(&["--policy", &default_policy()]).stdin(bomb));
    bad_input(&out, &["DTD"]);
    assert!(took < Duration::from_secs(1), "took {took:?}");
    // A DTD without entities is refused as well.
    let dtd = "<!DOCTYPE domain SYSTEM 'domain.dtd'>\n<domain type='kvm'><os><type arch='x86_64'>hvm</type></os></domain>";
    bad_input(
        &rewrite(&["--policy", &default_policy()]).stdin(dtd).run(),
        &["DTD"],
    );
}

/// 17 MiB of comment inside `<domain>`.
fn oversized() -> Vec<u8> {
    let mut v = Vec::with_capacity(17 * 1024 * 1024 + 200);
    v.extend_from_slice(b"<domain type='kvm'><!--");
    v.resize(v.len() + 17 * 1024 * 1024, b'x');
    v.extend_from_slice(b"--><os><type arch='x86_64'>hvm</type></os></domain>\n");
    v
}

#[track_caller]
fn assert_limit_message(out: &Output) {
    bad_input(out, &["limit"]);
    assert!(
        out.stderr.contains("16777216") || out.stderr.contains("16 MiB"),
        "the message should state the limit (16 MiB):\n{}",
        out.stderr
    );
}

#[test]
fn bad_input_over_16_mib_file_is_refused_quickly() {
    let t = Scratch::new("big");
    let f = t.write("big.xml", oversized());
    let (out, took) = timed(rewrite(&["--policy", &default_policy(), &s(&f)]));
    assert_limit_message(&out);
    assert!(took < Duration::from_secs(2), "took {took:?}");
    let (out, took) = timed(check(&["--policy", &default_policy(), &s(&f)]));
    assert_limit_message(&out);
    assert!(took < Duration::from_secs(2), "took {took:?}");
}

#[test]
fn bad_input_over_16_mib_stdin_is_refused_quickly() {
    let (out, took) = timed(rewrite(&["--policy", &default_policy()]).stdin(oversized()));
    assert_limit_message(&out);
    assert!(took < Duration::from_secs(2), "took {took:?}");
}

#[test]
fn input_just_under_the_limit_is_read() {
    // The limit is on the size, not an off-by-one: 16 MiB exactly is accepted.
    let head = b"<domain type='xen'><!--";
    let tail = b"--></domain>";
    let mut v = head.to_vec();
    v.resize(16 * 1024 * 1024 - tail.len(), b'x');
    v.extend_from_slice(tail);
    assert_eq!(v.len(), 16 * 1024 * 1024);
    let out = rewrite(&["--policy", &default_policy()])
        .stdin(v.clone())
        .run();
    out.status(0);
    assert_eq!(out.stdout.len(), v.len());
}

#[test]
fn bad_input_invalid_utf8() {
    let x =
        b"<domain type='kvm'><name>caf\xe9</name><os><type arch='x86_64'>hvm</type></os></domain>";
    let out = rewrite(&["--policy", &default_policy()])
        .stdin(x.to_vec())
        .run();
    bad_input(&out, &["UTF-8"]);
}

#[test]
fn bad_input_utf16_with_bom() {
    let text = "<?xml version='1.0' encoding='UTF-16'?>\n<domain type='kvm'><os><type arch='x86_64'>hvm</type></os></domain>\n";
    let mut bytes = vec![0xFF, 0xFE];
    for u in text.encode_utf16() {
        bytes.extend_from_slice(&u.to_le_bytes());
    }
    let out = rewrite(&["--policy", &default_policy()]).stdin(bytes).run();
    bad_input(&out, &["UTF"]);
    // Big-endian too.
    let mut be = vec![0xFE, 0xFF];
    for u in text.encode_utf16() {
        be.extend_from_slice(&u.to_be_bytes());
    }
    let out = rewrite(&["--policy", &default_policy()]).stdin(be).run();
    bad_input(&out, &["UTF"]);
}

#[test]
fn bad_input_nul_bytes() {
    let x = b"<domain type='kvm'><name>a\0b</name><os><type arch='x86_64'>hvm</type></os></domain>";
    let out = rewrite(&["--policy", &default_policy()])
        .stdin(x.to_vec())
        .run();
    bad_input(&out, &[]);
    let x = b"<domain type='kvm'><os><type arch='x86_64'>hvm</type></os></domain>\0\0\0";
    let out = rewrite(&["--policy", &default_policy()])
        .stdin(x.to_vec())
        .run();
    bad_input(&out, &[]);
}

#[test]
fn bad_input_not_a_domain() {
    let x = "<capabilities><host/></capabilities>";
    let out = rewrite(&["--policy", &default_policy()]).stdin(x).run();
    bad_input(&out, &["domain", "capabilities"]);
    // A <domain> in some other namespace is not libvirt's either.
    let x = "<d:domain xmlns:d='urn:x' type='kvm'/>";
    let out = rewrite(&["--policy", &default_policy()]).stdin(x).run();
    bad_input(&out, &["domain"]);
}

// ---------------------------------------------------------------------------------------------
// Policy files
// ---------------------------------------------------------------------------------------------

#[test]
fn policy_missing() {
    let out = rewrite(&["--policy", "/nonexistent/policy.toml", &s(&cloudstack())]).run();
    bad_input(&out, &["/nonexistent/policy.toml"]);
}

#[test]
fn policy_is_a_directory() {
    let t = Scratch::new("poldir");
    let out = rewrite(&["--policy", &s(&t.0), &s(&cloudstack())]).run();
    bad_input(&out, &[&s(&t.0), "directory"]);
}

#[test]
fn policy_empty_is_refused_and_version_alone_changes_nothing() {
    let t = Scratch::new("polempty");
    // An empty or comment-only file is what a failed `baseline --format toml > policy.toml`
    // leaves: taken as "no rules", every guest would conform and the hook would allow all.
    for text in ["", "# virt-cpu-policy baseline of 3 host(s)\n\n"] {
        let pol = t.write("policy.toml", text);
        for out in [
            rewrite(&["--policy", &s(&pol), &s(&cloudstack())]).run(),
            check(&["--policy", &s(&pol), &s(&cloudstack())]).run(),
        ] {
            out.status(2);
            assert!(out.stdout.is_empty(), "{}", out.stdout);
            assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
            assert!(
                out.stderr.contains(
                    "line 1, column 1: key `version`: missing: the file is empty or only comments"
                ),
                "{}",
                out.stderr
            );
        }
    }
    let pol = t.write("policy.toml", "version = 1\n");
    let out = rewrite(&["--policy", &s(&pol), &s(&cloudstack())]).run();
    out.status(0);
    assert_eq!(out.stdout, cloudstack_text());
    check(&["--policy", &s(&pol), &s(&cloudstack())])
        .run()
        .status(0);
}

/// Bad values and wrong types: exit 2, and the message names the key (as written in the file,
/// e.g. `mode`, `hook.on_violation` or `cpu.mode`), its line and its column. Every case is run and
/// the failures are reported together.
#[test]
fn policy_bad_value_names_key_line_and_column() {
    let t = Scratch::new("polbad");
    let cases: &[(&str, &str, &str)] = &[
        // (policy text, key that must be named, line)
        ("version = 1\nmode = \"enforc\"\n", "mode", "line 2"),
        (
            "version = 1\n[hook]\non_violation = \"maybe\"\n",
            "on_violation",
            "line 3",
        ),
        (
            "version = 1\n[hook]\non_error = true\n",
            "on_error",
            "line 3",
        ),
        ("version = \"1\"\n", "version", "line 1"),
        ("version = 2\n", "version", "line 1"),
        (
            "version = 1\n[[rule]]\nname = \"x\"\ncpu.mode = \"hostmodel\"\n",
            "cpu.mode",
            "line 4",
        ),
        (
            "version = 1\n[[rule]]\nname = \"x\"\ncpu.min_level = \"x86-64-v9\"\n",
            "min_level",
            "line 4",
        ),
        (
            "version = 1\n[[rule]]\nname = \"x\"\ncpu.check = 3\n",
            "check",
            "line 4",
        ),
        (
            "version = 1\n[[rule]]\nname = \"x\"\ncpu.require = \"aes\"\n",
            "require",
            "line 4",
        ),
        (
            "version = 1\n[[rule]]\nname = \"x\"\ncpu.fallback = \"sometimes\"\n",
            "fallback",
            "line 4",
        ),
    ];
    let mut problems = Vec::new();
    for (text, key, line) in cases {
        let pol = t.write("policy.toml", text);
        let out = rewrite(&["--policy", &s(&pol), &s(&cloudstack())]).run();
        let ok = out.code == 2
            && out.stdout.is_empty()
            && out.stderr.trim_end().lines().count() == 1
            && out.stderr.contains(line)
            && out.stderr.contains("column")
            && out.stderr.contains(key);
        no_panic(&out);
        if !ok {
            problems.push(format!(
                "policy {text:?}: wanted exit 2 and a message naming `{key}`, {line}, column; got exit {}: {}",
                out.code,
                out.stderr.trim_end()
            ));
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

/// `[host] cpus` is a CPU count: 0 is a bad value (`--host-cpus 0` is refused too).
#[test]
fn policy_host_cpus_zero_is_a_bad_value() {
    let t = Scratch::new("polcpus");
    let pol = t.write("policy.toml", "version = 1\n[host]\ncpus = 0\n");
    let out = rewrite(&["--policy", &s(&pol), &s(&cloudstack())]).run();
    bad_input(&out, &["line 3", "column", "cpus"]);
    let out = rewrite(&[
        "--policy",
        &default_policy(),
        "--host-cpus",
        "0",
        &s(&cloudstack()),
    ])
    .run();
    refused(&out, 2, &["host-cpus"]);
}

#[test]
fn policy_misspelled_key_names_key_line_and_column() {
    let t = Scratch::new("poltypo");
    let pol = t.write(
        "policy.toml",
        "version = 1\n\n[[rule]]\nname = \"x\"\ncpu.modle = \"Nehalem\"\n",
    );
    let out = rewrite(&["--policy", &s(&pol), &s(&cloudstack())]).run();
    bad_input(&out, &["line 5", "column", "modle"]);
    let pol = t.write("policy.toml", "version = 1\nmdoe = \"audit\"\n");
    let out = check(&["--policy", &s(&pol), &s(&cloudstack())]).run();
    bad_input(&out, &["line 2", "column", "mdoe"]);
}

/// A policy with several mistakes: exit 2, a first line `policy P: N errors:`, then one line per
/// mistake, each with its line and column, in the order of the file. Returns those lines.
#[track_caller]
fn policy_errors(text: &str, n: usize) -> Vec<String> {
    let t = Scratch::new("polmany");
    let pol = t.write("policy.toml", text);
    let out = rewrite(&["--policy", &s(&pol), &s(&cloudstack())]).run();
    refused(&out, 2, &[]);
    let lines: Vec<&str> = out.stderr.trim_end().lines().collect();
    let head = format!("virt-cpu-policy: policy {}: {n} errors:", s(&pol));
    assert_eq!(lines.len(), n + 1, "{n} errors wanted:\n{}", out.stderr);
    assert_eq!(lines[0], head, "{}", out.stderr);
    for l in &lines[1..] {
        assert!(
            l.starts_with("  - line ") && l.contains(", column "),
            "not `  - line L, column C: ...`: {l:?}\n{}",
            out.stderr
        );
    }
    lines[1..].iter().map(|l| (*l).to_string()).collect()
}

/// A `[[rule]]` without a name is reported also when that rule (and the file) has other
/// mistakes: every mistake at once.
#[test]
fn policy_rule_without_a_name_is_reported_among_other_errors() {
    let errors = policy_errors(
        "mode = \"enforc\"\n[[rule]]\ncpu.min_level = \"v9\"\n[[rule]]\nname = \"b\"\ncpu.check = 3\n",
        4,
    );
    assert!(
        errors[0].contains("line 1, column 8: key `mode`"),
        "{errors:#?}"
    );
    assert!(
        errors[1].contains("line 2, column 1: key `rule.name`: missing"),
        "{errors:#?}"
    );
    assert!(
        errors[2].contains("line 3, column 17: key `rule.cpu.min_level`"),
        "{errors:#?}"
    );
    assert!(
        errors[3].contains("line 6, column 13: key `rule.cpu.check`"),
        "{errors:#?}"
    );
}

/// Rule names reach journal fields and log lines: a name used twice is an error at the second
/// (naming the first's line), and so is a name with a control character, shown escaped so the
/// message stays one line per mistake.
#[test]
fn policy_duplicate_or_control_character_rule_names_are_errors() {
    let errors = policy_errors(
        "[[rule]]\nname = \"v2\"\n[[rule]]\nname = \" v2\"\n[[rule]]\nname = \"a\\tb\"\n[[rule]]\nname = \"c\\nd\"\n[[rule]]\nname = \"e\\u007f\"\n[[rule]]\nname = \"f\\u001b[31m\"\n",
        5,
    );
    assert!(
        errors[0].contains("line 4, column 8: key `rule.name`")
            && errors[0].contains("`v2`")
            && errors[0].contains("line 2"),
        "{errors:#?}"
    );
    for (i, (line, shown)) in [
        ("line 6, column 8", "\\t"),
        ("line 8, column 8", "\\n"),
        ("line 10, column 8", "\\u{7f}"),
        ("line 12, column 8", "\\u{1b}"),
    ]
    .into_iter()
    .enumerate()
    {
        let e = &errors[i + 1];
        assert!(
            e.contains(line) && e.contains("control character") && e.contains(shown),
            "{line} {shown}: {errors:#?}"
        );
    }
}

/// A `vcpu.max` too large for any integer type is one mistake, reported once.
#[test]
fn policy_vcpu_max_overflow_is_reported_once() {
    let t = Scratch::new("polmax");
    for value in ["99999999999999999999", "4294967296", "-1", "0"] {
        let pol = t.write(
            "policy.toml",
            format!("version = 1\n[[rule]]\nname = \"x\"\nvcpu.max = {value}\n"),
        );
        let out = rewrite(&["--policy", &s(&pol), &s(&cloudstack())]).run();
        bad_input(&out, &["line 4, column 12: key `rule.vcpu.max`", value]);
    }
}

/// A `vcpu.max` above what the tool can hold (a `u32`, as libvirt's `<vcpu>`) is too large, and
/// the message says so with the largest allowed; 0 and negative values stay "not positive".
#[test]
fn policy_vcpu_max_too_large_names_the_largest() {
    let t = Scratch::new("polmaxbig");
    let pol = |value: &str| {
        t.write(
            "policy.toml",
            format!("version = 1\n[[rule]]\nname = \"x\"\nvcpu.max = {value}\n"),
        )
    };
    for value in ["4294967296", "99999999999999999999", "0x100000000"] {
        let out = rewrite(&["--policy", &s(&pol(value)), &s(&cloudstack())]).run();
        bad_input(
            &out,
            &[
                "line 4, column 12: key `rule.vcpu.max`",
                &format!("{value} is too large"),
                "at most 4294967295",
            ],
        );
        assert!(!out.stderr.contains("positive"), "{}", out.stderr);
    }
    for value in ["0", "-1", "-99999999999999999999"] {
        let out = rewrite(&["--policy", &s(&pol(value)), &s(&cloudstack())]).run();
        bad_input(&out, &["expected a positive integer", value]);
    }
    let out = check(&["--policy", &s(&pol("4294967295")), &s(&cloudstack())]).run();
    assert!(!out.stderr.contains("policy"), "{}", out.stderr);
    no_panic(&out);
}

/// A path key of `[host]` that is empty or only white space would fail only when the file is
/// opened, with no policy line to go to: each is an error of the policy, with its position.
#[test]
fn policy_empty_or_blank_paths_are_errors() {
    let errors = policy_errors(
        "[host]\ncapabilities = [\"/ok.xml\", \"\"]\ncpu_map = \"\"\ncluster = [\" \"]\npublish = \"\\t\"\n[[rule]]\nname = \"a\"\n",
        4,
    );
    for (e, (at, key, written)) in errors.iter().zip([
        ("line 2, column 28", "host.capabilities", ""),
        ("line 3, column 11", "host.cpu_map", ""),
        ("line 4, column 12", "host.cluster", "` `"),
        ("line 5, column 11", "host.publish", "`\\t`"),
    ]) {
        assert!(
            e.contains(&format!("{at}: key `{key}`: must not be empty")) && e.contains(written),
            "{at} {key}: {errors:#?}"
        );
    }
    let errors = policy_errors("[host]\ncapabilities = [\"  \", 3]\n", 2);
    assert!(
        errors[0].contains("line 2, column 17: key `host.capabilities`: must not be empty"),
        "{errors:#?}"
    );
    assert!(
        errors[1].contains("line 2, column 23: key `host.capabilities`"),
        "{errors:#?}"
    );
}

/// The tool names its own changes and decisions where a rule's name goes (`built-in: libvirt
/// rules`, `[hook] on_error`, `libvirt: CODE`): a rule of such a name, or of any name starting
/// with "built-in" or "libvirt:" (case and spacing aside), is refused; names that only resemble
/// them are not.
#[test]
fn policy_rule_names_the_tool_uses_are_reserved() {
    let names = [
        virt_cpu_policy::change::BUILTIN_RULE,
        "BUILT-IN mine",
        "[hook]  On_Error",
        "libvirt: topology-mismatch",
        "Libvirt:defaults",
    ];
    let mut text: String = names
        .iter()
        .map(|n| format!("[[rule]]\nname = \"{n}\"\n"))
        .collect();
    text.push_str("[[rule]]\nname = \"builtin\"\n[[rule]]\nname = \"libvirt rules\"\n");
    let errors = policy_errors(&text, names.len());
    for (i, (e, name)) in errors.iter().zip(names).enumerate() {
        let at = format!("line {}, column 8: key `rule.name`", 2 * i + 2);
        assert!(
            e.contains(&at) && e.contains(&format!("`{name}` is reserved")),
            "{name}: {errors:#?}"
        );
    }
    assert!(errors[0].contains("\"built-in\""), "{errors:#?}");
    assert!(errors[2].contains("`[hook] on_error`"), "{errors:#?}");
    assert!(errors[3].contains("`libvirt: CODE`"), "{errors:#?}");
}

/// Usage errors (clap): exit 2, nothing on stdout.
#[test]
fn usage_errors_exit_2() {
    let c = s(&cloudstack());
    let p = default_policy();
    for args in [
        vec!["rewrite", "--policy", &p, "--diff", "--in-place", &c],
        vec!["rewrite", "--policy", &p, "--no-such-option", &c],
        vec!["check", "--policy", &p, "--format", "yaml", &c],
        vec!["frobnicate"],
        vec!["rewrite", "--policy", &p, &c, &c],
    ] {
        let out = Cmd::new(&args).run();
        refused(&out, 2, &[]);
    }
}

// ---------------------------------------------------------------------------------------------
// --caps files
// ---------------------------------------------------------------------------------------------

#[test]
fn caps_missing() {
    let out = rewrite(&[
        "--policy",
        &default_policy(),
        "--caps",
        "/nonexistent/caps.xml",
        &s(&cloudstack()),
    ])
    .run();
    bad_input(&out, &["/nonexistent/caps.xml"]);
}

#[test]
fn caps_not_a_capabilities_document() {
    let c = s(&cloudstack());
    let out = rewrite(&["--policy", &default_policy(), "--caps", &c, &c]).run();
    bad_input(&out, &[&c, "capabilities"]);
    let t = Scratch::new("caps");
    let junk = t.write("junk.xml", "not xml at all");
    let out = check(&["--policy", &default_policy(), "--caps", &s(&junk), &c]).run();
    bad_input(&out, &[&s(&junk)]);
    let out = Cmd::new(&["host", "--caps", &s(&junk)]).run();
    bad_input(&out, &[&s(&junk)]);
}

// ---------------------------------------------------------------------------------------------
// --in-place, --diff, --explain
// ---------------------------------------------------------------------------------------------

#[test]
fn in_place_rewrites_atomically_and_keeps_permissions() {
    let t = Scratch::new("inplace");
    let f = t.write("guest.xml", cloudstack_text());
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).unwrap();
    let expected = rewrite(&["--policy", &default_policy(), &s(&f)])
        .args(&recorded_host_without_kvm_domcaps())
        .run();
    expected.status(0);
    assert_ne!(expected.stdout, cloudstack_text());

    let out = rewrite(&["--policy", &default_policy(), "--in-place", &s(&f)])
        .args(&recorded_host_without_kvm_domcaps())
        .run();
    out.status(0);
    no_panic(&out);
    assert!(
        out.stdout.is_empty(),
        "--in-place writes nothing to stdout:\n{}",
        out.stdout
    );
    assert_eq!(std::fs::read_to_string(&f).unwrap(), expected.stdout);
    let mode = std::fs::metadata(&f).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o640, "permissions kept");
    assert_eq!(
        t.names(),
        vec!["guest.xml".to_string()],
        "no temporary file left behind"
    );
    // A second run is a no-op.
    let again = check(&["--policy", &default_policy(), &s(&f)])
        .args(&recorded_host_without_kvm_domcaps())
        .run();
    again.status(0);
}

#[test]
#[ignore = "needs root (giving a file away): .ci/run runs as root"]
fn in_place_keeps_the_owner_and_group() {
    assert!(is_root(), "needs root: giving a file away needs root");
    let t = Scratch::new("inplace-owner");
    let f = t.write("guest.xml", cloudstack_text());
    let nobody = 65534;
    std::os::unix::fs::chown(&f, Some(nobody), Some(nobody)).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).unwrap();
    let out = rewrite(&["--policy", &default_policy(), "--in-place", &s(&f)])
        .args(&NO_QEMU_CACHE)
        .run();
    out.status(0);
    let meta = std::fs::metadata(&f).unwrap();
    assert_ne!(
        std::fs::read_to_string(&f).unwrap(),
        cloudstack_text(),
        "rewritten"
    );
    assert_eq!(
        (meta.uid(), meta.gid()),
        (nobody, nobody),
        "owner and group kept"
    );
    assert_eq!(
        meta.permissions().mode() & 0o7777,
        0o640,
        "permissions kept"
    );

    // A user who may not give files away (EPERM) still rewrites a file it may replace: the new
    // file is its own.
    let d = Scratch::new("inplace-eperm");
    std::os::unix::fs::chown(&d.0, Some(nobody), Some(nobody)).unwrap();
    let g = d.write("guest.xml", cloudstack_text());
    std::fs::set_permissions(&g, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut c = Command::new(bin());
    c.args([
        "rewrite",
        "--policy",
        &default_policy(),
        "--in-place",
        &s(&g),
    ])
    .uid(nobody)
    .gid(nobody)
    .stdin(Stdio::null());
    let out = c.output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "as nobody: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta = std::fs::metadata(&g).unwrap();
    assert_ne!(
        std::fs::read_to_string(&g).unwrap(),
        cloudstack_text(),
        "rewritten"
    );
    assert_eq!(
        (meta.uid(), meta.gid()),
        (nobody, nobody),
        "the writer's own"
    );
}

#[test]
fn in_place_through_a_symlink_rewrites_the_target_and_keeps_the_link() {
    let t = Scratch::new("inplace-link");
    let real = t.write("real.xml", cloudstack_text());
    let link = t.path("link.xml");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let expected = rewrite(&["--policy", &default_policy(), &s(&real)])
        .args(&NO_QEMU_CACHE)
        .run();
    let out = rewrite(&["--policy", &default_policy(), "--in-place", &s(&link)])
        .args(&NO_QEMU_CACHE)
        .run();
    out.status(0);
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink(),
        "the link stays a link"
    );
    assert_eq!(std::fs::read_to_string(&real).unwrap(), expected.stdout);
}

#[test]
fn check_json_reports_the_mode() {
    let t = Scratch::new("json-mode");
    let f = t.write("guest.xml", cloudstack_text());
    let audit = t.write(
        "audit.toml",
        "mode = \"audit\"\n[[rule]]\nname = \"v2\"\ncpu.min_level = \"x86-64-v2\"\n",
    );
    for (policy, mode) in [(default_policy(), "enforce"), (s(&audit), "audit")] {
        let out = check(&["--policy", &policy, "--format", "json", &s(&f)])
            .args(&NO_QEMU_CACHE)
            .run();
        let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
        assert_eq!(v["mode"], mode, "{}", out.stdout);
        assert_eq!(v["verdict"], "needs-rewrite");
    }
}

#[test]
fn in_place_leaves_a_conforming_file_untouched() {
    let t = Scratch::new("inplace-noop");
    let f = t.write("guest.xml", CONFORMING);
    let old = SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(&f)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let before = std::fs::metadata(&f).unwrap();
    let out = rewrite(&["--policy", &default_policy(), "--in-place", &s(&f)])
        .args(&NO_QEMU_CACHE)
        .run();
    out.status(0);
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    let after = std::fs::metadata(&f).unwrap();
    assert_eq!(
        after.modified().unwrap(),
        before.modified().unwrap(),
        "mtime unchanged"
    );
    assert_eq!(after.ino(), before.ino(), "same inode: not replaced");
    assert_eq!(std::fs::read_to_string(&f).unwrap(), CONFORMING);
    assert_eq!(t.names(), vec!["guest.xml".to_string()]);
}

#[test]
fn in_place_leaves_the_file_untouched_when_it_cannot_conform() {
    let t = Scratch::new("inplace-refused");
    let f = t.write("guest.xml", TWO_NUMA);
    let before = std::fs::metadata(&f).unwrap();
    let out = rewrite(&["--policy", &default_policy(), "--in-place", &s(&f)]).run();
    refused(&out, 1, &["numa"]);
    assert_eq!(std::fs::read_to_string(&f).unwrap(), TWO_NUMA);
    assert_eq!(std::fs::metadata(&f).unwrap().ino(), before.ino());
    assert_eq!(t.names(), vec!["guest.xml".to_string()]);
}

#[test]
fn in_place_with_stdin_is_bad_usage() {
    let out = rewrite(&["--policy", &default_policy(), "--in-place"])
        .stdin(cloudstack_text())
        .run();
    bad_input(&out, &["in-place"]);
    let out = rewrite(&["--policy", &default_policy(), "--in-place", "-"])
        .stdin(cloudstack_text())
        .run();
    bad_input(&out, &["in-place"]);
}

#[test]
fn diff_prints_only_a_unified_diff() {
    let t = Scratch::new("diff");
    let f = t.write("guest.xml", cloudstack_text());
    let out = rewrite(&["--policy", &default_policy(), "--diff", &s(&f)])
        .args(&NO_QEMU_CACHE)
        .run();
    out.status(0);
    no_panic(&out);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(lines.len() > 3, "{}", out.stdout);
    assert!(lines[0].starts_with("--- "), "{}", out.stdout);
    assert!(lines[1].starts_with("+++ "), "{}", out.stdout);
    assert!(lines[2].starts_with("@@ "), "{}", out.stdout);
    for l in &lines {
        assert!(
            l.starts_with(['+', '-', ' ', '@', '\\']),
            "not a unified-diff line: {l:?}\n{}",
            out.stdout
        );
    }
    for f in ["lahf_lm", "popcnt", "sse4.1", "sse4.2", "ssse3"] {
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with('+') && l.contains(&format!("name='{f}'"))),
            "no + line for {f}:\n{}",
            out.stdout
        );
    }
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with('-') && l.contains("<cpu>")),
        "the old <cpu> line is removed:\n{}",
        out.stdout
    );
    // Most of the document is not in the diff.
    assert!(!out.stdout.contains("<graphics"), "{}", out.stdout);
    assert_eq!(
        std::fs::read_to_string(&f).unwrap(),
        cloudstack_text(),
        "file untouched"
    );
    // A conforming domain gives an empty diff.
    let out = rewrite(&["--policy", &default_policy(), "--diff"])
        .stdin(CONFORMING)
        .args(&NO_QEMU_CACHE)
        .run();
    out.status(0);
    assert!(out.stdout.trim().is_empty(), "{}", out.stdout);
}

#[test]
fn explain_goes_to_stderr_and_stdout_stays_the_exact_xml() {
    let p = default_policy();
    let c = s(&cloudstack());
    let plain = rewrite(&["--policy", &p, &c]).args(&NO_QEMU_CACHE).run();
    plain.status(0);
    let out = rewrite(&["--policy", &p, "--explain", &c])
        .args(&NO_QEMU_CACHE)
        .run();
    out.status(0);
    assert_eq!(
        out.stdout, plain.stdout,
        "stdout is the same document with --explain"
    );
    for needle in ["x86-64-v2 baseline", "lahf_lm", "qemu64"] {
        assert!(
            out.stderr.contains(needle),
            "stderr should explain {needle}:\n{}",
            out.stderr
        );
    }
    no_panic(&out);
    // A conforming domain: stdout identical to the input, stderr says nothing changes.
    let out = rewrite(&["--policy", &p, "--explain"])
        .stdin(CONFORMING)
        .args(&NO_QEMU_CACHE)
        .run();
    out.status(0);
    assert_eq!(out.stdout, CONFORMING);
    assert!(
        !out.stderr.trim().is_empty(),
        "--explain says the domain conforms"
    );
}

// ---------------------------------------------------------------------------------------------
// A closed stdout
// ---------------------------------------------------------------------------------------------

#[test]
fn closed_stdout_is_a_clear_error_not_a_panic() {
    // About 1.7 MB of output: far more than a pipe buffer holds.
    let text = cloudstack_text();
    let pad: String = (0..20_000)
        .map(|i| {
            format!("<!-- padding line {i} xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx -->\n")
        })
        .collect();
    let big = text.replace("<devices>", &format!("{pad}<devices>"));
    let mut child = Command::new(bin())
        .args(["rewrite", "--policy", &default_policy(), "-"])
        .args(NO_QEMU_CACHE)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    // Close the read end of stdout before the tool has any input to work on.
    drop(child.stdout.take());
    let mut w = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let _ = w.write_all(big.as_bytes());
    });
    let out = child.wait_with_output().expect("wait");
    writer.join().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("panicked"),
        "panic on a closed stdout:\n{stderr}"
    );
    assert_eq!(out.status.code(), Some(2), "exit code; stderr:\n{stderr}");
    assert!(
        stderr.contains("standard output") || stderr.contains("stdout"),
        "the message names standard output:\n{stderr}"
    );
    // Besides the document's warnings (`rewrite` writes them to stderr: here `not-compared`,
    // no host CPU being given), one message.
    assert_eq!(
        stderr
            .trim_end()
            .lines()
            .filter(|l| !l.contains("warning["))
            .count(),
        1,
        "one message:\n{stderr}"
    );
}

// ---------------------------------------------------------------------------------------------
// `host`
// ---------------------------------------------------------------------------------------------

#[test]
#[cfg_attr(
    not(vcp_shared_corpus),
    ignore = "needs ../shared/corpus beside the checkout"
)]
fn host_reports_machines_and_host_model_from_the_corpus() {
    let c = shared_corpus();
    let dir = c.join("host-libvirt-9.0-qemu-7.2");
    let caps = s(&dir.join("capabilities.xml"));
    let dcaps = s(&dir.join("domcapabilities-x86_64-q35-kvm.xml"));
    let out = Cmd::new(&[
        "host",
        "--policy",
        &default_policy(),
        "--caps",
        &caps,
        "--caps",
        &dcaps,
    ])
    .run();
    out.status(0);
    no_panic(&out);
    // Families folded into version ranges under their source, aliases resolved.
    let x86 = out
        .stdout
        .split("machine types (x86_64) from ")
        .nth(1)
        .expect("an x86_64 machine group");
    assert!(x86.starts_with(&format!("{caps}:\n")), "{}", out.stdout);
    for line in [
        "  pc-i440fx-1.4…7.2: 255\n",
        "  pc-q35-2.4…2.7: 255\n",
        "  pc-q35-2.8…7.2: 288\n",
        "  aliases: pc → pc-i440fx-7.2, q35 → pc-q35-7.2\n",
    ] {
        assert!(x86.contains(line), "{line:?} in:\n{}", out.stdout);
    }
    // The arm boards are counted, not listed.
    assert!(
        out.stdout.contains("unversioned machine types (boards)") && !out.stdout.contains("raspi"),
        "{}",
        out.stdout
    );
    let verbose = Cmd::new(&[
        "host",
        "--verbose",
        "--policy",
        &default_policy(),
        "--caps",
        &caps,
    ])
    .arg("--no-qemu-caps-cache")
    .run();
    verbose.status(0);
    for line in [
        "  pc-q35-7.2: 288\n",
        "  pc-q35-2.7: 255\n",
        "  raspi3b: 4\n",
    ] {
        assert!(
            verbose.stdout.contains(line),
            "{line:?} in:\n{}",
            verbose.stdout
        );
    }
    let json = Cmd::new(&["host", "--format", "json", "--policy", &default_policy()])
        .args(&["--caps", &caps, "--caps", &dcaps, "--no-qemu-caps-cache"])
        .args(&["--libvirt-version", "9.0.0"])
        .run();
    json.status(0);
    let v: serde_json::Value = serde_json::from_str(&json.stdout).expect("one JSON object");
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["libvirt_version"]["value"], "9.0.0");
    assert_eq!(v["libvirt_version"]["source"], "--libvirt-version");
    let q35 = v["machines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "pc-q35-7.2" && m["arch"] == "x86_64")
        .expect("pc-q35-7.2 listed");
    assert_eq!(q35["max_cpus"], 288);
    assert_eq!(v["domcapabilities"][0]["host_model"]["model"], "kvm64");
    assert_eq!(v["domcapabilities"][0]["host_model"]["level"], "x86-64-v1");
    assert!(
        out.stdout.lines().any(|l| l.contains("domcapabilities")
            && l.contains("pc-q35-7.2")
            && l.contains("288")),
        "domcapabilities line:\n{}",
        out.stdout
    );
    assert!(
        out.stdout
            .lines()
            .any(|l| l.trim_start().starts_with("host-model:") && l.contains("kvm64")),
        "host-model line:\n{}",
        out.stdout
    );
    assert!(
        out.stdout.contains(&caps) && out.stdout.contains(&dcaps),
        "sources shown"
    );
}

/// The libvirt version is a host fact with a source: `--libvirt-version`, else a `<hostFacts
/// libvirt=...>` file (`--caps`), else `<selfvers>` of libvirt's QEMU capability cache.
#[test]
fn host_libvirt_version_comes_from_override_then_host_facts_then_the_cache() {
    let t = Scratch::new("version-order");
    let caps = "<capabilities><host><cpu><arch>x86_64</arch></cpu></host><guest><arch name='x86_64'>\
                <machine maxCpus='288'>pc-q35-7.2</machine></arch></guest></capabilities>";
    let facts = t.write(
        "node-1.xml",
        format!("<hostFacts name='node-1' libvirt='11.3.0'>\n{caps}\n</hostFacts>\n"),
    );
    std::fs::create_dir_all(t.path("cache")).unwrap();
    t.write(
        "cache/qemu-x86_64.xml",
        "<qemuCaps>\n<emulator>/usr/bin/qemu-system-x86_64</emulator>\n<selfvers>9000000</selfvers>\n</qemuCaps>\n",
    );
    let version = |extra: &[&str]| {
        let out = Cmd::new(&["host", "--format", "json", "--policy", &default_policy()])
            .args(&["--qemu-caps-cache", &s(&t.path("cache"))])
            .args(extra)
            .run();
        out.status(0);
        let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("one JSON object");
        (
            v["libvirt_version"]["value"].as_str().unwrap().to_string(),
            v["libvirt_version"]["source"].as_str().unwrap().to_string(),
        )
    };
    let f = s(&facts);
    assert_eq!(
        version(&["--caps", &f, "--libvirt-version", "10.10"]),
        ("10.10.0".into(), "--libvirt-version".into())
    );
    assert_eq!(
        version(&["--caps", &f]),
        (
            "11.3.0".into(),
            format!("<hostFacts libvirt='11.3.0'> in {f}")
        )
    );
    assert_eq!(
        version(&[]),
        (
            "9.0.0".into(),
            format!("<selfvers> in {}", s(&t.path("cache/qemu-x86_64.xml")))
        )
    );
    // The text report says the same, and the hostFacts file's machine types count.
    let out = Cmd::new(&[
        "host",
        "--verbose",
        "--policy",
        &default_policy(),
        "--caps",
        &f,
    ])
    .arg("--no-qemu-caps-cache")
    .run();
    out.status(0);
    assert!(
        out.stdout.contains(&format!(
            "libvirt: 11.3.0 (from <hostFacts libvirt='11.3.0'> in {f})\n"
        )) && out.stdout.contains("  pc-q35-7.2: 288\n"),
        "{}",
        out.stdout
    );
    // A version that is not one: exit 2, one line naming the file.
    let bad = t.write(
        "bad.xml",
        format!("<hostFacts libvirt='eleven'>{caps}</hostFacts>"),
    );
    let out = Cmd::new(&["host", "--policy", &default_policy(), "--caps", &s(&bad)]).run();
    out.status(2);
    assert!(
        out.stderr.lines().count() == 1
            && out.stderr.contains("bad.xml")
            && out.stderr.contains("'eleven'"),
        "{}",
        out.stderr
    );
}

#[test]
fn libvirt_version_takes_major_minor_micro_with_parts_left_out() {
    for ok in ["11.3.0", "11.3", "11"] {
        let out = Cmd::new(&["host", "--no-qemu-caps-cache", "--libvirt-version", ok]).run();
        out.status(0);
    }
    for bad in [" 11.3", "11.3 ", "+11", "11..3", "1.2.3.4"] {
        let out = Cmd::new(&["host", "--no-qemu-caps-cache", "--libvirt-version", bad]).run();
        out.status(2);
        assert!(out.stdout.is_empty(), "{}", out.stdout);
        assert!(
            out.stderr
                .contains("is not a libvirt version: MAJOR[.MINOR[.MICRO]], digits only"),
            "{bad:?}:\n{}",
            out.stderr
        );
    }
}

#[test]
#[cfg_attr(
    not(vcp_shared_corpus),
    ignore = "needs ../shared/corpus beside the checkout"
)]
fn host_says_what_it_does_not_know() {
    let c = shared_corpus();
    let caps = c.join("virt-manager/capabilities");
    let host = |args: &[&str]| {
        let out = Cmd::new(&[
            "host",
            "--policy",
            &default_policy(),
            "--no-qemu-caps-cache",
        ])
        .args(args)
        .run();
        out.status(0);
        no_panic(&out);
        out.stdout
    };
    // Machine types without maxCpus: said, never an empty group.
    let no_kvm = s(&caps.join("test-qemu-no-kvm.xml"));
    let text = host(&["--caps", &no_kvm]);
    let lines: Vec<&str> = text.lines().collect();
    for pair in lines.windows(2) {
        assert!(
            !pair[0].starts_with("machine types (") || pair[1].starts_with("  "),
            "an empty machine-type group: {:?}\n{text}",
            pair[0]
        );
    }
    assert!(
        text.contains("machine types (arm) from ")
            && text.contains("  none of its 24 machine types gives a vCPU limit (no maxCpus)\n"),
        "{text}"
    );
    let verbose = host(&["--verbose", "--caps", &no_kvm]);
    assert!(
        verbose.contains("  malta: limit unknown (no maxCpus)\n"),
        "{verbose}"
    );
    // psABI levels are x86's.
    let ppc = s(&caps.join("kvm-ppc64le-domcaps.xml"));
    let text = host(&["--caps", &ppc]);
    assert!(
        text.contains(
            "  host-model: POWER8 + 0 required, 0 disabled (x86-64 levels apply to x86 only)\n"
        ) && !text.contains("x86-64-v1"),
        "{text}"
    );
    // No machine type, no CPU modes.
    let bhyve = s(&caps.join("bhyve-domcaps.xml"));
    let text = host(&["--caps", &bhyve]);
    assert!(
        text.contains(
            "domcapabilities: x86_64 bhyve (no machine type): vcpu max unknown, modes none (from "
        ),
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_str(&host(&[
        "--format",
        "json",
        "--caps",
        &bhyve,
        "--caps",
        &ppc,
        "--host-cpus",
        "8",
        "--kvm-max-vcpus",
        "1024",
        "--libvirt-version",
        "11.3",
    ]))
    .expect("one JSON object");
    assert_eq!(
        json["domcapabilities"][0]["machine"],
        serde_json::Value::Null
    );
    assert_eq!(
        json["domcapabilities"][1]["host_model"]["level"],
        serde_json::Value::Null
    );
    // Counts are numbers, a version a string.
    assert_eq!(json["host_cpus"]["value"], 8);
    assert_eq!(json["kvm_max_vcpus"]["value"], 1024);
    assert_eq!(json["libvirt_version"]["value"], "11.3.0");
    // A --libvirt-version is another host's: it says nothing about this cpu_map; the cache that
    // was not read names no version.
    let text = host(&["--libvirt-version", "11.3.0"]);
    let cpu_map = text.lines().find(|l| l.starts_with("cpu_map: ")).unwrap();
    assert!(!cpu_map.contains("11.3.0"), "{cpu_map}");
    let text = host(&[]);
    assert!(
        text.contains(
            "libvirt: unknown (give --libvirt-version, or a <hostFacts libvirt=...> file with --caps: libvirt's QEMU capability cache was not read"
        ),
        "{text}"
    );
    // A file of libvirt's QEMU capability cache is named by a hash: its emulator labels it.
    let t = Scratch::new("host-cache");
    let cached = t.path("926803a9278e445ec919c2b6cbd8c1c449c75b26dcb1686b774314180376c725.xml");
    std::fs::copy(
        c.join("host-libvirt-9.0-qemu-7.2/qemucaps-x86_64.xml"),
        &cached,
    )
    .unwrap();
    let out = Cmd::new(&[
        "host",
        "--policy",
        &default_policy(),
        "--qemu-caps-cache",
        &s(&t.0),
    ])
    .run();
    out.status(0);
    let header = format!(
        "machine types (x86_64; kvm, qemu) from /usr/bin/qemu-system-x86_64 (capability cache {}):\n",
        cached.display()
    );
    assert!(
        out.stdout.contains(&header),
        "{header:?} in:\n{}",
        out.stdout
    );
}

// ---------------------------------------------------------------------------------------------
// The documentation (docs/) says what the tool does
// ---------------------------------------------------------------------------------------------

/// The page `docs/NAME`.
fn doc(name: &str) -> String {
    std::fs::read_to_string(root().join("docs").join(name)).unwrap()
}

/// The text of `text` between the first `after` and the next `until`.
#[track_caller]
fn between<'t>(text: &'t str, after: &str, until: &str) -> &'t str {
    text.split_once(after)
        .and_then(|(_, rest)| rest.split(until).next())
        .unwrap_or_else(|| panic!("no {after:?} … {until:?}"))
}

/// The subcommands of `virt-cpu-policy`, as clap (and so `--help`, the man pages) knows them.
fn subcommands() -> Vec<String> {
    use clap::CommandFactory;
    virt_cpu_policy::cli::Cli::command()
        .get_subcommands()
        .filter(|c| !c.is_hide_set())
        .map(|c| c.get_name().to_string())
        .collect()
}

#[test]
fn docs_name_every_subcommand_in_the_synopsis_and_the_man_pages() {
    let commands = doc("commands.md");
    let synopsis = between(&commands, "## Synopsis\n\n```text\n", "```");
    let installing = doc("installing.md");
    let man_row = installing
        .lines()
        .find(|l| l.contains("/usr/share/man/man8/virt-cpu-policy{"))
        .expect("docs/installing.md's man page row");
    let pages = between(man_row, "virt-cpu-policy{", "}");
    let packaging = std::fs::read_to_string(root().join("tests/packaging/run")).unwrap();
    let subs = subcommands();
    assert!(subs.len() >= 7, "{subs:?}");
    for sub in &subs {
        assert!(
            synopsis
                .lines()
                .any(|l| l.starts_with(&format!("virt-cpu-policy {sub} "))),
            "the Commands synopsis has no line for {sub}:\n{synopsis}"
        );
        assert!(
            pages.split(',').any(|p| p == format!("-{sub}")),
            "docs/installing.md's man pages omit virt-cpu-policy-{sub}.8: {man_row}"
        );
        assert!(
            packaging.contains(&format!(" virt-cpu-policy-{sub}")),
            "tests/packaging/run does not check virt-cpu-policy-{sub}.8"
        );
    }
}

#[test]
fn warnings_go_where_the_docs_say() {
    let page = doc("exit-codes.md");
    let table = between(&page, "Where each command puts them:\n\n", "\n\n");
    for sub in subcommands() {
        assert!(
            table.contains(&format!("`{sub}`")),
            "docs/exit-codes.md does not say where `{sub}` puts warnings:\n{table}"
        );
    }
    // A warning (topology-clusters) and no error: `rewrite` on stderr, `check` in its report.
    let case = root().join("tests/cases/topology-clusters-ignored-libvirt-9.0");
    let args = [
        "--policy".to_string(),
        s(&case.join("policy.toml")),
        "--no-qemu-caps-cache".into(),
        "--libvirt-version".into(),
        "9.0.0".into(),
        s(&case.join("input.xml")),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = rewrite(&args).run();
    out.status(0);
    assert!(
        out.stderr
            .contains("virt-cpu-policy: guest 'vcp-golden-clusters': warning[topology-clusters]: "),
        "{}",
        out.stderr
    );
    assert!(!out.stdout.contains("warning["), "{}", out.stdout);
    let out = check(&args).run();
    out.status(0);
    assert!(
        out.stdout.contains("\n  warning[topology-clusters]: "),
        "{}",
        out.stdout
    );
    assert!(out.stderr.is_empty(), "{}", out.stderr);
}

/// The names of the `name="value"` fields in `text`.
fn quoted_fields(text: &str) -> std::collections::BTreeSet<String> {
    text.match_indices("=\"")
        .map(|(i, _)| {
            text[..i]
                .chars()
                .rev()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect::<String>()
                .chars()
                .rev()
                .collect::<String>()
        })
        .filter(|k| !k.is_empty())
        .collect()
}

#[test]
fn docs_describe_the_hook_log_file_as_written() {
    let t = Scratch::new("hook-log-format");
    let log = t.path("hook.log");
    let out = Cmd::new(&[
        "hook",
        "--policy",
        &default_policy(),
        "--no-qemu-caps-cache",
    ])
    .args(&["--snapshot-dir", &s(&t.path("snap"))])
    .args(&["--log-file", &s(&log), "i-2-14-VM", "prepare", "begin", "-"])
    .stdin(cloudstack_text())
    .run();
    out.status(0);
    let line = std::fs::read_to_string(&log).unwrap();
    let written = quoted_fields(&line);
    assert!(
        written.contains("rule") && written.contains("code"),
        "{line}"
    );
    let page = doc("journal.md");
    let said = between(&page, "Without journald the hook writes", "\n\n");
    assert_eq!(
        quoted_fields(said),
        written,
        "docs/journal.md:\n{said}\nthe log file:\n{line}"
    );
}

// ---------------------------------------------------------------------------------------------
// Scope and audit
// ---------------------------------------------------------------------------------------------

#[test]
fn out_of_scope_types_pass_through_byte_identical() {
    for t in ["xen", "lxc", "test"] {
        // Things that would be rewritten for kvm: two <cpu>, host-passthrough, no model.
        let x = format!(
            "<domain type=\"{t}\">\n\t<name>g-{t}</name>\n  <os><type arch='x86_64'>hvm</type></os>\n  <cpu mode='host-passthrough'/>\n  <cpu><feature name='svm' policy='disable'/></cpu>\n</domain>"
        );
        let out = rewrite(&["--policy", &default_policy()])
            .stdin(x.clone())
            .run();
        out.status(0);
        assert_eq!(out.stdout, x, "type {t}");
        let out = rewrite(&["--policy", &default_policy(), "--explain"])
            .stdin(x.clone())
            .run();
        out.status(0);
        assert_eq!(out.stdout, x, "type {t} with --explain");
        assert!(
            out.stderr.contains(&format!("'{t}'")) && out.stderr.contains("unchanged"),
            "--explain says {t} is passed through unchanged:\n{}",
            out.stderr
        );
        let c = check(&["--policy", &default_policy(), "--format", "json"])
            .stdin(x.clone())
            .run();
        c.status(0);
        assert_eq!(json_verdict(&c), ("out-of-scope".to_string(), 0));
    }
}

#[test]
fn audit_mode_reports_but_writes_the_input() {
    let t = Scratch::new("audit");
    let pol = t.write(
        "policy.toml",
        "version = 1\nmode = \"audit\"\n\n[[rule]]\nname = \"v2 audit\"\nmatch = { arch = \"x86_64\" }\ncpu.min_level = \"x86-64-v2\"\n",
    );
    let c = s(&cloudstack());
    let out = rewrite(&["--policy", &s(&pol), &c])
        .args(&NO_QEMU_CACHE)
        .run();
    out.status(0);
    no_panic(&out);
    assert_eq!(out.stdout, cloudstack_text(), "audit: stdout is the input");
    for needle in ["v2 audit", "lahf_lm", "ssse3"] {
        assert!(
            out.stderr.contains(needle),
            "stderr lists {needle}:\n{}",
            out.stderr
        );
    }
    // --in-place under audit leaves the file alone.
    let f = t.write("guest.xml", cloudstack_text());
    let before = std::fs::metadata(&f).unwrap();
    let out = rewrite(&["--policy", &s(&pol), "--in-place", &s(&f)])
        .args(&NO_QEMU_CACHE)
        .run();
    out.status(0);
    assert_eq!(std::fs::read_to_string(&f).unwrap(), cloudstack_text());
    assert_eq!(std::fs::metadata(&f).unwrap().ino(), before.ino());
}

/// A qemuCaps cache file for `emulator` listing `machines` under `kvm`, with `ctime` as its
/// `<qemuctime>`.
fn qemu_caps_file(emulator: &Path, ctime: i64, machines: &[&str]) -> String {
    let lines: String = machines
        .iter()
        .map(|m| format!("  <machine type='kvm' name='{m}' maxCpus='288'/>\n"))
        .collect();
    format!(
        "<qemuCaps>\n  <emulator>{}</emulator>\n  <qemuctime>{ctime}</qemuctime>\n  <selfvers>9000000</selfvers>\n  <arch>x86_64</arch>\n{lines}</qemuCaps>\n",
        emulator.display()
    )
}

#[test]
fn machine_type_the_emulator_lacks_is_refused_only_with_a_fresh_cache() {
    let dir = Scratch::new("machine-cache");
    let emulator = dir.write("qemu-system-x86_64", "not a real QEMU");
    let ctime = std::fs::metadata(&emulator).unwrap().ctime();
    let cache = dir.path("caps");
    std::fs::create_dir(&cache).unwrap();
    let dom = |machine: &str| {
        dir.write(
            &format!("{machine}.xml"),
            format!(
                "<domain type='kvm'><name>m</name><memory>1048576</memory><vcpu>2</vcpu><os><type arch='x86_64' machine='{machine}'>hvm</type></os><devices><emulator>{}</emulator></devices></domain>",
                emulator.display()
            ),
        )
    };
    let check = |machine: &str| {
        Cmd::new(&["check", "--policy"])
            .arg(s(&dir.write("p.toml", "version = 1\n")))
            .arg("--qemu-caps-cache")
            .arg(s(&cache))
            .arg(s(&dom(machine)))
            .run()
    };
    let caps = cache.join("a.xml");
    std::fs::write(&caps, qemu_caps_file(&emulator, ctime, &["pc-q35-7.2"])).unwrap();
    let out = check("pc-q35-10.0");
    out.status(1);
    assert!(
        out.stdout.contains(&format!(
            "error[machine-unsupported]: Emulator '{}' does not support machine type 'pc-q35-10.0'",
            emulator.display()
        )),
        "{}",
        out.stdout
    );
    check("pc-q35-7.2").status(0);
    // audit names no vCPU limit for it: the built-in family rule (pc-q35 ≥ 9.0: 4096) would
    // invent one for a machine type the emulator does not have.
    let audit = Cmd::new(&["audit", "--format", "json", "--policy"])
        .arg(s(&dir.path("p.toml")))
        .arg("--qemu-caps-cache")
        .arg(s(&cache))
        .arg(s(&dom("pc-q35-10.0")))
        .run();
    audit.status(1);
    let v: serde_json::Value = serde_json::from_str(&audit.stdout).unwrap();
    assert_eq!(
        v["guests"][0]["verdict"], "cannot-conform",
        "{}",
        audit.stdout
    );
    assert_eq!(
        v["guests"][0]["machine_limit"],
        serde_json::Value::Null,
        "{}",
        audit.stdout
    );
    // The hook leaves it to libvirt, which checked it at define and checks it again at start.
    let hook = Cmd::new(&["hook", "--policy", &s(&dir.path("p.toml"))])
        .args(&["--qemu-caps-cache", &s(&cache)])
        .args(&["--log-file", &s(&dir.path("hook.log"))])
        .args(&["--snapshot-dir", &s(&dir.path("snap"))])
        .args(&["m", "prepare", "begin", "-"])
        .stdin(std::fs::read(dom("pc-q35-10.0")).unwrap())
        .run();
    hook.status(0);
    // A cache older than the binary (QEMU upgraded, libvirt not yet restarted) says nothing.
    std::fs::write(&caps, qemu_caps_file(&emulator, ctime - 1, &["pc-q35-7.2"])).unwrap();
    check("pc-q35-10.0").status(0);
    // A mistyped cache directory is said, not taken for an empty cache.
    let missing = dir.path("no-such-dir");
    let out = Cmd::new(&["check", "--policy", &s(&dir.path("p.toml"))])
        .arg("--qemu-caps-cache")
        .arg(s(&missing))
        .arg(s(&dom("pc-q35-10.0")))
        .run();
    out.status(2);
    assert!(
        out.stdout.is_empty()
            && out.stderr.lines().count() == 1
            && out.stderr.contains("not a directory"),
        "{}",
        out.stderr
    );
}

/// Where the floor of the guest's OS was not judged, `check` says so and names why; where it
/// was, the OS and what it needs; where a rule waives it, the rule (docs/os-floor.md). Text and
/// JSON alike, on the shipped CloudStack example (no OS named) and the golden cases' RHEL 10
/// guests.
#[test]
fn check_says_whether_the_os_floor_was_judged() {
    let case = |name: &str| root().join("tests/cases").join(name);
    let cpu_map = s(&root().join("tests/data/generations/bookworm/cpu_map"));
    let p = default_policy();
    // `check` of `dom` under `policy` with the recorded cpu_map, `caps` and nothing of this
    // machine: its stdout.
    let judged = |caps: &[String], policy: &str, dom: &Path, json: bool| {
        let mut args = vec![
            "--policy",
            policy,
            "--no-qemu-caps-cache",
            "--cpu-map",
            &cpu_map,
        ];
        for c in caps {
            args.extend(["--caps", c.as_str()]);
        }
        if json {
            args.extend(["--format", "json"]);
        }
        let d = s(dom);
        args.push(&d);
        let out = check(&args).run();
        no_panic(&out);
        out.stdout
    };
    let run = |policy: &str, dom: &Path, json: bool| judged(&[], policy, dom, json);
    let untagged = run(&p, &cloudstack(), false);
    let last = untagged.lines().last().unwrap_or_default();
    // The example names its OS (CloudStack's "Debian GNU/Linux 12 (64-bit)"), whose floor no
    // row knows (Debian 12 runs on x86-64-v1): said so, not "names no OS".
    assert!(
        last.starts_with(
            "  os floor: not judged: no floor is known for 'Debian GNU/Linux 12 (64-bit)'"
        ),
        "{untagged}"
    );
    let json: serde_json::Value = serde_json::from_str(&run(&p, &cloudstack(), true)).unwrap();
    assert_eq!(json["os"]["floor"], "not-judged", "{json}");
    assert_eq!(json["os"]["id"], serde_json::Value::Null, "{json}");
    assert!(
        json["os"]["why"]
            .as_str()
            .unwrap()
            .contains("no floor is known")
    );

    // The case's TCG guest, judged without its host's domcapabilities: its floor under TCG
    // (what QEMU drops with check='none') is not judged, for want of the TCG CPU.
    let rhel10 = case("os-floor-rhel10-libosinfo-raised-to-v3").join("input.xml");
    let text = run(&p, &rhel10, false);
    assert!(
        text.contains(
            "  os floor: not judged (rhel10.0 needs x86-64-v3): this host's TCG CPU is not known"
        ),
        "{text}"
    );
    // With them (the case's own args), it is.
    let bookworm = root().join("tests/data/generations/bookworm");
    let caps = [
        s(&bookworm.join("capabilities.xml")),
        s(&bookworm.join("domcapabilities-x86_64-q35-qemu.xml")),
    ];
    let run = |policy: &str, dom: &Path, json: bool| judged(&caps, policy, dom, json);
    let text = run(&p, &rhel10, false);
    assert!(
        text.ends_with("  os floor: judged (rhel10.0 needs x86-64-v3)\n"),
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_str(&run(&p, &rhel10, true)).unwrap();
    assert_eq!(
        (
            &json["os"]["id"],
            &json["os"]["source"],
            &json["os"]["needs"]
        ),
        (
            &serde_json::json!("http://redhat.com/rhel/10.0"),
            &serde_json::json!("libosinfo"),
            &serde_json::json!("x86-64-v3")
        ),
        "{json}"
    );
    assert_eq!(json["os"]["floor"], "judged");
    assert_eq!(json["os"]["why"], serde_json::Value::Null);

    let waived = case("os-floor-waived-by-policy");
    let text = run(
        &s(&waived.join("policy.toml")),
        &waived.join("input.xml"),
        false,
    );
    assert!(
        text.contains("  os floor: waived (rhel10.0 needs x86-64-v3): rule '"),
        "{text}"
    );
}

/// virt-install's own Windows 11 domains (the corpus's, tagged `http://microsoft.com/win/11`),
/// judged with libvirt 9.0's captured facts (tests/data/generations/bookworm: a KVM whose
/// host-passthrough CPU lacks popcnt and sse4.2): each x86_64 one says its floor was judged and
/// what it needs, and where the CPU is this host's own (host-passthrough) and lacks it, the
/// `os-floor` error names Windows 11's floor; the aarch64 one says the floor was not judged.
#[test]
#[cfg_attr(
    not(vcp_shared_corpus),
    ignore = "needs ../shared/corpus beside the checkout"
)]
fn virt_installs_windows_11_domains_are_judged_against_their_floor() {
    let domains = crate::harness::shared_corpus().join("virt-manager/domains");
    let g = root().join("tests/data/generations/bookworm");
    let (map, caps, kvm) = (
        s(&g.join("cpu_map")),
        s(&g.join("capabilities.xml")),
        s(&g.join("domcapabilities-x86_64-q35-kvm.xml")),
    );
    let mut seen = 0;
    for entry in std::fs::read_dir(&domains).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        if !text.contains("id=\"http://microsoft.com/win/11\"") {
            continue;
        }
        seen += 1;
        let args = [
            "--no-qemu-caps-cache",
            "--cpu-map",
            &map,
            "--caps",
            &caps,
            "--caps",
            &kvm,
            "--libvirt-version",
            "9.0.0",
            &s(&path),
        ];
        let out = check(&args).run();
        no_panic(&out);
        let last = out.stdout.lines().last().unwrap_or_default().to_string();
        if text.contains("arch=\"aarch64\"") {
            assert!(
                last.starts_with("  os floor: not judged (win11 needs sse4.2 + popcnt)"),
                "{}: {}",
                path.display(),
                out.stdout
            );
            continue;
        }
        assert_eq!(
            last,
            "  os floor: judged (win11 needs sse4.2 + popcnt)",
            "{}: {}",
            path.display(),
            out.stdout
        );
        if text.contains("mode=\"host-passthrough\"") {
            out.status(1);
            assert!(
                out.stdout
                    .contains("error[os-floor]: win11 needs sse4.2 + popcnt")
                    && out.stdout.contains("missing sse4.2, popcnt")
                    && out.stdout.contains("(rule 'the floor of win11')"),
                "{}: {}",
                path.display(),
                out.stdout
            );
        }
    }
    assert!(seen >= 6, "{seen} Windows 11 domains in the corpus");
}
