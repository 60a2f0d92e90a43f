//! The hook's decisions through journald's socket: each carries `GUEST`, `OPERATION`, `VERDICT`,
//! `RULE`, `CODE`, its `MESSAGE_ID` and the `PRIORITY` docs/journal.md documents, and never domain XML;
//! one decision per hook call, warnings with a `MESSAGE_ID` of their own, every `MESSAGE` one line.
//!
//! CI containers run no journald, and a test must not replace the machine's
//! `/run/systemd/journal/socket` (other programs log there). So the test binds a datagram socket
//! of its own and runs the hook with `unshare --mount`: in that private mount namespace a tmpfs
//! covers `/run` and the test's socket is bind-mounted at `/run/systemd/journal/socket`, where
//! tracing-journald sends. The test then reads the datagrams in journald's native protocol
//! (`NAME=value` lines, or `NAME`, a 64-bit little-endian length and the bytes). Needs root (or
//! the capability to mount): the tests are ignored unless asked for (`--include-ignored`, as
//! `.ci/run` does as root), and then fail without it.

use crate::harness::{Scratch, bin, s};
use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::Duration;

/// One journal entry: field name → value.
type Entry = BTreeMap<String, String>;

/// Parse one datagram of journald's native protocol.
fn parse(mut b: &[u8]) -> Entry {
    let mut e = Entry::new();
    while !b.is_empty() {
        let Some(nl) = b.iter().position(|&c| c == b'\n') else {
            break;
        };
        let line = &b[..nl];
        if let Some(eq) = line.iter().position(|&c| c == b'=') {
            e.insert(
                String::from_utf8_lossy(&line[..eq]).into(),
                String::from_utf8_lossy(&line[eq + 1..]).into(),
            );
            b = &b[nl + 1..];
        } else {
            let name = String::from_utf8_lossy(line).into_owned();
            let rest = &b[nl + 1..];
            let len = u64::from_le_bytes(rest[..8].try_into().unwrap()) as usize;
            e.insert(name, String::from_utf8_lossy(&rest[8..8 + len]).into());
            b = &rest[8 + len + 1..];
        }
    }
    e
}

/// Whether this process may build a private mount namespace (root, util-linux's unshare).
fn can_unshare() -> bool {
    Command::new("unshare")
        .args(["-m", "--propagation", "private", "true"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Run `program ARGS` with `xml` on stdin inside a private mount namespace where `sock` is
/// journald's socket.
fn run_through(sock: &std::path::Path, program: &str, args: &str, xml: &str) -> i32 {
    let script = format!(
        "mount -t tmpfs tmpfs /run && mkdir -p /run/systemd/journal \
         && touch /run/systemd/journal/socket \
         && mount --bind '{}' /run/systemd/journal/socket && exec '{program}' {args}",
        s(sock),
    );
    let mut child = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _ = child.stdin.take().unwrap().write_all(xml.as_bytes());
    child.wait().unwrap().code().unwrap_or(-1)
}

/// Run the hook with `xml` on stdin inside the namespace where `sock` is journald's socket.
fn hook_through(sock: &std::path::Path, policy: &std::path::Path, args: &[&str], xml: &str) -> i32 {
    let args = format!(
        "hook --policy '{}' --no-qemu-caps-cache --snapshot-dir /run/none {}",
        s(policy),
        args.join(" ")
    );
    run_through(sock, bin(), &args, xml)
}

/// Every entry the program that just ended sent to `sock` (tracing-journald's empty probe
/// datagram left out).
fn entries(sock: &UnixDatagram) -> Vec<Entry> {
    sock.set_nonblocking(true).unwrap();
    let mut buf = vec![0u8; 65536];
    let mut out = Vec::new();
    while let Ok(n) = sock.recv(&mut buf) {
        if n > 0 {
            out.push(parse(&buf[..n]));
        }
    }
    sock.set_nonblocking(false).unwrap();
    out
}

/// The one decision (an entry with `DECISION`) among `entries`.
#[track_caller]
fn one_decision(entries: &[Entry]) -> &Entry {
    let d: Vec<&Entry> = entries
        .iter()
        .filter(|e| e.contains_key("DECISION"))
        .collect();
    assert_eq!(d.len(), 1, "one decision per hook call: {entries:#?}");
    d[0]
}

/// No field of `e` holds domain XML, a line break, or a prefixed name.
#[track_caller]
fn clean(e: &Entry) {
    assert!(
        !e.keys().any(|k| k.starts_with("F_")),
        "unprefixed fields: {e:#?}"
    );
    for v in e.values() {
        assert!(
            !v.contains("<domain") && !v.contains("s3cret"),
            "XML in the journal: {v}"
        );
        assert!(!v.contains('\n'), "a field of several lines: {e:#?}");
    }
}

/// Panics when no private mount namespace can be made (the tests that need one are ignored
/// unless asked for: `.ci/run` runs them as root).
fn require_namespace() {
    assert!(
        can_unshare(),
        "needs root (or the capability to mount): unshare --mount must work"
    );
}

const CLOUDSTACK: &str = "<domain type='kvm'>\n  <name>i-2-14-VM</name>\n  <vcpu>2</vcpu>\n  <os>\n    <type arch='x86_64' machine='pc'>hvm</type>\n  </os>\n  <cpu><topology sockets='1' cores='2' threads='1' /></cpu>\n  <devices><graphics type='vnc' passwd='s3cret'/></devices>\n</domain>\n";

/// A policy of one x86-64-v2 rule with these `[hook]` settings.
fn policy(on_violation: &str, on_error: &str) -> String {
    format!(
        "version = 1\n[hook]\non_violation = \"{on_violation}\"\non_error = \"{on_error}\"\n[[rule]]\nname = \"x86-64-v2 baseline\"\nmatch = {{ arch = \"x86_64\" }}\ncpu.min_level = \"x86-64-v2\"\n"
    )
}

/// Each kind of decision, with the journal `PRIORITY` docs/journal.md gives it: a refusal 4 (warning),
/// a guest let through below the policy 4, the hook's own failure 3 (err), a guest let through
/// with nothing wrong 6 (info).
#[test]
#[ignore = "needs root (a private mount namespace): .ci/run runs as root"]
fn hook_decisions_reach_journald_with_their_fields() {
    require_namespace();
    let t = Scratch::new("journal");
    let sock_path = t.path("journal.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let deny = t.write("deny.toml", policy("deny", "deny"));
    let warn = t.write("warn.toml", policy("warn", "allow"));
    let conforming = CLOUDSTACK.replace(
        "<cpu><topology sockets='1' cores='2' threads='1' /></cpu>",
        "<cpu mode='custom'><model>Nehalem</model></cpu>",
    );
    // (policy, operation, XML, exit, MESSAGE_ID, VERDICT, RULE, CODE, PRIORITY)
    let cases = [
        (
            &deny,
            "prepare",
            CLOUDSTACK,
            1,
            "4ae705035d2441d08a09a18dfcbc09be",
            "refuse",
            Some("x86-64-v2 baseline"),
            Some("cpu-level"),
            "4",
        ),
        (
            &warn,
            "prepare",
            CLOUDSTACK,
            0,
            "ae90be5fa89e42ffbcc423cedbe8c7f4",
            "allow",
            Some("x86-64-v2 baseline"),
            Some("cpu-level"),
            "4",
        ),
        (
            &deny,
            "prepare",
            &conforming,
            0,
            "1bf6f9280b904f00aa082c3206e10849",
            "allow",
            None,
            None,
            "6",
        ),
        (
            &deny,
            "migrate",
            "<domain",
            1,
            "3008fddf2ee348799ea485709f14b359",
            "refuse",
            Some("[hook] on_error"),
            Some("xml"),
            "3",
        ),
        (
            &warn,
            "restore",
            "<domain",
            0,
            "f3b0c6b0d70941ceaf632ba6b321e054",
            "allow",
            Some("[hook] on_error"),
            Some("xml"),
            "3",
        ),
    ];
    for (p, op, xml, code, id, verdict, rule, finding, priority) in cases {
        let rc = hook_through(&sock_path, p, &["i-2-14-VM", op, "begin", "-"], xml);
        assert_eq!(rc, code, "{op} under {}", s(p));
        let all = entries(&sock);
        let entry = one_decision(&all);
        assert_eq!(entry["MESSAGE_ID"], id, "{entry:#?}");
        assert_eq!(entry["PRIORITY"], priority, "{entry:#?}");
        assert_eq!(entry["GUEST"], "i-2-14-VM");
        assert_eq!(entry["OPERATION"], op);
        assert_eq!(entry["VERDICT"], verdict);
        assert_eq!(entry.get("RULE").map(String::as_str), rule, "{entry:#?}");
        assert_eq!(entry.get("CODE").map(String::as_str), finding, "{entry:#?}");
        assert_eq!(entry["SYSLOG_IDENTIFIER"], "virt-cpu-policy");
        assert!(!entry["MESSAGE"].is_empty());
        all.iter().for_each(clean);
    }
}

/// A warning is its own entry (`MESSAGE_ID` `hook-warning`, `PRIORITY` 4, the finding as
/// `MESSAGE`), beside the one decision, and so is a change only libvirt's built-in cleanups ask
/// for (`CODE` `builtin-change`); a restore below the policy is one decision.
#[test]
#[ignore = "needs root (a private mount namespace): .ci/run runs as root"]
fn hook_warnings_reach_journald_beside_one_decision() {
    require_namespace();
    let t = Scratch::new("journal-warn");
    let sock_path = t.path("journal.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    let warn = t.write("warn.toml", policy("warn", "allow"));
    let host_model = CLOUDSTACK.replace(
        "<cpu><topology sockets='1' cores='2' threads='1' /></cpu>",
        "<cpu mode='host-model' match='exact'/>",
    );
    for op in ["prepare", "migrate"] {
        let rc = hook_through(
            &sock_path,
            &warn,
            &["i-2-14-VM", op, "begin", "-"],
            &host_model,
        );
        assert_eq!(rc, 0);
        let all = entries(&sock);
        one_decision(&all);
        // On prepare, the `match` a rewrite would drop is a built-in change: a warning too.
        let builtin = |e: &&Entry| e.get("CODE").is_some_and(|c| c == "builtin-change");
        let b: Vec<&Entry> = all.iter().filter(builtin).collect();
        assert_eq!(b.len(), usize::from(op == "prepare"), "{op}: {all:#?}");
        for e in b {
            assert_eq!(
                e["MESSAGE_ID"], "fc3e55da7ca34faa94b17bcbd67937ba",
                "{e:#?}"
            );
            assert_eq!(e["PRIORITY"], "4");
            assert_eq!(e["RULE"], "built-in: libvirt rules");
            assert!(!e.contains_key("DECISION"), "{e:#?}");
        }
        let w: Vec<&Entry> = all
            .iter()
            .filter(|e| !e.contains_key("DECISION") && !builtin(e))
            .collect();
        assert_eq!(w.len(), 1, "{op}: one warning: {all:#?}");
        assert_eq!(
            w[0]["MESSAGE_ID"], "fc3e55da7ca34faa94b17bcbd67937ba",
            "{w:#?}"
        );
        assert_eq!(w[0]["PRIORITY"], "4");
        assert_eq!(w[0]["CODE"], "cpu-match-host-model");
        assert_eq!(w[0]["OPERATION"], op);
        assert_eq!(w[0]["GUEST"], "i-2-14-VM");
        assert_eq!(
            w[0]["MESSAGE"],
            "<cpu match> has no meaning with mode='host-model'"
        );
        all.iter().for_each(clean);
    }

    let rc = hook_through(
        &sock_path,
        &warn,
        &["i-2-14-VM", "restore", "begin", "-"],
        CLOUDSTACK,
    );
    assert_eq!(rc, 0);
    let all = entries(&sock);
    let d = one_decision(&all);
    assert_eq!(
        d["MESSAGE_ID"], "ae90be5fa89e42ffbcc423cedbe8c7f4",
        "{d:#?}"
    );
    assert_eq!(d["PRIORITY"], "4");
}

/// A policy with several mistakes is one `MESSAGE` line, the mistakes joined with "; ".
#[test]
#[ignore = "needs root (a private mount namespace): .ci/run runs as root"]
fn hook_policy_errors_reach_journald_on_one_line() {
    require_namespace();
    let t = Scratch::new("journal-policy");
    let sock_path = t.path("journal.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    let broken = t.write(
        "broken.toml",
        "mode = \"enforc\"\n[hook]\non_error = \"allow\"\n[[rule]]\ncpu.min_level = \"v9\"\n",
    );
    let rc = hook_through(
        &sock_path,
        &broken,
        &["i-2-14-VM", "prepare", "begin", "-"],
        CLOUDSTACK,
    );
    assert_eq!(rc, 0);
    let all = entries(&sock);
    let d = one_decision(&all);
    assert_eq!(
        d["MESSAGE_ID"], "f3b0c6b0d70941ceaf632ba6b321e054",
        "{d:#?}"
    );
    assert_eq!(d["PRIORITY"], "3");
    let want = format!(
        "policy {}: 3 errors: line 1, column 8: key `mode`: unknown variant `enforc`, expected `enforce` or `audit`; line 4, column 1: key `rule.name`: missing: every [[rule]] needs a name; line 5, column 17: key `rule.cpu.min_level`",
        s(&broken)
    );
    assert!(d["MESSAGE"].starts_with(&want), "{d:#?}");
    all.iter().for_each(clean);
}

/// The daemon's policy error, through the same socket: one line, `PRIORITY` 3. It stops before
/// it connects to libvirt.
#[cfg(feature = "daemon")]
#[test]
#[ignore = "needs root (a private mount namespace): .ci/run runs as root"]
fn daemon_policy_error_reaches_journald_on_one_line() {
    require_namespace();
    let t = Scratch::new("journal-daemon");
    let sock_path = t.path("journal.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    let broken = t.write("broken.toml", "mode = \"enforc\"\n[[rule]]\nname = 3\n");
    let args = format!(
        "--uri test:///default --policy '{}' --snapshot-dir '{}' daemon",
        s(&broken),
        s(&t.path("snap"))
    );
    let rc = run_through(
        &sock_path,
        env!("CARGO_BIN_EXE_virt-cpu-policyd"),
        &args,
        "",
    );
    assert_eq!(rc, 2);
    let all = entries(&sock);
    assert_eq!(all.len(), 1, "{all:#?}");
    let e = &all[0];
    assert_eq!(e["PRIORITY"], "3", "{e:#?}");
    assert_eq!(e["SYSLOG_IDENTIFIER"], "virt-cpu-policyd");
    assert_eq!(e["MESSAGE"], "cannot load the policy");
    assert!(
        e["ERROR"].contains("2 errors: line 1, column 8: key `mode`")
            && e["ERROR"].contains("; line 3, column 8: key `rule.name`"),
        "{e:#?}"
    );
    clean(e);
}
