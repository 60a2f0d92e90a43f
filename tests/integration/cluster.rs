//! `baseline` and `compare` at the command line: data-driven golden cases under
//! `tests/baseline-cases/<name>/`, discovered at run time, and the exit-code contract.
//!
//! A case folder holds:
//! * `args` — the command and its arguments, one per line; `{corpus}` stands for
//!   `../shared/corpus` and `{cpu_map}` for libvirt's cpu_map (`VCP_GOLDEN_CPU_MAP`, default
//!   /usr/share/libvirt/cpu_map: the expected outputs were recorded with libvirt 9.0's). A case
//!   whose corpus or cpu_map is absent is skipped and says so; the test fails if none ran.
//! * `expected` — the expected stdout, with the same placeholders (empty or absent: nothing on
//!   stdout);
//! * `expected-exit` — optional `exit N` (default 0);
//! * `expected-stderr` — optional lines stderr must contain (a non-zero exit needs a message).
//!
//! The command runs in the case folder, so a case may bring its own facts files.
//! `BLESS=1 cargo test --test integration baseline_golden` rewrites `expected` from the output.

use crate::golden::{Case, cases_in};
use crate::harness::{Cmd, Scratch, corpus, exit_file, s};
use std::path::PathBuf;

/// libvirt's cpu_map the golden outputs are recorded with.
fn golden_cpu_map() -> PathBuf {
    std::env::var_os("VCP_GOLDEN_CPU_MAP").map_or_else(
        || PathBuf::from("/usr/share/libvirt/cpu_map"),
        PathBuf::from,
    )
}

/// Every case folder, sorted by name.
pub fn cases() -> Vec<Case> {
    cases_in("tests/baseline-cases", "args")
}

/// The placeholders of `case` and what they stand for, or None when one is needed and absent.
fn substitutions(case: &Case) -> Option<Vec<(&'static str, String)>> {
    let text = std::fs::read_to_string(case.dir.join("args")).ok()?;
    let mut subs = Vec::new();
    if text.contains("{corpus}") {
        subs.push(("{corpus}", s(&corpus()?)));
    }
    if text.contains("{cpu_map}") {
        let m = golden_cpu_map();
        if !m.join("index.xml").is_file() {
            return None;
        }
        subs.push(("{cpu_map}", s(&m)));
    }
    Some(subs)
}

fn args(case: &Case, subs: &[(&str, String)]) -> Vec<String> {
    let text = std::fs::read_to_string(case.dir.join("args")).unwrap();
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| subs.iter().fold(l.to_string(), |a, (k, v)| a.replace(k, v)))
        .collect()
}

/// The expected JSON of a `--format json` baseline case (placeholders left in place).
pub fn expected_json(case: &Case) -> Option<serde_json::Value> {
    let args = std::fs::read_to_string(case.dir.join("args")).ok()?;
    if !args.starts_with("baseline") || !args.lines().any(|l| l.trim() == "json") {
        return None;
    }
    let text = std::fs::read_to_string(case.dir.join("expected")).ok()?;
    serde_json::from_str(&text).ok()
}

fn check(case: &Case) -> Result<bool, String> {
    let Some(subs) = substitutions(case) else {
        eprintln!(
            "baseline golden {}: SKIPPED, needs ../shared/corpus and libvirt's cpu_map ({})",
            case.name,
            golden_cpu_map().display()
        );
        return Ok(false);
    };
    let out = Cmd::new(&args(case, &subs)).dir(&case.dir).run();
    // Put the placeholders back so the expected files hold no machine paths.
    let unsub = |t: &str| subs.iter().fold(t.to_string(), |a, (k, v)| a.replace(v, k));
    let stdout = unsub(&out.stdout);
    let stderr = unsub(&out.stderr);
    let ctx = |what: &str| {
        format!(
            "case {}: {what}\nstdout:\n{stdout}\nstderr:\n{stderr}\n(recorded with libvirt 9.0's cpu_map; VCP_GOLDEN_CPU_MAP names another)",
            case.name
        )
    };
    let want_exit = exit_file(&case.dir.join("expected-exit")).unwrap_or(0);
    let expected = case.dir.join("expected");
    if std::env::var_os("BLESS").is_some() && out.code == want_exit {
        std::fs::write(&expected, &stdout).unwrap();
    }
    if out.code != want_exit {
        return Err(ctx(&format!("exit {} (wanted {want_exit})", out.code)));
    }
    let want = std::fs::read_to_string(&expected).unwrap_or_default();
    if stdout != want {
        let diff = similar::TextDiff::from_lines(&want, &stdout)
            .unified_diff()
            .header("expected", "actual")
            .to_string();
        return Err(format!("case {}: stdout differs\n{diff}", case.name));
    }
    if let Ok(lines) = std::fs::read_to_string(case.dir.join("expected-stderr")) {
        for l in lines.lines().map(str::trim).filter(|l| !l.is_empty()) {
            if !stderr.contains(l) {
                return Err(ctx(&format!("stderr lacks `{l}`")));
            }
        }
    }
    if want_exit != 0 && stderr.lines().count() != 1 {
        return Err(ctx("a failure needs exactly one line on stderr"));
    }
    Ok(true)
}

#[test]
fn baseline_golden_cases() {
    crate::harness::run_cases("baseline golden", &cases(), check);
}

/// The toml output is a policy the tool itself loads, and its rule gives a guest the baseline.
#[test]
fn toml_output_is_a_working_policy() {
    let (Some(c), true) = (corpus(), golden_cpu_map().join("index.xml").is_file()) else {
        panic!("needs ../shared/corpus and libvirt's cpu_map (VCP_GOLDEN_CPU_MAP)");
    };
    let d = c.join("libvirt-cputestdata");
    let map = s(&golden_cpu_map());
    let out = Cmd::new(&["baseline", "--format", "toml", "--cpu-map", &map])
        .arg(s(&d.join("x86_64-cpuid-Xeon-E5-2650-v4-host.xml")))
        .arg(s(&d.join("x86_64-cpuid-Core-i7-3770-host.xml")))
        .run();
    out.status(0);
    let dir = Scratch::new("baseline-toml");
    let policy = dir.write("policy.toml", &out.stdout);
    let domain = dir.write(
        "d.xml",
        "<domain type='kvm'><name>g</name><vcpu>2</vcpu><os><type arch='x86_64' machine='q35'>hvm</type></os>\
         <cpu><topology sockets='1' cores='2' threads='1'/></cpu></domain>",
    );
    let rw = Cmd::new(&[
        "rewrite",
        "--no-qemu-caps-cache",
        "--cpu-map",
        &map,
        "--policy",
    ])
    .arg(s(&policy))
    .arg(s(&domain))
    .run();
    rw.status(0);
    assert!(
        rw.stdout
            .contains("<model fallback='forbid'>IvyBridge</model>")
            || rw.stdout.contains(">IvyBridge</model>"),
        "{}",
        rw.stdout
    );
    assert!(rw.stdout.contains("name='vmx'"), "{}", rw.stdout);
}

#[test]
fn bad_input_exits_2_with_one_line_and_no_stdout() {
    let dir = Scratch::new("baseline-bad");
    let not_facts = dir.write("n.xml", "<domain type='kvm'/>");
    let broken = dir.write("b.xml", "<cpu><arch>x86_64</arch>");
    let fifo_dir = dir.path("empty");
    std::fs::create_dir_all(&fifo_dir).unwrap();
    for args in [
        vec!["baseline".to_string(), s(&not_facts)],
        vec!["baseline".to_string(), s(&broken)],
        vec!["baseline".to_string(), s(&fifo_dir)],
        vec!["baseline".to_string(), s(&dir.path("missing.xml"))],
        vec![
            "baseline".into(),
            "--cpu-map".into(),
            s(&dir.0),
            s(&not_facts),
        ],
        vec![
            "compare".into(),
            "--host".into(),
            s(&not_facts),
            s(&not_facts),
        ],
    ] {
        let out = Cmd::new(&args).run();
        assert_eq!(out.code, 2, "{args:?}: {}", out.stderr);
        assert!(out.stdout.is_empty(), "{args:?}: {}", out.stdout);
        assert_eq!(out.stderr.lines().count(), 1, "{args:?}: {}", out.stderr);
    }
    // A cpu_map that is not one: still one line (when the facts are x86).
    let Some(c) = corpus() else { return };
    let host = c.join("libvirt-cputestdata/x86_64-cpuid-Xeon-E5-2650-v4-host.xml");
    let out = Cmd::new(&["baseline", "--cpu-map"])
        .arg(s(&dir.0))
        .arg(s(&host))
        .run();
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("index.xml"), "{}", out.stderr);
}
