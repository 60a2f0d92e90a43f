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
    let head = written.lines().next().unwrap_or_default();
    assert!(
        head.contains(&format!(" libvirt='{version}'>"))
            || head.contains(&format!(" libvirt='{version}' ")),
        "{head}"
    );
    // The test driver is no QEMU: no QEMU release is written for it.
    assert!(!head.contains(" qemu="), "{head}");
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

/// `virt-cpu-policyd daemon` against the test driver with `policy`, `t`'s `snap/` as its
/// `--snapshot-dir` and `t`'s `m.prom` as its `--metrics-file` (removed first), stopped once the
/// metrics hold `needle` (or after 30 s): the metrics' text and the daemon's stderr.
fn daemon_metrics(t: &Scratch, policy: &std::path::Path, needle: &str) -> (String, String) {
    use std::time::{Duration, Instant};
    let metrics = t.path("m.prom");
    let _ = std::fs::remove_file(&metrics);
    let mut child = std::process::Command::new(daemon_bin())
        .args(["--uri", TEST_URI, "--policy", &s(policy)])
        .args(["--snapshot-dir", &s(&t.path("snap"))])
        .args(["--backup-dir", &s(&t.path("backups"))])
        .args(["--metrics-file", &s(&metrics), "daemon"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the daemon starts");
    let deadline = Instant::now() + Duration::from_secs(30);
    let text = loop {
        let text = std::fs::read_to_string(&metrics).unwrap_or_default();
        if text.contains(needle) || Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    child.kill().expect("stop the daemon");
    let out = child.wait_with_output().expect("the daemon's stderr");
    (text, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The hook's decisions reach the daemon's metrics: the hook binary run as libvirt runs it
/// (three refusals, one guest let through) counts in the state directory, and the daemon sharing
/// it renders `virt_cpu_policy_hook_decisions_total{kind}` for every kind; a counts file that is
/// not counts shows as none, with a warning.
#[test]
fn the_daemon_renders_the_hooks_decision_counts() {
    let t = Scratch::new("daemon-hook-decisions");
    let policy = t.write(
        "p.toml",
        "version = 1\n\n[hook]\non_violation = \"deny\"\n\n[[rule]]\nname = \"v2\"\nmatch = { arch = \"x86_64\" }\ncpu.min_level = \"x86-64-v2\"\n",
    );
    let guest = |cpu: &str| {
        format!(
            "<domain type='qemu'><name>g</name><memory>65536</memory><vcpu>1</vcpu><os><type arch='x86_64' machine='pc'>hvm</type></os>{cpu}</domain>"
        )
    };
    for (xml, code) in [
        (guest(""), 1),
        (guest(""), 1),
        (guest("<cpu mode='custom'><model>Nehalem</model></cpu>"), 0),
        (guest(""), 1),
    ] {
        Cmd::new(&["hook", "--policy"])
            .arg(s(&policy))
            .args(&["--log-file", &s(&t.path("hook.log"))])
            .args(&["--snapshot-dir", &s(&t.path("snap"))])
            .args(&["--no-qemu-caps-cache", "g", "prepare", "begin", "-"])
            .stdin(xml)
            .run()
            .status(code);
    }
    let (m, log) = daemon_metrics(&t, &policy, "virt_cpu_policy_hook_decisions_total");
    let hook: Vec<&str> = m
        .lines()
        .filter(|l| l.contains("virt_cpu_policy_hook_decisions"))
        .collect();
    assert_eq!(
        hook,
        [
            "# HELP virt_cpu_policy_hook_decisions_total The qemu hook's decisions on this host by kind, as the journal names them (hook-allowed, hook-violation-allowed, hook-violation-refused, hook-libvirt-refused, hook-error-allowed, hook-error-refused).",
            "# TYPE virt_cpu_policy_hook_decisions_total counter",
            "virt_cpu_policy_hook_decisions_total{kind=\"hook-allowed\"} 1",
            "virt_cpu_policy_hook_decisions_total{kind=\"hook-error-allowed\"} 0",
            "virt_cpu_policy_hook_decisions_total{kind=\"hook-error-refused\"} 0",
            "virt_cpu_policy_hook_decisions_total{kind=\"hook-libvirt-refused\"} 0",
            "virt_cpu_policy_hook_decisions_total{kind=\"hook-violation-allowed\"} 0",
            "virt_cpu_policy_hook_decisions_total{kind=\"hook-violation-refused\"} 3",
        ],
        "{m}\n{log}"
    );
    assert!(!log.contains("decision counts"), "{log}");
    // A newer version's kind: the known kinds render as they are, the newer one not at all (its
    // meaning is not this version's to document), and nothing is said of the file.
    t.write(
        "snap/hook-decisions",
        "hook-allowed 5\nhook-newer-kind 9\nhook-violation-refused 3\n",
    );
    let (m, log) = daemon_metrics(&t, &policy, "virt_cpu_policy_hook_decisions_total");
    assert!(
        m.contains("virt_cpu_policy_hook_decisions_total{kind=\"hook-allowed\"} 5\n")
            && m.contains(
                "virt_cpu_policy_hook_decisions_total{kind=\"hook-violation-refused\"} 3\n"
            )
            && !m.contains("hook-newer-kind"),
        "{m}"
    );
    assert!(!log.contains("decision counts"), "{log}");
    t.write("snap/hook-decisions", "hook-allowed x\n");
    let (m, log) = daemon_metrics(&t, &policy, "virt_cpu_policy_hook_decisions_total");
    assert!(
        m.contains("virt_cpu_policy_hook_decisions_total{kind=\"hook-allowed\"} 0\n"),
        "{m}"
    );
    assert!(
        log.contains("cannot read the hook's decision counts")
            && log.contains("`x` is not a count"),
        "{log}"
    );
}

/// The daemon tells a drop of the cluster CPU once and shows it in its metrics: run against the
/// test driver with a `cpu.model = "baseline"` policy (audit mode) over the x86-64-v3 host alone,
/// then again over it and the x86-64-v1 host; the second run logs `cluster-cpu-changed` once
/// (WARN, the host responsible named) and its metrics file has the new CPU and
/// `virt_cpu_policy_cluster_cpu_changes_total{direction="drop"} 1`, counted in the state file the
/// hook shares.
#[test]
fn the_daemon_tells_a_cluster_cpu_drop_once_with_metrics() {
    use virt_cpu_policy::cluster::watch::CLUSTER_CPU_CHANGED_ID;
    let t = Scratch::new("daemon-cluster-cpu");
    let (good, bookworm) = crate::hook::dropping_cluster(&t);
    let run = |cluster: &[&str]| -> (String, String) {
        let list: Vec<String> = cluster.iter().map(|c| format!("{c:?}")).collect();
        let p = t.write(
            "p.toml",
            format!(
                "version = 1\nmode = \"audit\"\n\n[[rule]]\nname = \"cluster cpu\"\nmatch = {{ arch = \"x86_64\" }}\ncpu.model = \"baseline\"\n\n[host]\ncpu_map = {:?}\ncluster = [{}]\n",
                s(&crate::golden::golden_cpu_map()),
                list.join(", ")
            ),
        );
        daemon_metrics(&t, &p, "virt_cpu_policy_cluster_level")
    };
    let (m, log) = run(&[&good]);
    assert!(
        m.contains("virt_cpu_policy_cluster_level 3\n"),
        "{m}\n{log}"
    );
    assert!(!log.contains(CLUSTER_CPU_CHANGED_ID), "{log}");
    let (m, log) = run(&[&good, &bookworm]);
    assert!(
        m.contains("virt_cpu_policy_cluster_level 1\n"),
        "{m}\n{log}"
    );
    assert!(m.contains("level=\"x86-64-v1\"} 1\n"), "{m}");
    assert!(
        m.contains("virt_cpu_policy_cluster_cpu_changes_total{direction=\"drop\"} 1\n"),
        "{m}"
    );
    assert_eq!(log.matches(CLUSTER_CPU_CHANGED_ID).count(), 1, "{log}");
    assert!(
        log.contains("the cluster CPU dropped")
            && log.contains("hosts responsible: bookworm (missing"),
        "{log}"
    );
    // Seen again (a restart): not told again, still counted once.
    let (m, log) = run(&[&good, &bookworm]);
    assert!(!log.contains(CLUSTER_CPU_CHANGED_ID), "{log}");
    assert!(
        m.contains("virt_cpu_policy_cluster_cpu_changes_total{direction=\"drop\"} 1\n"),
        "{m}"
    );
}
