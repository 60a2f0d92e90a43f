//! `virt-cpu-policyd apply` against libvirt's test driver (`test:///default`), which runs inside
//! the daemon's own process: the connection paths without a libvirtd. Its one guest is
//! `type='test'`, out of scope, so nothing is ever rewritten here; tests/e2e/daemon covers the
//! rewrites against a real libvirtd.

use crate::harness::{Cmd, Output, Scratch, daemon_bin, s};

const TEST_URI: &str = "test:///default";

/// A `<hostFacts>` of another libvirt than the one connected (no libvirt is 99.9.0).
const STALE_FACTS: &str = "<hostFacts name='elsewhere' libvirt='99.9.0'>\
    <capabilities><host><cpu><arch>x86_64</arch></cpu></host></capabilities></hostFacts>";

fn apply(args: &[&str]) -> Output {
    Cmd::new(&["--uri", TEST_URI])
        .program(daemon_bin())
        .args(args)
        .run()
}

/// The one line `apply` writes on stderr, with the version it judged with.
fn version_line(o: &Output) -> &str {
    let lines: Vec<&str> = o.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line on stderr:\n{}", o.stderr);
    lines[0]
        .strip_prefix("virt-cpu-policyd: judging with libvirt ")
        .unwrap_or_else(|| panic!("not the version line: {}", lines[0]))
}

#[test]
fn apply_judges_with_the_connected_libvirt_unless_told_another_version() {
    let dir = Scratch::new("dmn-version");
    let facts = dir.write("elsewhere.xml", STALE_FACTS);
    let policy = dir.write(
        "policy.toml",
        format!(
            "version = 1\n\n[host]\ncapabilities = [\"{}\"]\n",
            s(&facts)
        ),
    );
    let policy = s(&policy);
    // A <hostFacts> the policy names does not outweigh the libvirtd connected to.
    let o = apply(&["--policy", &policy, "apply", "--dry-run", "--all"]);
    o.status(0);
    let (version, source) = version_line(&o).split_once(' ').unwrap();
    assert_eq!(
        source,
        format!("(from virConnectGetLibVersion on {TEST_URI})")
    );
    assert_ne!(version, "99.9.0");
    let o = apply(&[
        "--policy",
        &policy,
        "--libvirt-version",
        "11.3.0",
        "apply",
        "--dry-run",
        "--all",
    ]);
    o.status(0);
    assert_eq!(version_line(&o), "11.3.0 (from --libvirt-version)");
    // The snapshot keeps the connected libvirtd's version: it is a fact the hook reads.
    let snap = dir.path("snapshot");
    let o = apply(&[
        "--policy",
        &policy,
        "--libvirt-version",
        "11.3.0",
        "--snapshot-dir",
        &s(&snap),
        "--backup-dir",
        &s(&dir.path("backups")),
        "apply",
        "--all",
    ]);
    o.status(0);
    let written = std::fs::read_to_string(snap.join("host-facts.xml")).unwrap();
    assert!(
        written.contains(&format!(" libvirt='{version}'>")),
        "{}",
        written.lines().next().unwrap_or_default()
    );
}

#[test]
fn apply_says_libvirt_errors_once_in_its_own_words() {
    // Without the quiet handler libvirt also prints "libvirt: Test Driver error : Domain not
    // found" for the missing guest, and its own line for each domcapabilities the test driver
    // does not give while the snapshot is written.
    let dir = Scratch::new("dmn-quiet");
    let o = apply(&[
        "--snapshot-dir",
        &s(&dir.path("snapshot")),
        "--backup-dir",
        &s(&dir.path("backups")),
        "apply",
        "test",
        "vcp-no-such-guest",
    ]);
    o.status(1);
    assert_eq!(
        o.stdout,
        "test: unchanged (conforms)\nvcp-no-such-guest: refused: no such guest\n"
    );
    version_line(&o);
    let o = Cmd::new(&[
        "--uri",
        "qemu+unix:///system?socket=/nonexistent/sock",
        "apply",
    ])
    .program(daemon_bin())
    .arg("--all")
    .run();
    o.status(2);
    assert!(o.stdout.is_empty(), "{}", o.stdout);
    assert_eq!(o.stderr.lines().count(), 1, "{}", o.stderr);
    assert!(
        o.stderr.starts_with("virt-cpu-policyd: cannot connect to "),
        "{}",
        o.stderr
    );
}

/// An `--interval` whose seconds or end do not fit is refused as bad usage (exit 2, before any
/// connection), where 2^64-1 minutes once overflowed into a panic; a year is the longest.
#[test]
fn daemon_interval_beyond_a_year_is_bad_usage_not_a_panic() {
    for interval in ["525601", "307445734561825861", "18446744073709551615"] {
        let o = apply(&["daemon", "--interval", interval]);
        o.status(2);
        assert!(o.stdout.is_empty(), "stdout: {}", o.stdout);
        assert!(
            o.stderr.contains("--interval") && !o.stderr.contains("panicked"),
            "{interval}: {}",
            o.stderr
        );
    }
}
