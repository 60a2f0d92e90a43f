//! Turns `src/cpu/x86_features.txt` (libvirt's x86 feature names and their aliases, one feature a
//! line) into sorted static tables, so looking a feature name up costs a bisection and no table
//! is built at run time: the hook runs on every guest start.

use std::fmt::Write as _;

fn main() {
    shared_corpus();
    usr_bin_time();
    let src = "src/cpu/x86_features.txt";
    println!("cargo:rerun-if-changed={src}");
    let text = std::fs::read_to_string(src).expect("read src/cpu/x86_features.txt");
    let mut known: Vec<&str> = Vec::new();
    let mut aliases: Vec<(&str, &str)> = Vec::new();
    for line in text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let mut words = line.split_whitespace();
        if let Some(name) = words.next() {
            known.push(name);
            aliases.extend(words.map(|a| (a, name)));
        }
    }
    known.sort_unstable();
    known.dedup();
    aliases.sort_by(|a, b| a.0.cmp(b.0));
    aliases.dedup_by(|later, earlier| later.0 == earlier.0);
    let mut out = String::new();
    let _ = writeln!(out, "/// libvirt's x86 feature names, sorted.");
    let _ = writeln!(out, "static KNOWN_FEATURES: [&str; {}] = [", known.len());
    for k in &known {
        let _ = writeln!(out, "    {k:?},");
    }
    let _ = writeln!(out, "];");
    let _ = writeln!(
        out,
        "/// (alias, libvirt name) from x86_features.xml, sorted by alias."
    );
    let _ = writeln!(
        out,
        "static FEATURE_ALIASES: [(&str, &str); {}] = [",
        aliases.len()
    );
    for (a, n) in &aliases {
        let _ = writeln!(out, "    ({a:?}, {n:?}),");
    }
    let _ = writeln!(out, "];");
    let dest =
        std::path::Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("x86_features.rs");
    std::fs::write(dest, out).expect("write x86_features.rs");
}

/// Sets the cfg `vcp_shared_corpus` when `../shared/corpus` (real domain XML, host capabilities
/// and libvirt's CPU test data, kept outside the repository) sits beside the checkout: a test
/// that reads it is `#[cfg_attr(not(vcp_shared_corpus), ignore = "...")]`, reported as ignored
/// rather than passing without it.
fn shared_corpus() {
    println!("cargo:rustc-check-cfg=cfg(vcp_shared_corpus)");
    println!("cargo:rerun-if-changed=../shared/corpus");
    if std::path::Path::new("../shared/corpus").is_dir() {
        println!("cargo:rustc-cfg=vcp_shared_corpus");
    }
}

/// Sets the cfg `vcp_usr_bin_time` when `/usr/bin/time` (Debian's package `time`) is installed:
/// the hostile-input tests that bound a run's peak RSS measure it with `time -f %M` and are
/// `#[cfg_attr(not(vcp_usr_bin_time), ignore = "...")]` without it, reported as ignored rather
/// than failing on a fresh machine (`.ci/run` installs it, and runs them with
/// `--include-ignored`: there a missing `time` is a failure).
fn usr_bin_time() {
    println!("cargo:rustc-check-cfg=cfg(vcp_usr_bin_time)");
    println!("cargo:rerun-if-changed=/usr/bin/time");
    if std::path::Path::new("/usr/bin/time").is_file() {
        println!("cargo:rustc-cfg=vcp_usr_bin_time");
    }
}
