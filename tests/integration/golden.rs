//! Data-driven golden cases: one folder per case, discovered at run time, in one format for both
//! suites. This file is the harness; `cluster.rs` runs the `baseline`/`compare` suite with it.
//!
//! * `tests/cases/NAME/` — `rewrite` and `check` of one domain:
//!   * `input.xml` — the domain (a folder with one is a case);
//!   * `policy.toml` — optional; without it the shipped default policy (`packaging/policy.toml`);
//!   * `args` — optional arguments for both commands;
//!   * `rewrite-args` — optional arguments for `rewrite` only (`--explain`);
//!   * `expected-changes.json` — the `changes` of `check --format json` on the input, each without
//!     its sentence (`what`): the structured record a program reads. Every case `check` reports
//!     on has one; a case refused with exit 2 has none (and `check` must refuse it too);
//!   * `expected-check` — optional `exit N`: the exit code of `check` on `expected-stdout`
//!     (default 0; an audit-mode policy leaves the document as it was, so 3);
//!   * `oracle-start` — optional, for a case whose `args` name `--libvirt-version`: lines `input
//!     starts`, `input refused: TEXT` or `output starts`, what a real `virsh define` + `virsh
//!     start` of the input and of `expected-stdout` give on that libvirt (`tcg.rs` checks them).
//!
//!   The command is `rewrite --policy POLICY ARGS REWRITE-ARGS input.xml`, with
//!   `--cpu-map {cpu_map}` and `--no-qemu-caps-cache` unless `args` gives its own: the outputs
//!   depend on nothing of the machine's libvirt. When it exits 0 its
//!   output must be a fixed point: `rewrite` of `expected-stdout` is byte-identical, and `check`
//!   of it exits as `expected-check` says. When it fails, stdout is empty and stderr says why.
//! * `tests/baseline-cases/NAME/` — `baseline` and `compare`:
//!   * `args` — the command and its arguments (a folder with one is a case); the case may bring
//!     its own facts files and domains, named relative to its folder. A failure has exactly one
//!     line on stderr.
//!
//! In both suites:
//! * `args` (and `rewrite-args`) hold one argument a line; `{corpus}` stands for
//!   `../shared/corpus` and `{cpu_map}` for the cpu_map the outputs were recorded with, libvirt
//!   9.0.0's in `tests/data/generations/bookworm/cpu_map` (`VCP_GOLDEN_CPU_MAP` names another);
//! * the command runs in the case folder, and the paths the placeholders stand for (and the
//!   project root, `{root}`) are put back into what it prints before comparing;
//! * `expected-stdout` — stdout, exactly (absent: empty);
//! * `expected-stderr` — stderr, exactly (absent: empty);
//! * `expected-exit` — `exit N` (absent: 0).
//!
//! A case whose `args` name `{corpus}` runs in the test `…_with_the_shared_corpus`, which is
//! ignored, and says why, when `../shared/corpus` is not beside the checkout (cfg
//! `vcp_shared_corpus`, set by `build.rs`); run anyway (`--include-ignored`, as CI does), it
//! fails. No case is ever skipped while its test passes.
//!
//! `BLESS=1 cargo test --test integration golden` (or `cargo xtask bless`) writes every expected
//! file of both suites from what the binary gives, `expected-changes.json` included: review the
//! diff before committing.

use crate::harness::{Cmd, exit_file, root, s};
use std::path::{Path, PathBuf};

/// A case folder.
pub struct Case {
    pub name: String,
    pub dir: PathBuf,
}

/// What one run gave, with the placeholders' paths put back as placeholders.
#[derive(Debug)]
pub struct Outcome {
    pub stdout: String,
    pub stderr: String,
    pub exit: i32,
}

/// The files a case may hold in either suite.
const COMMON_FILES: [&str; 4] = [
    "args",
    "expected-stdout",
    "expected-stderr",
    "expected-exit",
];

/// Files of the format before the two suites shared one: a case still holding one was written
/// for the old harness and would be half checked.
const OLD_FILES: [(&str, &str); 3] = [
    ("expected.xml", "expected-stdout"),
    (
        "expected-error",
        "expected-exit and expected-stderr (exact)",
    ),
    ("expected", "expected-stdout"),
];

/// Every case folder of the `rewrite`/`check` suite, sorted by name.
pub fn cases() -> Vec<Case> {
    cases_in("tests/cases", "input.xml")
}

/// The folders of `rel` (under the project root) that hold a file `marker`, sorted by name.
pub fn cases_in(rel: &str, marker: &str) -> Vec<Case> {
    let dir = root().join(rel);
    let mut v: Vec<Case> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{rel}: {e}"))
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join(marker).exists())
        .map(|e| Case {
            name: e.file_name().to_string_lossy().into_owned(),
            dir: e.path(),
        })
        .collect();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    v
}

/// The cpu_map the golden outputs were recorded with: `VCP_GOLDEN_CPU_MAP`, else libvirt 9.0.0's
/// copy in `tests/data/generations/bookworm/cpu_map` (Debian 12's, as `tests/libvirt/capture-facts`
/// took it).
pub fn golden_cpu_map() -> PathBuf {
    std::env::var_os("VCP_GOLDEN_CPU_MAP").map_or_else(
        || root().join("tests/data/generations/bookworm/cpu_map"),
        PathBuf::from,
    )
}

fn bless() -> bool {
    std::env::var_os("BLESS").is_some()
}

impl Case {
    /// The lines of the case's file `name` (an argument each), placeholders left in place.
    fn lines(&self, name: &str) -> Vec<String> {
        std::fs::read_to_string(self.dir.join(name))
            .map(|t| {
                t.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether the case reads `../shared/corpus` (its `args` name `{corpus}`).
    pub fn needs_corpus(&self) -> bool {
        self.lines("args").iter().any(|l| l.contains("{corpus}"))
    }

    /// Each placeholder and the path it stands for, longest path first (the corpus lies under
    /// the project root). Panics when the case needs the corpus and it is absent.
    fn placeholders(&self) -> Vec<(&'static str, String)> {
        let mut v = vec![("{cpu_map}", s(&golden_cpu_map())), ("{root}", s(&root()))];
        if self.needs_corpus() {
            let c = crate::harness::corpus().unwrap_or_else(|| {
                panic!(
                    "case {} needs ../shared/corpus beside the checkout, and it is absent",
                    self.name
                )
            });
            v.push(("{corpus}", s(&c)));
        }
        v.sort_by_key(|(_, path)| std::cmp::Reverse(path.len()));
        v
    }

    /// The arguments of `file` (`args`, `rewrite-args`) with the placeholders replaced.
    fn substituted(&self, file: &str) -> Vec<String> {
        let subs = self.placeholders();
        self.lines(file)
            .iter()
            .map(|l| subs.iter().fold(l.clone(), |a, (k, v)| a.replace(k, v)))
            .collect()
    }

    /// The case's `args`, placeholders replaced; None when they need the corpus and it is absent.
    pub fn args(&self) -> Option<Vec<String>> {
        if self.needs_corpus() && crate::harness::corpus().is_none() {
            return None;
        }
        Some(self.substituted("args"))
    }

    /// The policy a `rewrite`/`check` case runs with, as given on its command line.
    pub fn policy_arg(&self) -> String {
        if self.dir.join("policy.toml").exists() {
            "policy.toml".into()
        } else {
            s(&root().join("packaging/policy.toml"))
        }
    }

    /// `expected-stdout`, when the case has one.
    pub fn expected_xml(&self) -> Option<PathBuf> {
        let p = self.dir.join("expected-stdout");
        p.exists().then_some(p)
    }

    /// Runs `virt-cpu-policy ARGS` in the case folder.
    pub fn run<S: AsRef<str>>(&self, args: &[S]) -> Outcome {
        let out = Cmd::new(args).dir(&self.dir).run();
        let subs = self.placeholders();
        let unsub = |t: &str| subs.iter().fold(t.to_string(), |a, (k, v)| a.replace(v, k));
        Outcome {
            stdout: unsub(&out.stdout),
            stderr: unsub(&out.stderr),
            exit: out.code,
        }
    }

    /// Refuses files the harness does not know (`extra` names the suite's own): a case in an
    /// older format, or a misspelt expectation, would otherwise be half checked.
    fn known_files(&self, extra: &[&str]) -> Result<(), String> {
        for e in std::fs::read_dir(&self.dir).map_err(|e| format!("case {}: {e}", self.name))? {
            let name = e
                .map_err(|e| format!("case {}: {e}", self.name))?
                .file_name();
            let name = name.to_string_lossy();
            if let Some((_, new)) = OLD_FILES.iter().find(|(old, _)| *old == name) {
                return Err(format!(
                    "case {}: `{name}` is the old golden format: write {new} (BLESS=1 writes them)",
                    self.name
                ));
            }
            if !COMMON_FILES.contains(&name.as_ref())
                && !extra.contains(&name.as_ref())
                && !name.starts_with('.')
            {
                return Err(format!(
                    "case {}: unknown file `{name}` (a case holds {} and {})",
                    self.name,
                    COMMON_FILES.join(", "),
                    extra.join(", ")
                ));
            }
        }
        Ok(())
    }

    /// Compares `out` with `expected-stdout`, `expected-stderr` and `expected-exit`, exactly;
    /// under `BLESS` first writes them from `out` (an empty stream or exit 0: no file).
    pub fn expect(&self, out: &Outcome) -> Result<(), String> {
        let file = |n: &str| self.dir.join(n);
        if bless() {
            write_or_remove(&file("expected-stdout"), &out.stdout);
            write_or_remove(&file("expected-stderr"), &out.stderr);
            let exit = if out.exit == 0 {
                String::new()
            } else {
                format!("exit {}\n", out.exit)
            };
            write_or_remove(&file("expected-exit"), &exit);
        }
        let read = |n: &str| std::fs::read_to_string(file(n)).unwrap_or_default();
        let want_exit = match exit_file(&file("expected-exit")) {
            Some(code) => code,
            None if file("expected-exit").exists() => {
                return Err(format!(
                    "case {}: expected-exit must say `exit N`",
                    self.name
                ));
            }
            None => 0,
        };
        let mut wrong = Vec::new();
        if out.exit != want_exit {
            wrong.push(format!("exit {} (wanted {want_exit})", out.exit));
        }
        for (stream, name, got) in [
            ("stdout", "expected-stdout", &out.stdout),
            ("stderr", "expected-stderr", &out.stderr),
        ] {
            let want = read(name);
            if *got != want {
                let diff = similar::TextDiff::from_lines(&want, got)
                    .unified_diff()
                    .header(name, &format!("actual {stream}"))
                    .to_string();
                wrong.push(format!("{stream} differs from {name}\n{diff}"));
            }
        }
        if wrong.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "case {}: {}\n(BLESS=1 writes the expected files from the actual output: review the diff)",
                self.name,
                wrong.join("\n")
            ))
        }
    }
}

/// Writes `text` to `path`, or removes `path` when `text` is empty (the file's absence says so).
fn write_or_remove(path: &Path, text: &str) {
    if text.is_empty() {
        if path.exists() {
            std::fs::remove_file(path).unwrap();
        }
    } else {
        std::fs::write(path, text).unwrap();
    }
}

/// The files a `rewrite`/`check` case may hold besides the common ones (`oracle-start` is read
/// by `tcg.rs`, which starts the case on the libvirt its `--libvirt-version` names).
const REWRITE_FILES: [&str; 6] = [
    "input.xml",
    "policy.toml",
    "rewrite-args",
    "expected-changes.json",
    "expected-check",
    "oracle-start",
];

fn check_rewrite_case(case: &Case) -> Result<(), String> {
    case.known_files(&REWRITE_FILES)?;
    let args = case.substituted("args");
    let mut common = vec!["--policy".to_string(), case.policy_arg()];
    // Nothing of this machine's libvirt: the recorded cpu_map, and no QEMU capability cache,
    // unless the case names its own.
    if !args.iter().any(|a| a == "--cpu-map") {
        common.extend(["--cpu-map".to_string(), s(&golden_cpu_map())]);
    }
    if !args.iter().any(|a| a.ends_with("qemu-caps-cache")) {
        common.push("--no-qemu-caps-cache".to_string());
    }
    common.extend(args);
    let command = |cmd: &str, extra: &[String], input: &str| -> Vec<String> {
        let mut v = vec![cmd.to_string()];
        v.extend(common.iter().cloned());
        v.extend(extra.iter().cloned());
        v.push(input.to_string());
        v
    };
    let out = case.run(&command(
        "rewrite",
        &case.substituted("rewrite-args"),
        "input.xml",
    ));
    case.expect(&out)?;
    if out.exit == 0 {
        // Fixed point: rewriting the output changes nothing, and check agrees it conforms.
        let again = case.run(&command("rewrite", &[], "expected-stdout"));
        if again.exit != 0 || again.stdout != out.stdout {
            return Err(format!(
                "case {}: rewrite is not idempotent (exit {})\n{}",
                case.name, again.exit, again.stderr
            ));
        }
        let chk = case.run(&command("check", &[], "expected-stdout"));
        // `not-compared` (4): the output needs nothing more, and the facts given cannot settle
        // a start check (no host CPU: a KVM custom CPU with no capabilities given).
        if bless() && chk.exit == 4 {
            std::fs::write(case.dir.join("expected-check"), "exit 4\n").unwrap();
        }
        let want_check = exit_file(&case.dir.join("expected-check")).unwrap_or(0);
        if chk.exit != want_check {
            return Err(format!(
                "case {}: check of expected-stdout exits {} (wanted {want_check})\n{}",
                case.name, chk.exit, chk.stdout
            ));
        }
    } else {
        if !out.stdout.is_empty() {
            return Err(format!(
                "case {}: stdout must be empty on failure",
                case.name
            ));
        }
        if out.stderr.trim().is_empty() {
            return Err(format!(
                "case {}: exit {} with no message",
                case.name, out.exit
            ));
        }
        if case.dir.join("expected-check").exists() {
            return Err(format!(
                "case {}: expected-check judges the output, and a failing rewrite has none",
                case.name
            ));
        }
    }
    let check = case.run(&command(
        "check",
        &["--format".to_string(), "json".to_string()],
        "input.xml",
    ));
    check_changes(case, &out, &check)
}

/// `expected-changes.json` against the changes of `check --format json` (`check`) on the input,
/// given what `rewrite` gave (`rewrite`).
fn check_changes(case: &Case, rewrite: &Outcome, check: &Outcome) -> Result<(), String> {
    let path = case.dir.join("expected-changes.json");
    if rewrite.exit == 2 {
        // Refused as bad input: no report to pin, and check refuses the same way.
        if bless() && path.exists() {
            std::fs::remove_file(&path).unwrap();
        }
        if path.exists() {
            return Err(format!(
                "case {}: expected-changes.json for a case refused with exit 2",
                case.name
            ));
        }
        if check.exit != 2 || !check.stdout.is_empty() || check.stderr != rewrite.stderr {
            return Err(format!(
                "case {}: check --format json does not refuse it as rewrite does (exit {})\nstdout:\n{}\nstderr:\n{}",
                case.name, check.exit, check.stdout, check.stderr
            ));
        }
        return Ok(());
    }
    let report: serde_json::Value = serde_json::from_str(&check.stdout).map_err(|e| {
        format!(
            "case {}: check --format json (exit {}): {e}\n{}{}",
            case.name, check.exit, check.stdout, check.stderr
        )
    })?;
    let mut changes = report["changes"].clone();
    for c in changes.as_array_mut().into_iter().flatten() {
        c.as_object_mut().map(|o| o.remove("what"));
    }
    if bless() {
        let text = serde_json::to_string_pretty(&changes).unwrap() + "\n";
        std::fs::write(&path, text).unwrap();
    }
    let text = std::fs::read_to_string(&path).map_err(|_| {
        format!(
            "case {}: no expected-changes.json (every case check reports on pins its changes; BLESS=1 writes it)",
            case.name
        )
    })?;
    let want: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| format!("case {}: expected-changes.json: {e}", case.name))?;
    if changes != want {
        return Err(format!(
            "case {}: changes differ from expected-changes.json\nwanted: {want:#}\nactual: {changes:#}",
            case.name
        ));
    }
    Ok(())
}

/// Runs `check` on every case of `cases`, failing with every failure at once, or when there is
/// no case: a suite that checked nothing has not passed.
pub fn run_suite(label: &str, cases: &[Case], check: impl Fn(&Case) -> Result<(), String>) {
    assert!(!cases.is_empty(), "no {label} cases");
    let failures: Vec<String> = cases.iter().filter_map(|c| check(c).err()).collect();
    eprintln!(
        "{label}: {} of {} cases passed",
        cases.len() - failures.len(),
        cases.len()
    );
    assert!(
        failures.is_empty(),
        "{} failing case(s):\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn golden_cases() {
    let cases: Vec<Case> = cases().into_iter().filter(|c| !c.needs_corpus()).collect();
    run_suite("golden", &cases, check_rewrite_case);
}

#[test]
#[cfg_attr(
    not(vcp_shared_corpus),
    ignore = "needs ../shared/corpus beside the checkout"
)]
fn golden_cases_with_the_shared_corpus() {
    let cases: Vec<Case> = cases().into_iter().filter(Case::needs_corpus).collect();
    run_suite("golden (shared corpus)", &cases, check_rewrite_case);
}

/// The files a `baseline`/`compare` case may hold besides the common ones: its own facts files
/// and domains.
fn check_baseline_case(case: &Case) -> Result<(), String> {
    let own: Vec<String> = std::fs::read_dir(&case.dir)
        .map_err(|e| format!("case {}: {e}", case.name))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".xml"))
        .collect();
    let own: Vec<&str> = own.iter().map(String::as_str).collect();
    case.known_files(&own)?;
    let out = case.run(&case.substituted("args"));
    case.expect(&out)?;
    if out.exit != 0 && out.stderr.lines().count() != 1 {
        return Err(format!(
            "case {}: a failure needs exactly one line on stderr\n{}",
            case.name, out.stderr
        ));
    }
    Ok(())
}

/// Every `baseline`/`compare` case folder (`tests/baseline-cases`), sorted by name.
pub fn baseline_cases() -> Vec<Case> {
    cases_in("tests/baseline-cases", "args")
}

#[test]
#[cfg_attr(
    not(vcp_shared_corpus),
    ignore = "needs ../shared/corpus beside the checkout"
)]
fn baseline_golden_cases() {
    run_suite("baseline golden", &baseline_cases(), check_baseline_case);
}

/// Every finding code the binary writes is one of the enum's (`virt_cpu_policy::finding::Code`,
/// whose unit tests hold each documented): the codes in every golden case's recorded output, and
/// the `findings[].code` of `check --format json` over every golden case's input and every real
/// producer's domain of `tests/data/producers`, as found and under the shipped policy. A code
/// written by hand somewhere (the hook once wrote `cpu-feature-missing`, which the enum lacked)
/// fails here.
#[test]
fn every_code_the_binary_writes_is_a_code_of_the_enum() {
    use std::collections::BTreeSet;
    use virt_cpu_policy::finding::Code;
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut inputs: Vec<PathBuf> = Vec::new();
    for case in cases().iter().chain(baseline_cases().iter()) {
        for entry in std::fs::read_dir(&case.dir).unwrap().filter_map(Result::ok) {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with("expected-") {
                let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
                seen.extend(written_codes(&text));
            }
        }
        let input = case.dir.join("input.xml");
        if input.exists() {
            inputs.push(input);
        }
    }
    let producers = root().join("tests/data/producers");
    for dir in ["nova", "virt-install"] {
        for entry in std::fs::read_dir(producers.join(dir))
            .unwrap()
            .filter_map(Result::ok)
        {
            if entry.path().extension().is_some_and(|x| x == "xml") {
                inputs.push(entry.path());
            }
        }
    }
    assert!(inputs.len() > 100, "{} inputs", inputs.len());
    let shipped = s(&root().join("packaging/policy.toml"));
    for input in &inputs {
        let out = Cmd::new(&["check", "--format", "json", "--no-qemu-caps-cache"])
            .args(&["--cpu-map", &s(&golden_cpu_map()), "--policy", &shipped])
            .arg(s(input))
            .run();
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&out.stdout) {
            for f in v["findings"].as_array().into_iter().flatten() {
                seen.insert(f["code"].as_str().unwrap_or("(not a string)").to_string());
            }
        }
    }
    assert!(seen.len() > 20, "{seen:?}");
    let unknown: Vec<&String> = seen.iter().filter(|c| c.parse::<Code>().is_err()).collect();
    assert!(
        unknown.is_empty(),
        "codes written that are not codes: {unknown:?}"
    );
}

/// The finding codes in a command's output: `error[CODE]`, `warning[CODE]`, `"code": "CODE"`.
fn written_codes(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (open, close) in [("error[", ']'), ("warning[", ']'), ("\"code\": \"", '"')] {
        for part in text.split(open).skip(1) {
            if let Some(code) = part.split(close).next() {
                out.push(code.to_string());
            }
        }
    }
    out
}
