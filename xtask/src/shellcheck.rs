//! `cargo xtask shellcheck`: shellcheck over every shell script of the repository.
//!
//! A script is a regular file whose first line is a `#!` naming `sh` or `bash`, or a `*.sh` file
//! (the rpm scriptlets under `packaging/rpm/` have no `#!`: they are checked as POSIX `sh`).
//! Build output, fuzzing corpora and version control are not looked into. Every finding, of any
//! severity, fails the task: the scripts run as root on operators' hosts and in CI.

use crate::Failure;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Directories never searched (relative to the root): build output, generated corpora.
const SKIP: [&str; 6] = [
    ".git",
    "target",
    "fuzz/target",
    "fuzz/corpus",
    "fuzz/artifacts",
    "fuzz/coverage",
];

/// A script and the shell it is checked as (None: the one its `#!` names).
#[derive(Debug, PartialEq, Eq)]
pub struct Script {
    pub path: PathBuf,
    pub shell: Option<&'static str>,
}

/// Every shell script under `root`, sorted by path.
pub fn scripts(root: &Path) -> std::io::Result<Vec<Script>> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let path = entry.path();
            let rel = path.strip_prefix(root).unwrap_or(&path);
            let kind = entry.file_type()?;
            if kind.is_dir() {
                if !SKIP.iter().any(|s| rel == Path::new(s)) {
                    dirs.push(path);
                }
            } else if kind.is_file() {
                let head = first_line(&path)?;
                if head.starts_with("#!") && is_shell(&head) {
                    out.push(Script { path, shell: None });
                } else if path.extension().is_some_and(|x| x == "sh") && !head.starts_with("#!") {
                    out.push(Script {
                        path,
                        shell: Some("sh"),
                    });
                }
            }
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// The first line of a file (at most 128 bytes; binary files give nonsense, not an error).
fn first_line(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut buf = [0u8; 128];
    let n = std::fs::File::open(path)?.read(&mut buf)?;
    let head = String::from_utf8_lossy(&buf[..n]);
    Ok(head.lines().next().unwrap_or_default().to_string())
}

/// Whether a `#!` line names a POSIX shell or bash (`/bin/sh`, `/usr/bin/env bash`...).
fn is_shell(shebang: &str) -> bool {
    shebang
        .trim_start_matches("#!")
        .split_whitespace()
        .take(2)
        .filter_map(|w| w.rsplit('/').next())
        .any(|w| w == "sh" || w == "bash")
}

/// Runs shellcheck on every script; fails when it finds anything or is not installed.
pub fn run(root: &Path) -> Result<(), Failure> {
    let all = scripts(root).map_err(|e| Failure::new(format!("listing the scripts: {e}")))?;
    let mut failed = Vec::new();
    for s in &all {
        let mut c = Command::new("shellcheck");
        // -x: follow `source`d files; paths are relative to the script (SCRIPTDIR).
        c.args(["-x", "-P", "SCRIPTDIR"]);
        if let Some(shell) = s.shell {
            c.args(["--shell", shell]);
        }
        let status = c.arg(&s.path).status().map_err(|e| {
            Failure(
                2,
                format!("cannot run shellcheck ({e}): apt-get install shellcheck"),
            )
        })?;
        if !status.success() {
            failed.push(s.path.display().to_string());
        }
    }
    eprintln!(
        "shellcheck: {} script(s), {} with findings",
        all.len(),
        failed.len()
    );
    if failed.is_empty() {
        Ok(())
    } else {
        Err(Failure::new(format!(
            "shellcheck findings in: {}",
            failed.join(", ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shebangs_of_shells_and_others() {
        assert!(is_shell("#!/bin/sh"));
        assert!(is_shell("#!/usr/bin/env bash"));
        assert!(is_shell("#!/bin/bash -e"));
        assert!(!is_shell("#!/usr/bin/env python3"));
        assert!(!is_shell("#!/usr/bin/groovy"));
        assert!(!is_shell("#!/bin/shell-of-something"));
    }

    /// The repository's scripts are found: those CI runs and those the packages install,
    /// whatever their name, and nothing else.
    #[test]
    fn finds_the_repositorys_scripts() {
        let root = crate::repo_root();
        let found: Vec<String> = scripts(&root)
            .unwrap()
            .iter()
            .map(|s| {
                let rel = s.path.strip_prefix(&root).unwrap().display().to_string();
                match s.shell {
                    Some(sh) => format!("{rel} ({sh})"),
                    None => rel,
                }
            })
            .collect();
        for want in [
            ".ci/run",
            ".ci/msrv",
            "benches/process/compare",
            "fuzz/seed-corpus",
            "hooks/vdsm/before_vm_start/50_virt_cpu_policy",
            "packaging/rpm/preun.sh (sh)",
            "tests/e2e/run",
            "tests/guest/init",
        ] {
            assert!(found.iter().any(|f| f == want), "{want} not in {found:?}");
        }
        assert!(
            !found
                .iter()
                .any(|f| f.ends_with(".rs") || f.ends_with(".groovy")),
            "{found:?}"
        );
    }
}
