//! Data-driven golden cases: one folder per case under `tests/cases/`, discovered at run time.
//!
//! A case folder holds:
//! * `input.xml` — the domain;
//! * `policy.toml` — optional; without it the shipped default policy (`packaging/policy.toml`);
//! * `args` — optional extra arguments, one per line; `{corpus}` stands for `../shared/corpus`
//!   (a case that needs it is skipped, and says so, when the corpus is absent);
//! * `rewrite-args` — optional arguments for `rewrite` only (`--explain`), one per line;
//! * `expected.xml` — the expected output of `rewrite` (exit 0), or
//! * `expected-error` — first line `exit N`, then lines that stderr must contain; stdout must be
//!   empty;
//! * `expected-stderr` — optional, with `expected.xml`: lines stderr must contain (warnings).
//! * `expected-check` — optional, with `expected.xml`: `exit N`, the exit code of `check` on the
//!   output (default 0; an audit-mode policy leaves the document as it was, so 3).
//!
//! * `expected-changes.json` — optional: the `changes` of `check --format json` on the input,
//!   each without its sentence (`what`), as a JSON array; the structured record a program reads.
//!
//! For every `expected.xml` case the output must also be a fixed point: `rewrite` of it is
//! byte-identical and `check` of it exits as `expected-check` says. `BLESS=1 cargo test golden` rewrites `expected.xml`
//! files from the actual output (review the diff before committing).

use crate::harness::{Cmd, Output, corpus, root};
use std::path::{Path, PathBuf};

/// A case folder.
pub struct Case {
    pub name: String,
    pub dir: PathBuf,
}

/// Every case folder, sorted by name.
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

impl Case {
    /// The case's extra arguments, or None when it needs the corpus and the corpus is absent.
    pub fn args(&self) -> Option<Vec<String>> {
        let mut out = vec!["--policy".to_string(), self.policy().display().to_string()];
        if let Ok(text) = std::fs::read_to_string(self.dir.join("args")) {
            for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
                if line.contains("{corpus}") {
                    let c = corpus()?;
                    out.push(line.replace("{corpus}", &c.display().to_string()));
                } else {
                    out.push(line.to_string());
                }
            }
        }
        Some(out)
    }

    pub fn policy(&self) -> PathBuf {
        let p = self.dir.join("policy.toml");
        if p.exists() {
            p
        } else {
            root().join("packaging/policy.toml")
        }
    }

    pub fn input(&self) -> PathBuf {
        self.dir.join("input.xml")
    }

    pub fn expected_xml(&self) -> Option<PathBuf> {
        let p = self.dir.join("expected.xml");
        p.exists().then_some(p)
    }

    pub fn run(&self, cmd: &str, extra: &[&str], input: &Path) -> Option<Output> {
        let mut c = Cmd::new(&[cmd]);
        for a in self.args()? {
            c = c.arg(a);
        }
        for a in extra {
            c = c.arg(a);
        }
        Some(c.arg(input.display().to_string()).run())
    }
}

fn check_case(case: &Case) -> Result<bool, String> {
    let rewrite_args: Vec<String> = std::fs::read_to_string(case.dir.join("rewrite-args"))
        .map(|t| {
            t.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    let rewrite_args: Vec<&str> = rewrite_args.iter().map(String::as_str).collect();
    let Some(out) = case.run("rewrite", &rewrite_args, &case.input()) else {
        eprintln!("golden {}: SKIPPED, needs ../shared/corpus", case.name);
        return Ok(false);
    };
    let ctx = |what: &str| {
        format!(
            "case {}: {what}\nstdout:\n{}\nstderr:\n{}",
            case.name, out.stdout, out.stderr
        )
    };
    if let Some(exp) = case.expected_xml() {
        if std::env::var_os("BLESS").is_some() && out.code == 0 {
            std::fs::write(&exp, &out.stdout).unwrap();
        }
        let want = std::fs::read_to_string(&exp).unwrap();
        if out.code != 0 {
            return Err(ctx(&format!("exit {} (wanted 0)", out.code)));
        }
        if out.stdout != want {
            let diff = similar::TextDiff::from_lines(&want, &out.stdout)
                .unified_diff()
                .header("expected.xml", "actual")
                .to_string();
            return Err(format!(
                "case {}: output differs from expected.xml\n{diff}",
                case.name
            ));
        }
        if let Ok(lines) = std::fs::read_to_string(case.dir.join("expected-stderr")) {
            for l in lines.lines().filter(|l| !l.trim().is_empty()) {
                if !out.stderr.contains(l.trim()) {
                    return Err(ctx(&format!("stderr lacks `{}`", l.trim())));
                }
            }
        }
        check_changes(case)?;
        // Fixed point: rewriting the output changes nothing, and check agrees it conforms.
        let again = case.run("rewrite", &[], &exp).unwrap();
        if again.code != 0 || again.stdout != want {
            return Err(format!(
                "case {}: rewrite is not idempotent (exit {})\n{}",
                case.name, again.code, again.stderr
            ));
        }
        let want_check = crate::harness::exit_file(&case.dir.join("expected-check")).unwrap_or(0);
        let chk = case.run("check", &[], &exp).unwrap();
        if chk.code != want_check {
            return Err(format!(
                "case {}: check of expected.xml exits {} (wanted {want_check})\n{}",
                case.name, chk.code, chk.stdout
            ));
        }
    } else {
        let spec = std::fs::read_to_string(case.dir.join("expected-error")).map_err(|_| {
            format!(
                "case {}: neither expected.xml nor expected-error",
                case.name
            )
        })?;
        let mut lines = spec.lines();
        let code: i32 = lines
            .next()
            .and_then(|l| l.strip_prefix("exit "))
            .and_then(|n| n.trim().parse().ok())
            .ok_or_else(|| {
                format!(
                    "case {}: expected-error must start with `exit N`",
                    case.name
                )
            })?;
        if out.code != code {
            return Err(ctx(&format!("exit {} (wanted {code})", out.code)));
        }
        if !out.stdout.is_empty() {
            return Err(ctx("stdout must be empty on failure"));
        }
        for l in lines.filter(|l| !l.trim().is_empty()) {
            if !out.stderr.contains(l.trim()) {
                return Err(ctx(&format!("stderr lacks `{}`", l.trim())));
            }
        }
        if out.stderr.lines().count() == 0 {
            return Err(ctx("no message on stderr"));
        }
    }
    Ok(true)
}

/// `expected-changes.json`, when the case has one, against `check --format json`'s changes.
fn check_changes(case: &Case) -> Result<(), String> {
    let path = case.dir.join("expected-changes.json");
    if !path.exists() {
        return Ok(());
    }
    let out = case
        .run("check", &["--format", "json"], &case.input())
        .unwrap();
    let report: serde_json::Value = serde_json::from_str(&out.stdout).map_err(|e| {
        format!(
            "case {}: check --format json: {e}\n{}",
            case.name, out.stdout
        )
    })?;
    let mut changes = report["changes"].clone();
    for c in changes.as_array_mut().into_iter().flatten() {
        c.as_object_mut().map(|o| o.remove("what"));
    }
    if std::env::var_os("BLESS").is_some() {
        let text = serde_json::to_string_pretty(&changes).unwrap() + "\n";
        std::fs::write(&path, text).unwrap();
    }
    let want: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .map_err(|e| format!("case {}: expected-changes.json: {e}", case.name))?;
    if changes != want {
        return Err(format!(
            "case {}: changes differ from expected-changes.json\nwanted: {want:#}\nactual: {changes:#}",
            case.name
        ));
    }
    Ok(())
}

#[test]
fn golden_cases() {
    crate::harness::run_cases("golden", &cases(), check_case);
}
