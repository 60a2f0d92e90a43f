//! The hook's decisions through journald's socket: each carries `GUEST`, `OPERATION`, `VERDICT`,
//! `RULE`, `CODE` and its `MESSAGE_ID`, and never domain XML.
//!
//! CI containers run no journald, and a test must not replace the machine's
//! `/run/systemd/journal/socket` (other programs log there). So the test binds a datagram socket
//! of its own and runs the hook with `unshare --mount`: in that private mount namespace a tmpfs
//! covers `/run` and the test's socket is bind-mounted at `/run/systemd/journal/socket`, where
//! tracing-journald sends. The test then reads the datagrams in journald's native protocol
//! (`NAME=value` lines, or `NAME`, a 64-bit little-endian length and the bytes). Needs root (or
//! the capability to mount); skipped, with a message, elsewhere, and a failure under `CI=true`.

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

/// Run the hook with `xml` on stdin inside the namespace where `sock` is journald's socket.
fn hook_through(sock: &std::path::Path, policy: &std::path::Path, args: &[&str], xml: &str) -> i32 {
    let script = format!(
        "mount -t tmpfs tmpfs /run && mkdir -p /run/systemd/journal && touch /run/systemd/journal/socket \
         && mount --bind '{}' /run/systemd/journal/socket && exec '{}' hook --policy '{}' \
         --no-qemu-caps-cache --snapshot-dir /run/none {}",
        s(sock),
        bin(),
        s(policy),
        args.join(" ")
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

const CLOUDSTACK: &str = "<domain type='kvm'>\n  <name>i-2-14-VM</name>\n  <vcpu>2</vcpu>\n  <os>\n    <type arch='x86_64' machine='pc'>hvm</type>\n  </os>\n  <cpu><topology sockets='1' cores='2' threads='1' /></cpu>\n  <devices><graphics type='vnc' passwd='s3cret'/></devices>\n</domain>\n";

#[test]
fn hook_decisions_reach_journald_with_their_fields() {
    if !can_unshare() {
        assert!(
            std::env::var("CI").is_err(),
            "CI runs as root: unshare --mount must work"
        );
        eprintln!("skipping: cannot make a private mount namespace (not root?)");
        return;
    }
    let t = Scratch::new("journal");
    let sock_path = t.path("journal.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let policy = |v: &str, e: &str| {
        format!(
            "version = 1\n[hook]\non_violation = \"{v}\"\non_error = \"{e}\"\n[[rule]]\nname = \"x86-64-v2 baseline\"\nmatch = {{ arch = \"x86_64\" }}\ncpu.min_level = \"x86-64-v2\"\n"
        )
    };
    let deny = t.write("deny.toml", policy("deny", "deny"));
    let warn = t.write("warn.toml", policy("warn", "allow"));
    let conforming = CLOUDSTACK.replace(
        "<cpu><topology sockets='1' cores='2' threads='1' /></cpu>",
        "<cpu mode='custom'><model>Nehalem</model></cpu>",
    );
    // (policy, operation, XML, exit, MESSAGE_ID, VERDICT, RULE, CODE)
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
        ),
    ];
    for (p, op, xml, code, id, verdict, rule, finding) in cases {
        let rc = hook_through(&sock_path, p, &["i-2-14-VM", op, "begin", "-"], xml);
        assert_eq!(rc, code, "{op} under {}", s(p));
        // The hook's first datagram is tracing-journald's empty probe.
        let mut buf = vec![0u8; 65536];
        let entry = loop {
            let n = sock.recv(&mut buf).expect("a journal entry within 5 s");
            if n > 0 {
                break parse(&buf[..n]);
            }
        };
        assert_eq!(entry["MESSAGE_ID"], id, "{entry:#?}");
        assert_eq!(entry["GUEST"], "i-2-14-VM");
        assert_eq!(entry["OPERATION"], op);
        assert_eq!(entry["VERDICT"], verdict);
        assert_eq!(entry.get("RULE").map(String::as_str), rule, "{entry:#?}");
        assert_eq!(entry.get("CODE").map(String::as_str), finding, "{entry:#?}");
        assert_eq!(entry["SYSLOG_IDENTIFIER"], "virt-cpu-policy");
        assert!(entry.contains_key("DECISION") && !entry["MESSAGE"].is_empty());
        assert!(
            !entry.keys().any(|k| k.starts_with("F_")),
            "unprefixed fields: {entry:#?}"
        );
        for v in entry.values() {
            assert!(
                !v.contains("<domain") && !v.contains("s3cret"),
                "XML in the journal: {v}"
            );
        }
    }
}
