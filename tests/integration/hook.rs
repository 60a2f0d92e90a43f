//! The libvirt qemu hook (`virt-cpu-policy hook GUEST OPERATION SUB-OPERATION EXTRA`), end to end
//! with the real binary: which operations are checked, the refusal line libvirt shows, the
//! `[hook]` settings (`on_violation`, `on_error`, `mode = "audit"`), what is logged (never domain
//! XML) and what is never written (stdout: on migrate and restore libvirt would take it as new XML).
//!
//! Every run passes `--policy`, `--log-file` (a scratch file) and `--snapshot-dir` (an empty
//! scratch directory), so neither /etc, /var/log nor /var/lib of the machine running the tests
//! changes or is changed by the results.

use crate::golden::golden_cpu_map;
use crate::harness::{Cmd, Output, Scratch, bin, s, shared_corpus};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use virt_cpu_policy::hook_decisions;
use virt_cpu_policy::log::Decision;

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

impl Scratch {
    /// A scratch directory with an empty `snap/` (the snapshot directory).
    fn with_snap(tag: &str) -> Scratch {
        let t = Scratch::new(tag);
        std::fs::create_dir_all(t.path("snap")).expect("create snap dir");
        t
    }

    fn log_path(&self) -> PathBuf {
        self.path("hook.log")
    }

    /// The log file's text ("" when it was never written).
    fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// `hook --policy P --log-file L --snapshot-dir D ARGS...`.
    fn hook(&self, policy: &Path, args: &[&str]) -> Cmd {
        Cmd::new(&["hook", "--policy"])
            .arg(s(policy))
            .arg("--log-file")
            .arg(s(&self.log_path()))
            .arg("--snapshot-dir")
            .arg(s(&self.path("snap")))
            .args(args)
    }
}

/// A policy: x86-64-v2 for every x86_64 guest, with the given mode and `[hook]` settings, and
/// libvirt 9.0.0's cpu_map from `tests/data` (the hook has no `--cpu-map`).
fn policy(mode: &str, on_violation: &str, on_error: &str) -> String {
    format!(
        r#"version = 1
mode = "{mode}"

[hook]
on_violation = "{on_violation}"
on_error = "{on_error}"

[host]
cpu_map = "{}"

[[rule]]
name = "x86-64-v2 baseline"
match = {{ arch = "x86_64" }}
cpu.min_level = "x86-64-v2"
"#,
        s(&golden_cpu_map())
    )
}

const RULE: &str = "x86-64-v2 baseline";

/// The level features a bare `<cpu>` (QEMU's default, qemu64) lacks.
const QEMU64_MISSING: [&str; 5] = ["lahf_lm", "popcnt", "sse4.1", "sse4.2", "ssse3"];

/// What CloudStack writes by default: `<cpu>` with only a topology, kvm, x86_64, machine `pc`.
/// Carries a VNC password and a description marker, neither of which may reach the log.
fn cloudstack(name: &str) -> String {
    format!(
        "<domain type='kvm'>
  <name>{name}</name>
  <uuid>6f3c2a5e-4b7d-4e0a-9c61-2d8f0b3e7a14</uuid>
  <description>DESCRIPTION-MARKER-7f1c</description>
  <memory>2097152</memory>
  <currentMemory>2097152</currentMemory>
  <vcpu>2</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type><boot dev='hd'/></os>
  <features><pae/><apic/><acpi/></features>
  <cpu><topology sockets='1' cores='2' threads='1' /></cpu>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <graphics type='vnc' autoport='yes' listen='0.0.0.0' passwd='TOPSECRET'>
    </graphics>
  </devices>
</domain>
"
    )
}

/// The same guest as the policy's rewrite leaves it (qemu64 written out, level features
/// required): conforms to the v2 policy.
fn conforming(name: &str) -> String {
    cloudstack(name).replace(
        "<cpu><topology sockets='1' cores='2' threads='1' /></cpu>",
        "<cpu>
    <model>qemu64</model>
    <topology sockets='1' cores='2' threads='1'/>
    <feature policy='disable' name='svm'/>
    <feature policy='require' name='lahf_lm'/>
    <feature policy='require' name='popcnt'/>
    <feature policy='require' name='sse4.1'/>
    <feature policy='require' name='sse4.2'/>
    <feature policy='require' name='ssse3'/>
  </cpu>",
    )
}

/// Live XML (what libvirt passes at `started begin`) of a kvm Nehalem guest, with
/// `disabled` listed as `<feature policy='disable'>` (what QEMU could not give).
fn live_nehalem(name: &str, disabled: &[&str]) -> String {
    let feats: String = disabled
        .iter()
        .map(|f| format!("    <feature policy='disable' name='{f}'/>\n"))
        .collect();
    format!(
        "<domain type='kvm' id='7'>
  <name>{name}</name>
  <uuid>0c6a3a4e-8f55-4f43-9d51-2f0e9c1f8a01</uuid>
  <description>DESCRIPTION-MARKER-7f1c</description>
  <memory unit='KiB'>1048576</memory>
  <currentMemory unit='KiB'>1048576</currentMemory>
  <vcpu placement='static'>2</vcpu>
  <os><type arch='x86_64' machine='pc-q35-7.2'>hvm</type><boot dev='hd'/></os>
  <features><acpi/><apic/></features>
  <cpu mode='custom' match='exact' check='full'>
    <model fallback='forbid'>Nehalem</model>
    <vendor>Intel</vendor>
    <topology sockets='1' dies='1' cores='2' threads='1'/>
{feats}  </cpu>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <graphics type='vnc' port='5900' autoport='yes' listen='127.0.0.1' passwd='TOPSECRET'>
      <listen type='address' address='127.0.0.1'/>
    </graphics>
  </devices>
</domain>
"
    )
}

/// The five features this machine's KVM does not give a Nehalem guest (its nested KVM lacks them).
const NEHALEM_DISABLED: [&str; 5] = ["pni", "popcnt", "sse4.1", "sse4.2", "ssse3"];

/// An incoming (migrate/restore) kvm q35 guest with `vcpus` vCPUs and CPU model `model`; above
/// 255 vCPUs it carries what libvirt needs for that (Intel IOMMU with EIM, split I/O APIC).
fn incoming(name: &str, vcpus: u32, model: &str) -> String {
    format!(
        "<domain type='kvm'>
  <name>{name}</name>
  <description>DESCRIPTION-MARKER-7f1c</description>
  <memory>8388608</memory>
  <vcpu>{vcpus}</vcpu>
  <os><type arch='x86_64' machine='pc-q35-7.2'>hvm</type></os>
  <features><acpi/><apic/><ioapic driver='qemu'/></features>
  <cpu mode='custom' match='exact' check='partial'>
    <model fallback='forbid'>{model}</model>
    <topology sockets='{vcpus}' dies='1' cores='1' threads='1'/>
  </cpu>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <iommu model='intel'><driver intremap='on' eim='on'/></iommu>
    <graphics type='vnc' port='-1' autoport='yes' passwd='TOPSECRET'/>
  </devices>
</domain>
"
    )
}

/// `../shared/corpus/host-libvirt-9.0-qemu-7.2/NAME`, for a test ignored without the corpus;
/// panics when it is absent.
#[track_caller]
fn host_file(name: &str) -> PathBuf {
    let p = shared_corpus().join("host-libvirt-9.0-qemu-7.2").join(name);
    assert!(p.is_file(), "{} is absent", p.display());
    p
}

// ---------------------------------------------------------------------------------------------
// Assertions
// ---------------------------------------------------------------------------------------------

/// Exit 0, nothing on stdout, nothing on stderr.
#[track_caller]
fn allowed(out: &Output) {
    out.status(0);
    assert_eq!(out.stdout, "", "the hook wrote to stdout:\n{}", out.stdout);
    assert_eq!(
        out.stderr, "",
        "an allowed run wrote to stderr:\n{}",
        out.stderr
    );
}

/// Exit 1, nothing on stdout, and exactly one line on stderr:
/// `virt-cpu-policy: guest 'GUEST': WHAT (rule 'RULE'); fix: HOW` containing every needle.
/// Returns the line.
#[track_caller]
fn refused(out: &Output, guest: &str, rule: &str, needles: &[&str]) -> String {
    out.status(1);
    assert_eq!(out.stdout, "", "the hook wrote to stdout:\n{}", out.stdout);
    let line = out
        .stderr
        .strip_suffix('\n')
        .unwrap_or_else(|| panic!("stderr does not end with one newline: {:?}", out.stderr));
    assert!(
        !line.contains('\n') && !line.contains('\r'),
        "stderr is not one line: {:?}",
        out.stderr
    );
    let head = format!("virt-cpu-policy: guest '{guest}': ");
    assert!(
        line.starts_with(&head),
        "stderr does not start with {head:?}: {line}"
    );
    let rule_part = format!(" (rule '{rule}'); fix: ");
    assert!(
        line.contains(&rule_part),
        "stderr lacks {rule_part:?}: {line}"
    );
    let (what, fix) = line[head.len()..].split_once(&rule_part).unwrap();
    assert!(!what.trim().is_empty(), "no WHAT in: {line}");
    assert!(!fix.trim().is_empty(), "no fix in: {line}");
    for n in needles {
        assert!(line.contains(n), "stderr lacks {n:?}: {line}");
    }
    assert!(
        !line.contains("TOPSECRET"),
        "the refusal shows a secret: {line}"
    );
    line.to_string()
}

/// The log must not carry domain XML or anything from it besides the name.
#[track_caller]
fn log_has_no_xml(log: &str) {
    for bad in [
        "TOPSECRET",
        "<domain",
        "DESCRIPTION-MARKER-7f1c",
        "<cpu",
        "passwd",
    ] {
        assert!(!log.contains(bad), "the log contains {bad:?}:\n{log}");
    }
}

// ---------------------------------------------------------------------------------------------
// Operations the hook does not check
// ---------------------------------------------------------------------------------------------

/// OPERATION SUB-OPERATION pairs libvirt sends that the hook passes, plus made-up ones.
const UNCHECKED: [(&str, &str); 14] = [
    ("start", "begin"),
    ("stopped", "end"),
    ("release", "end"),
    ("reconnect", "begin"),
    ("attach", "begin"),
    ("prepare", "end"),
    ("migrate", "end"),
    ("started", "end"),
    ("restore", "end"),
    ("shutdown", "end"),
    ("no-such-operation", "begin"),
    ("prepare", "middle"),
    ("PREPARE", "BEGIN"),
    ("", ""),
];

#[test]
fn unchecked_operations_allow_without_reading_the_policy() {
    let t = Scratch::with_snap("unchecked");
    let missing = t.path("no-such-policy.toml");
    // A policy that refuses everything if it is read at all.
    let broken = t.write(
        "broken.toml",
        "this is {{ not toml\n[hook]\non_error = \"deny\"\non_violation = \"deny\"\n",
    );
    for (op, sub) in UNCHECKED {
        for p in [&missing, &broken] {
            for input in [cloudstack("g1"), "<not xml".to_string(), String::new()] {
                let out = t.hook(p, &["g1", op, sub, "-"]).stdin(input).run();
                allowed(&out);
            }
            // No stdin at all (closed) also passes.
            allowed(&t.hook(p, &["g1", op, sub, "-"]).run());
        }
    }
}

/// Send `data` on stdin, wait at most `limit`; returns (exit code, stdout, stderr, whether
/// every byte was written, elapsed). Writing all of it proves stdin was drained: a hook that
/// exits without reading gives the writer EPIPE.
fn run_with_big_stdin(
    args: &[String],
    data: Arc<Vec<u8>>,
    limit: Duration,
) -> (i32, String, String, bool, Duration) {
    let start = Instant::now();
    let mut child = Command::new(bin())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn virt-cpu-policy");
    let mut w = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let r = w.write_all(&data);
        drop(w);
        r.is_ok()
    });
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            break;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "hook {args:?} did not finish within {limit:?} with {} bytes on stdin",
                20_000_000
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let elapsed = start.elapsed();
    let out = child.wait_with_output().expect("wait");
    let wrote_all = writer.join().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        wrote_all,
        elapsed,
    )
}

#[test]
fn unchecked_operations_drain_20_mb_of_stdin_quickly() {
    let t = Scratch::with_snap("drain");
    let data = Arc::new({
        let mut v = cloudstack("g1").into_bytes();
        v.resize(20_000_000, b' ');
        v
    });
    for (op, sub) in &UNCHECKED[..9] {
        let args: Vec<String> = [
            "hook",
            "--policy",
            &s(&t.path("no-such-policy.toml")),
            "--log-file",
            &s(&t.log_path()),
            "--snapshot-dir",
            &s(&t.path("snap")),
            "g1",
            op,
            sub,
            "-",
        ]
        .iter()
        .map(|x| x.to_string())
        .collect();
        let (code, stdout, stderr, wrote_all, elapsed) =
            run_with_big_stdin(&args, Arc::clone(&data), Duration::from_secs(2));
        assert_eq!(code, 0, "{op} {sub}: exit {code}, stderr {stderr}");
        assert_eq!(stdout, "", "{op} {sub}: stdout not empty");
        assert_eq!(stderr, "", "{op} {sub}: stderr not empty");
        assert!(
            wrote_all,
            "{op} {sub}: stdin was not drained (the writer got an error)"
        );
        assert!(
            elapsed < Duration::from_secs(2),
            "{op} {sub}: took {elapsed:?}"
        );
    }
}

#[test]
fn checked_operation_drains_oversized_stdin_and_follows_on_error() {
    let t = Scratch::with_snap("drain-checked");
    let data = Arc::new({
        let mut v = cloudstack("g1").into_bytes();
        v.resize(20_000_000, b' ');
        v
    });
    for on_error in ["allow", "deny"] {
        let p = t.write("p.toml", policy("enforce", "warn", on_error));
        let args: Vec<String> = [
            "hook",
            "--policy",
            &s(&p),
            "--log-file",
            &s(&t.log_path()),
            "--snapshot-dir",
            &s(&t.path("snap")),
            "g1",
            "prepare",
            "begin",
            "-",
        ]
        .iter()
        .map(|x| x.to_string())
        .collect();
        let (code, stdout, stderr, wrote_all, elapsed) =
            run_with_big_stdin(&args, Arc::clone(&data), Duration::from_secs(2));
        assert_eq!(stdout, "");
        assert!(wrote_all, "on_error = {on_error}: stdin was not drained");
        assert!(elapsed < Duration::from_secs(2), "took {elapsed:?}");
        if on_error == "allow" {
            assert_eq!((code, stderr.as_str()), (0, ""), "on_error = allow");
        } else {
            let out = Output {
                code,
                stdout,
                stderr,
            };
            refused(&out, "g1", "[hook] on_error", &["limit"]);
        }
    }
    log_has_no_xml(&t.log());
}

// ---------------------------------------------------------------------------------------------
// prepare begin
// ---------------------------------------------------------------------------------------------

#[test]
fn prepare_allows_a_conforming_guest() {
    let t = Scratch::with_snap("prepare-ok");
    for v in ["deny", "warn"] {
        let p = t.write("p.toml", policy("enforce", v, "deny"));
        let out = t
            .hook(&p, &["i-2-14-VM", "prepare", "begin", "-"])
            .stdin(conforming("i-2-14-VM"))
            .run();
        allowed(&out);
    }
    let log = t.log();
    assert!(log.contains("i-2-14-VM"), "decision not logged:\n{log}");
    log_has_no_xml(&log);
}

#[test]
fn prepare_deny_refuses_the_cloudstack_default_naming_rule_and_features() {
    let t = Scratch::with_snap("prepare-deny");
    let p = t.write("p.toml", policy("enforce", "deny", "allow"));
    let out = t
        .hook(&p, &["i-2-14-VM", "prepare", "begin", "-"])
        .stdin(cloudstack("i-2-14-VM"))
        .run();
    let mut needles = vec!["x86-64-v2"];
    needles.extend(QEMU64_MISSING);
    refused(&out, "i-2-14-VM", RULE, &needles);
    let log = t.log();
    assert!(log.contains("i-2-14-VM") && log.contains("refuse"), "{log}");
    log_has_no_xml(&log);
}

#[test]
fn prepare_deny_also_for_tcg() {
    let t = Scratch::with_snap("prepare-deny-tcg");
    let p = t.write("p.toml", policy("enforce", "deny", "allow"));
    let xml = cloudstack("tcg-guest").replace("<domain type='kvm'>", "<domain type='qemu'>");
    let out = t
        .hook(&p, &["tcg-guest", "prepare", "begin", "-"])
        .stdin(xml)
        .run();
    refused(&out, "tcg-guest", RULE, &QEMU64_MISSING);
}

#[test]
fn prepare_warn_allows_and_logs_the_decision() {
    let t = Scratch::with_snap("prepare-warn");
    let p = t.write("p.toml", policy("enforce", "warn", "allow"));
    let out = t
        .hook(&p, &["i-2-14-VM", "prepare", "begin", "-"])
        .stdin(cloudstack("i-2-14-VM"))
        .run();
    allowed(&out);
    let log = t.log();
    assert!(log.contains("i-2-14-VM"), "guest name not logged:\n{log}");
    assert!(log.contains("prepare"), "operation not logged:\n{log}");
    assert!(
        log.contains("on_violation = warn"),
        "decision not logged:\n{log}"
    );
    assert!(log.contains(RULE), "rule not logged:\n{log}");
    log_has_no_xml(&log);
}

#[test]
fn prepare_refuses_what_libvirt_would_refuse_even_under_warn() {
    let t = Scratch::with_snap("prepare-libvirt");
    let p = t.write("p.toml", policy("enforce", "warn", "allow"));
    // Topology product 2, maximum 3.
    let topo = conforming("g-topo").replace("<vcpu>2</vcpu>", "<vcpu>3</vcpu>");
    let out = t
        .hook(&p, &["g-topo", "prepare", "begin", "-"])
        .stdin(topo)
        .run();
    refused(
        &out,
        "g-topo",
        "libvirt: topology-mismatch",
        &["topology", "3"],
    );
    // host-passthrough under TCG.
    let hp = cloudstack("g-hp")
        .replace("<domain type='kvm'>", "<domain type='qemu'>")
        .replace(
            "<cpu><topology sockets='1' cores='2' threads='1' /></cpu>",
            "<cpu mode='host-passthrough'/>",
        );
    let out = t
        .hook(&p, &["g-hp", "prepare", "begin", "-"])
        .stdin(hp)
        .run();
    refused(
        &out,
        "g-hp",
        "libvirt: cpu-mode-unsupported",
        &["host-passthrough"],
    );
    log_has_no_xml(&t.log());
}

#[test]
fn prepare_audit_never_refuses() {
    let t = Scratch::with_snap("prepare-audit");
    let p = t.write("p.toml", policy("audit", "deny", "deny"));
    let topo = conforming("g").replace("<vcpu>2</vcpu>", "<vcpu>3</vcpu>");
    let hp = cloudstack("g")
        .replace("<domain type='kvm'>", "<domain type='qemu'>")
        .replace(
            "<cpu><topology sockets='1' cores='2' threads='1' /></cpu>",
            "<cpu mode='host-passthrough'/>",
        );
    for xml in [
        cloudstack("g"),
        conforming("g"),
        topo,
        hp,
        "<domain".into(),
        String::new(),
    ] {
        for (op, sub) in [
            ("prepare", "begin"),
            ("migrate", "begin"),
            ("restore", "begin"),
        ] {
            let out = t.hook(&p, &["g", op, sub, "-"]).stdin(xml.clone()).run();
            allowed(&out);
        }
    }
    let out = t
        .hook(&p, &["g", "started", "begin", "-"])
        .stdin(live_nehalem("g", &NEHALEM_DISABLED))
        .run();
    allowed(&out);
    let log = t.log();
    assert!(log.contains("audit"), "audit decisions not logged:\n{log}");
    log_has_no_xml(&log);
}

// ---------------------------------------------------------------------------------------------
// started begin (live XML)
// ---------------------------------------------------------------------------------------------

#[test]
fn started_deny_refuses_the_features_qemu_disabled() {
    let t = Scratch::with_snap("started-deny");
    let p = t.write("p.toml", policy("enforce", "deny", "allow"));
    let out = t
        .hook(&p, &["neh", "started", "begin", "-"])
        .stdin(live_nehalem("neh", &NEHALEM_DISABLED))
        .run();
    let mut needles = vec!["x86-64-v2", "disabled"];
    needles.extend(NEHALEM_DISABLED);
    refused(&out, "neh", RULE, &needles);
    log_has_no_xml(&t.log());
}

#[test]
fn started_deny_names_even_a_single_disabled_feature() {
    let t = Scratch::with_snap("started-one");
    let p = t.write("p.toml", policy("enforce", "deny", "allow"));
    let out = t
        .hook(&p, &["neh", "started", "begin", "-"])
        .stdin(live_nehalem("neh", &["popcnt"]))
        .run();
    let line = refused(&out, "neh", RULE, &["popcnt"]);
    for f in ["pni", "sse4.1", "sse4.2", "ssse3"] {
        assert!(
            !line.contains(f),
            "names {f}, which QEMU did not disable: {line}"
        );
    }
}

#[test]
fn started_warn_allows_and_logs() {
    let t = Scratch::with_snap("started-warn");
    let p = t.write("p.toml", policy("enforce", "warn", "allow"));
    let out = t
        .hook(&p, &["neh", "started", "begin", "-"])
        .stdin(live_nehalem("neh", &NEHALEM_DISABLED))
        .run();
    allowed(&out);
    let log = t.log();
    assert!(log.contains("neh"), "guest not logged:\n{log}");
    assert!(log.contains("started"), "operation not logged:\n{log}");
    assert!(
        log.contains("on_violation = warn"),
        "decision not logged:\n{log}"
    );
    assert!(
        log.contains("popcnt"),
        "disabled features not logged:\n{log}"
    );
    log_has_no_xml(&log);
}

#[test]
fn started_allows_a_live_cpu_with_nothing_disabled() {
    let t = Scratch::with_snap("started-ok");
    let p = t.write("p.toml", policy("enforce", "deny", "deny"));
    let out = t
        .hook(&p, &["neh", "started", "begin", "-"])
        .stdin(live_nehalem("neh", &[]))
        .run();
    allowed(&out);
    // A disabled feature the level does not need is fine too.
    let out = t
        .hook(&p, &["neh", "started", "begin", "-"])
        .stdin(live_nehalem("neh", &["vme"]))
        .run();
    allowed(&out);
}

#[test]
fn started_allows_host_passthrough() {
    let t = Scratch::with_snap("started-hp");
    let p = t.write("p.toml", policy("enforce", "deny", "deny"));
    let live = live_nehalem("hp", &[]);
    let start = live.find("  <cpu mode=").unwrap();
    let end = live.find("</cpu>\n").unwrap() + "</cpu>\n".len();
    let hp = format!(
        "{}  <cpu mode='host-passthrough' check='none' migratable='on'>\n    <topology sockets='1' dies='1' cores='2' threads='1'/>\n  </cpu>\n{}",
        &live[..start],
        &live[end..]
    );
    let out = t.hook(&p, &["hp", "started", "begin", "-"]).stdin(hp).run();
    allowed(&out);
}

// ---------------------------------------------------------------------------------------------
// migrate begin / restore begin (this host is the destination)
// ---------------------------------------------------------------------------------------------

#[test]
#[cfg_attr(
    not(vcp_shared_corpus),
    ignore = "needs ../shared/corpus beside the checkout"
)]
fn destination_refuses_more_vcpus_than_the_machine_limit() {
    let caps = host_file("capabilities.xml");
    let t = Scratch::with_snap("dest-limit");
    let p = t.write("p.toml", policy("enforce", "warn", "allow"));
    for op in ["migrate", "restore"] {
        let out = t
            .hook(&p, &["--caps", &s(&caps), "big", op, "begin", "-"])
            .stdin(incoming("big", 300, "Skylake-Client"))
            .run();
        refused(
            &out,
            "big",
            "libvirt: machine-vcpu-limit",
            &["288", "300", "pc-q35-7.2"],
        );
    }
    log_has_no_xml(&t.log());
}

#[test]
#[cfg_attr(
    not(vcp_shared_corpus),
    ignore = "needs ../shared/corpus beside the checkout"
)]
fn destination_allows_a_fine_guest_with_empty_stdout() {
    let caps = host_file("capabilities.xml");
    // Known only by `virsh capabilities`: the incoming CPU is compared with the physical CPU
    // (Broadwell) less what KVM never gives a guest, so the guest names that model.
    let t = Scratch::with_snap("dest-ok");
    for v in ["deny", "warn"] {
        let p = t.write("p.toml", policy("enforce", v, "deny"));
        for op in ["migrate", "restore"] {
            let out = t
                .hook(&p, &["--caps", &s(&caps), "fine", op, "begin", "-"])
                .stdin(incoming("fine", 8, "Broadwell"))
                .run();
            allowed(&out);
            // 288 is exactly the limit: still fine.
            let out = t
                .hook(&p, &["--caps", &s(&caps), "fine", op, "begin", "-"])
                .stdin(incoming("fine", 288, "Broadwell"))
                .run();
            allowed(&out);
        }
    }
    log_has_no_xml(&t.log());
}

/// The incoming CPU against this host's host-model CPU (the corpus host's KVM lacks pni and
/// popcnt): libvirt's compare (`virt-cpu-policy compare`) decides, naming the missing features.
#[test]
#[cfg_attr(
    not(vcp_shared_corpus),
    ignore = "needs ../shared/corpus beside the checkout"
)]
fn destination_refuses_a_model_this_host_cannot_run() {
    let domcaps = host_file("domcapabilities-x86_64-q35-kvm.xml");
    let t = Scratch::with_snap("dest-incompatible");
    let p = t.write("p.toml", policy("enforce", "warn", "allow"));
    for op in ["migrate", "restore"] {
        let out = t
            .hook(&p, &["--caps", &s(&domcaps), "neh", op, "begin", "-"])
            .stdin(incoming("neh", 4, "Nehalem"))
            .run();
        refused(
            &out,
            "neh",
            "libvirt: cpu-incompatible",
            &[
                "model Nehalem",
                "Host CPU does not provide required features: pni, ssse3, sse4.1, sse4.2, popcnt",
            ],
        );
    }
    log_has_no_xml(&t.log());
}

/// `prepare begin` of a KVM custom CPU under `check='partial'` is judged as libvirt judges it at
/// start (the validator's `cpu-incompatible`, src/validate/kvm.rs): on bookworm's facts (an
/// Intel host whose KVM lacks pni and popcnt) `qemu64` is refused in libvirt's words (its
/// cpu_map lists svm), `Nehalem` (usable='no') is let through with its warning, as libvirt 9.0
/// starts it; without the host's capabilities nothing is compared.
#[test]
fn prepare_refuses_a_kvm_custom_cpu_libvirt_refuses_at_start() {
    let g = crate::harness::root().join("tests/data/generations/bookworm");
    let (caps, domcaps) = (
        s(&g.join("capabilities.xml")),
        s(&g.join("domcapabilities-x86_64-q35-kvm.xml")),
    );
    let t = Scratch::with_snap("prepare-kvm-start");
    let p = t.write(
        "p.toml",
        format!(
            "version = 1\n[host]\ncpu_map = \"{}\"\n",
            s(&golden_cpu_map())
        ),
    );
    // `prepare begin` of guest `name` with `model`, the host known by `facts`.
    let prepare = |name: &str, model: &str, facts: &[&String]| {
        let mut args: Vec<&str> = facts.iter().flat_map(|f| ["--caps", f.as_str()]).collect();
        args.extend([name, "prepare", "begin", "-"]);
        t.hook(&p, &args).stdin(incoming(name, 1, model)).run()
    };
    refused(
        &prepare("q64", "qemu64", &[&caps, &domcaps]),
        "q64",
        "libvirt: cpu-incompatible",
        &[
            "the CPU is incompatible with host CPU: Host CPU does not provide required features: svm",
        ],
    );
    allowed(&prepare("neh", "Nehalem", &[&caps, &domcaps]));
    assert!(t.log().contains("cpu-model-unusable"), "{}", t.log());
    allowed(&prepare("q64", "qemu64", &[&domcaps]));
    log_has_no_xml(&t.log());
}

/// `migrate begin`/`restore begin` compare the incoming CPU with this host's host-model CPU (as
/// `virt-cpu-policy compare` does): identical and superset go in, incompatible is refused naming
/// the missing features; the host's facts come from `--caps` or from the daemon's snapshot (a
/// `<hostFacts>` file); with capabilities only, the physical CPU less what KVM never gives a
/// guest is compared; without any CPU the log says the compare was not possible.
#[test]
#[cfg_attr(
    not(vcp_shared_corpus),
    ignore = "needs ../shared/corpus beside the checkout"
)]
fn destination_compares_the_incoming_cpu_with_this_hosts() {
    let domcaps = host_file("domcapabilities-x86_64-q35-kvm.xml");
    let caps = host_file("capabilities.xml");
    let dc_text = std::fs::read_to_string(&domcaps).unwrap();
    // This host's host-model CPU as a custom CPU: what a host-model guest started here becomes.
    let host_model = dc_text
        .split("<mode name='host-model' supported='yes'>")
        .nth(1)
        .and_then(|m| m.split("</mode>").next())
        .expect("a host-model CPU")
        .to_string();
    let with_cpu = |name: &str, cpu: &str| {
        incoming(name, 4, "kvm64").replace("<model fallback='forbid'>kvm64</model>", cpu)
    };
    let identical = with_cpu("same", &host_model);
    let superset = with_cpu("small", "<model fallback='forbid'>pentium3</model>");
    let avx2 = with_cpu(
        "avx2",
        "<model fallback='forbid'>pentium3</model><feature policy='require' name='avx2'/><feature policy='require' name='bmi2'/>",
    );
    let t = Scratch::with_snap("dest-compare");
    // The daemon's snapshot form: one <hostFacts> with both documents.
    let snap_facts = Scratch::with_snap("dest-compare-snap");
    let caps_text = std::fs::read_to_string(&caps).unwrap();
    std::fs::write(
        snap_facts.path("snap/host-facts.xml"),
        virt_cpu_policy::libvirt::host_facts::document(
            "this-host",
            "9.0.0".parse().unwrap(),
            None,
            &caps_text,
            &[dc_text.as_str()],
        ),
    )
    .unwrap();
    for v in ["deny", "warn"] {
        let p = t.write("p.toml", policy("enforce", v, "allow"));
        for (dir, extra) in [
            (&t, vec!["--caps".to_string(), s(&domcaps)]),
            (&snap_facts, vec![]),
        ] {
            let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
            for op in ["migrate", "restore"] {
                let run = |name: &str, xml: &str| {
                    let mut args = extra.clone();
                    args.extend([name, op, "begin", "-"]);
                    dir.hook(&p, &args).stdin(xml.to_string()).run()
                };
                allowed(&run("same", &identical));
                allowed(&run("small", &superset));
                refused(
                    &run("avx2", &avx2),
                    "avx2",
                    "libvirt: cpu-incompatible",
                    &[
                        "model pentium3",
                        "Host CPU does not provide required features: avx2, bmi2",
                        "libvirt's own CPU check would refuse the guest",
                    ],
                );
            }
            let log = dir.log();
            assert!(
                log.contains("CPU kvm64: this host's is identical")
                    && log.contains("CPU pentium3: this host's is superset"),
                "{log}"
            );
            log_has_no_xml(&log);
        }
    }
    // No domcapabilities (only capabilities): compared with the physical CPU (Broadwell, which
    // has avx2 and bmi2) less what KVM never gives a guest, as `compare` does; a feature it
    // lacks is libvirt's refusal.
    let t = Scratch::with_snap("dest-compare-none");
    let p = t.write("p.toml", policy("enforce", "deny", "allow"));
    let out = t
        .hook(&p, &["--caps", &s(&caps), "avx2", "migrate", "begin", "-"])
        .stdin(avx2.clone())
        .run();
    allowed(&out);
    let log = t.log();
    assert!(
        log.contains("CPU pentium3: this host's is superset (capabilities host CPU"),
        "{log}"
    );
    let mpx = with_cpu(
        "mpx",
        "<model fallback='forbid'>pentium3</model><feature policy='require' name='mpx'/>",
    );
    let out = t
        .hook(&p, &["--caps", &s(&caps), "mpx", "migrate", "begin", "-"])
        .stdin(mpx)
        .run();
    refused(
        &out,
        "mpx",
        "libvirt: cpu-incompatible",
        &[
            "Host CPU does not provide required features: mpx",
            "less the features KVM never gives a guest",
        ],
    );
    // A TCG guest is compared with TCG's host-model, which these facts do not give (nor does
    // this machine's QEMU capability cache, left out).
    // Without eim='on': a QEMU of unknown release (no capability cache here) refuses it under
    // TCG (`tcg-eim`), which is not this test's question.
    let tcg_avx2 = avx2
        .replace("<domain type='kvm'>", "<domain type='qemu'>")
        .replace(" eim='on'", "");
    let hook = |caps: &Path| {
        t.hook(
            &p,
            &[
                "--no-qemu-caps-cache",
                "--caps",
                &s(caps),
                "avx2",
                "migrate",
                "begin",
                "-",
            ],
        )
        .stdin(tcg_avx2.clone())
        .run()
    };
    allowed(&hook(&domcaps));
    assert!(
        t.log().contains("no domcapabilities for x86_64 qemu"),
        "{}",
        t.log()
    );
    // With the TCG's domcapabilities, libvirt 9.0's partial check of this CPU against what QEMU
    // 7.2's TCG emulates fails (its TCG has avx2 and bmi2, not pentium3's vme: "Host CPU does not
    // provide required features: vme", seen): the hook refuses it before the migration begins.
    // The CPU comparison answers (what TCG lacks is one reason, never two: `tcg-cpu-missing`
    // only when the CPUs could not be compared).
    refused(
        &hook(&host_file("domcapabilities-x86_64-q35-qemu.xml")),
        "avx2",
        "libvirt: cpu-incompatible",
        &["Host CPU does not provide required features: vme"],
    );
}

/// Without a host-model CPU to compare with, a model `usable='no'` here is refused.
#[test]
#[cfg_attr(
    not(vcp_shared_corpus),
    ignore = "needs ../shared/corpus beside the checkout"
)]
fn destination_refuses_a_model_unusable_here_when_no_compare_is_possible() {
    let domcaps = host_file("domcapabilities-x86_64-q35-kvm.xml");
    let t = Scratch::with_snap("dest-unusable");
    let text = std::fs::read_to_string(&domcaps).unwrap();
    let no_host_model = text.replace(
        "<mode name='host-model' supported='yes'>",
        "<mode name='host-model' supported='no'>",
    );
    assert_ne!(text, no_host_model, "the corpus file has a host-model CPU");
    let dc = t.write("dc.xml", no_host_model);
    let p = t.write("p.toml", policy("enforce", "warn", "allow"));
    for op in ["migrate", "restore"] {
        let out = t
            .hook(&p, &["--caps", &s(&dc), "neh", op, "begin", "-"])
            .stdin(incoming("neh", 4, "Nehalem"))
            .run();
        refused(
            &out,
            "neh",
            "libvirt: cpu-model-unusable",
            &["Nehalem", "usable"],
        );
    }
    log_has_no_xml(&t.log());
}

/// A guest that runs at the source and that this host can run, but that does not reach the
/// policy's level (every CloudStack guest defined before the policy was installed). The hook
/// cannot fix it (libvirt refuses any CPU change on migrate/restore: docs/hook.md), and
/// the shipped default says `on_violation = "warn"`: the migration must go through, logged.
#[test]
fn destination_warn_lets_a_nonconforming_but_runnable_guest_in() {
    let t = Scratch::with_snap("dest-warn");
    let p = t.write("p.toml", policy("enforce", "warn", "allow"));
    for op in ["migrate", "restore"] {
        let out = t
            .hook(&p, &["i-2-14-VM", op, "begin", "-"])
            .stdin(cloudstack("i-2-14-VM"))
            .run();
        allowed(&out);
    }
    let log = t.log();
    assert!(log.contains("i-2-14-VM"), "{log}");
    log_has_no_xml(&log);
}

/// The log lines that are decisions (a warning logged beside one has no `decision` field).
fn decisions(log: &str) -> Vec<&str> {
    log.lines().filter(|l| l.contains(" decision=\"")).collect()
}

/// A migrate or restore of a guest below the policy that this host can run is let in with
/// exactly one decision logged: `hook-violation-allowed` with the rule, not that one plus a
/// `hook-allowed`.
#[test]
fn destination_logs_exactly_one_decision() {
    let t = Scratch::with_snap("dest-one");
    let p = t.write("p.toml", policy("enforce", "warn", "allow"));
    for op in ["migrate", "restore"] {
        std::fs::remove_file(t.log_path()).ok();
        let out = t
            .hook(&p, &["i-2-14-VM", op, "begin", "-"])
            .stdin(cloudstack("i-2-14-VM"))
            .run();
        allowed(&out);
        let log = t.log();
        let d = decisions(&log);
        assert_eq!(d.len(), 1, "{op}: one decision wanted:\n{log}");
        for needle in [
            "message_id=\"ae90be5fa89e42ffbcc423cedbe8c7f4\"",
            &format!("operation=\"{op}\""),
            &format!("rule=\"{RULE}\""),
            "code=\"cpu-level\"",
            "this host can run the guest",
        ] {
            assert!(d[0].contains(needle), "{op}: no {needle}:\n{log}");
        }
        log_has_no_xml(&log);
    }
}

/// A warning the hook logs (here libvirt's: `match` means nothing under host-model) carries its
/// own `MESSAGE_ID` and the finding as its message, beside the one decision.
#[test]
fn hook_warnings_carry_a_message_id() {
    let t = Scratch::with_snap("warn-id");
    let p = t.write("p.toml", policy("enforce", "warn", "allow"));
    let xml = cloudstack("g1").replace(
        "<cpu><topology sockets='1' cores='2' threads='1' /></cpu>",
        "<cpu mode='host-model' match='exact'/>",
    );
    for op in ["prepare", "migrate"] {
        std::fs::remove_file(t.log_path()).ok();
        allowed(
            &t.hook(&p, &["g1", op, "begin", "-"])
                .stdin(xml.as_str())
                .run(),
        );
        let log = t.log();
        let warning: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("code=\"cpu-match-host-model\""))
            .collect();
        assert_eq!(warning.len(), 1, "{op}:\n{log}");
        assert!(
            warning[0].contains(" WARN <cpu match> has no meaning with mode='host-model'")
                && warning[0].contains("message_id=\"fc3e55da7ca34faa94b17bcbd67937ba\"")
                && warning[0].contains(&format!("operation=\"{op}\"")),
            "{op}:\n{log}"
        );
        assert_eq!(decisions(&log).len(), 1, "{op}:\n{log}");
    }
}

/// A guest that only libvirt's built-in cleanups would change (here `match` under host-model,
/// which libvirt accepts) starts even under `on_violation = "deny"`: refusing a start takes an
/// operator's rule. The decision is `hook-allowed`; each change is a `hook-warning` entry.
#[test]
fn prepare_deny_allows_a_guest_only_builtin_cleanups_would_change() {
    let t = Scratch::with_snap("builtin-only");
    let xml = cloudstack("g1").replace(
        "<cpu><topology sockets='1' cores='2' threads='1' /></cpu>",
        "<cpu mode='host-model' match='exact'/>",
    );
    for mode in ["enforce", "audit"] {
        std::fs::remove_file(t.log_path()).ok();
        let p = t.write("p.toml", policy(mode, "deny", "deny"));
        allowed(
            &t.hook(&p, &["g1", "prepare", "begin", "-"])
                .stdin(xml.as_str())
                .run(),
        );
        let log = t.log();
        let d = decisions(&log);
        assert_eq!(d.len(), 1, "{mode}: one decision:\n{log}");
        for needle in [
            "message_id=\"1bf6f9280b904f00aa082c3206e10849\"",
            "verdict=\"allow\"",
            "decision=\"allow (built-in changes only)\"",
            "rule=\"built-in: libvirt rules\"",
        ] {
            assert!(d[0].contains(needle), "{mode}: no {needle}:\n{log}");
        }
        let changes: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("code=\"builtin-change\""))
            .collect();
        assert_eq!(changes.len(), 1, "{mode}: one change logged:\n{log}");
        assert!(
            changes[0].contains(" WARN ")
                && changes[0].contains("match='exact'> removed")
                && changes[0].contains("message_id=\"fc3e55da7ca34faa94b17bcbd67937ba\"")
                && changes[0].contains("rule=\"built-in: libvirt rules\""),
            "{mode}:\n{log}"
        );
        assert!(!log.contains("TOPSECRET"), "{log}");
    }
    // The same guest missing an operator's rule too is refused, and the refusal names that rule.
    let p = t.write(
        "aes.toml",
        "version = 1\n[hook]\non_violation = \"deny\"\n[[rule]]\nname = \"need aes\"\ncpu.require = [\"aes\"]\n",
    );
    let out = t
        .hook(&p, &["g1", "prepare", "begin", "-"])
        .stdin(xml)
        .run();
    refused(&out, "g1", "need aes", &["aes"]);
}

/// A `--log-file` that cannot be opened (its directory missing, a directory, a path under a
/// regular file, a FIFO nobody reads) must not leave the decision recorded nowhere: one line on stderr says so, and
/// the decision goes to stderr (libvirt keeps a hook's stderr in its own log), before the refusal
/// line when there is one. The missing directory is not created.
#[test]
fn unopenable_log_file_is_said_and_the_decision_goes_to_stderr() {
    let t = Scratch::with_snap("log-unopenable");
    let p = t.write("p.toml", policy("enforce", "deny", "allow"));
    let plain = t.write("plain", "not a directory");
    // A FIFO without a reader: opening it to write would block the hook.
    let fifo = t.path("fifo.log");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    for log in [
        t.path("missing/h.log"),
        t.path("snap"),
        plain.join("h.log"),
        fifo.clone(),
    ] {
        let run = |xml: String| {
            Cmd::new(&["hook", "--policy"])
                .arg(s(&p))
                .arg("--log-file")
                .arg(s(&log))
                .arg("--snapshot-dir")
                .arg(s(&t.path("snap")))
                .args(&["i-2-14-VM", "prepare", "begin", "-"])
                .stdin(xml)
                .run()
        };
        let said = format!("virt-cpu-policy: cannot open the log file {}: ", s(&log));
        let out = run(conforming("i-2-14-VM"));
        out.status(0);
        assert_eq!(out.stdout, "");
        // The hook's warnings (here `not-compared`: no snapshot gives this host's CPU) go the
        // same way, before the decision.
        let lines: Vec<&str> = out
            .stderr
            .lines()
            .filter(|l| !l.contains(" WARN "))
            .collect();
        assert_eq!(lines.len(), 2, "{}", out.stderr);
        assert!(
            lines[0].starts_with(&said) && lines[0].ends_with("; logging to stderr"),
            "{}",
            out.stderr
        );
        assert!(
            lines[1].contains("message_id=\"1bf6f9280b904f00aa082c3206e10849\"")
                && lines[1].contains("guest=\"i-2-14-VM\""),
            "{}",
            out.stderr
        );
        let out = run(cloudstack("i-2-14-VM"));
        out.status(1);
        let lines: Vec<&str> = out.stderr.lines().collect();
        assert!(lines[0].starts_with(&said), "{}", out.stderr);
        assert!(
            lines
                .iter()
                .any(|l| l.contains("decision=\"refuse (on_violation = deny)\"")),
            "{}",
            out.stderr
        );
        let last = lines.last().copied().unwrap_or_default();
        assert!(
            last.starts_with("virt-cpu-policy: guest 'i-2-14-VM': ")
                && last.contains(&format!("(rule '{RULE}')")),
            "the refusal line comes last:\n{}",
            out.stderr
        );
        log_has_no_xml(&out.stderr);
    }
    assert!(
        !t.path("missing").exists(),
        "a named log's directory is not created"
    );
}

// ---------------------------------------------------------------------------------------------
// The tool's own failures: [hook] on_error
// ---------------------------------------------------------------------------------------------

#[test]
fn unparsable_or_empty_xml_follows_on_error() {
    let t = Scratch::with_snap("bad-xml");
    let inputs: [(&str, &[u8]); 4] = [
        (
            "truncated",
            b"<domain type='kvm'><name>g1</name><devices><graphics passwd='TOPSECRET",
        ),
        ("not xml", b"this is not XML at all"),
        ("empty", b""),
        ("invalid utf-8", b"<domain type='kvm'>\xff\xfe</domain>"),
    ];
    for (op, sub) in [
        ("prepare", "begin"),
        ("started", "begin"),
        ("migrate", "begin"),
        ("restore", "begin"),
    ] {
        for (what, xml) in inputs {
            let p = t.write("allow.toml", policy("enforce", "deny", "allow"));
            let out = t.hook(&p, &["g1", op, sub, "-"]).stdin(xml.to_vec()).run();
            assert_eq!(out.code, 0, "{op} {what} under allow: {}", out.stderr);
            allowed(&out);
            let p = t.write("deny.toml", policy("enforce", "warn", "deny"));
            let out = t.hook(&p, &["g1", op, sub, "-"]).stdin(xml.to_vec()).run();
            refused(&out, "g1", "[hook] on_error", &["cannot check", "XML"]);
        }
    }
    let log = t.log();
    assert!(
        log.contains("on_error = allow"),
        "allow decisions not logged:\n{log}"
    );
    assert!(
        log.contains("on_error = deny"),
        "deny decisions not logged:\n{log}"
    );
    log_has_no_xml(&log);
}

#[test]
fn no_stdin_at_all_follows_on_error() {
    let t = Scratch::with_snap("no-stdin");
    let p = t.write("allow.toml", policy("enforce", "deny", "allow"));
    allowed(&t.hook(&p, &["g1", "prepare", "begin", "-"]).run());
    let p = t.write("deny.toml", policy("enforce", "deny", "deny"));
    let out = t.hook(&p, &["g1", "prepare", "begin", "-"]).run();
    refused(&out, "g1", "[hook] on_error", &["empty"]);
}

fn broken_policy(on_error: &str) -> String {
    // Valid TOML, invalid policy: a misspelled key on line 9.
    format!(
        "version = 1\nmode = \"enforce\"\n\n[hook]\non_violation = \"warn\"\non_error = \"{on_error}\"\n\n[[rule]]\ncpu.min_levl = \"x86-64-v2\"\nname = \"x\"\n"
    )
}

#[test]
fn broken_policy_follows_on_error() {
    let t = Scratch::with_snap("bad-policy");
    let p = t.write("allow.toml", broken_policy("allow"));
    for (op, xml) in [
        ("prepare", cloudstack("g1")),
        ("started", live_nehalem("g1", &NEHALEM_DISABLED)),
        ("migrate", cloudstack("g1")),
        ("restore", cloudstack("g1")),
    ] {
        allowed(&t.hook(&p, &["g1", op, "begin", "-"]).stdin(xml).run());
    }
    let log = t.log();
    assert!(
        log.contains("min_levl"),
        "the policy error is not logged:\n{log}"
    );
    assert!(log.contains("on_error = allow"), "{log}");

    let p = t.write("deny.toml", broken_policy("deny"));
    for (op, xml) in [
        ("prepare", conforming("g1")),
        ("started", live_nehalem("g1", &[])),
        ("migrate", conforming("g1")),
        ("restore", conforming("g1")),
    ] {
        let out = t.hook(&p, &["g1", op, "begin", "-"]).stdin(xml).run();
        refused(
            &out,
            "g1",
            "[hook] on_error",
            &["line 9", "column", "min_levl", "deny.toml"],
        );
    }
    log_has_no_xml(&t.log());
}

/// A policy with several mistakes is one log line, the mistakes joined with "; " (the command
/// line prints one per line), and one line on stderr when it refuses.
#[test]
fn broken_policy_with_several_errors_is_one_log_line() {
    let t = Scratch::with_snap("bad-policy-many");
    for on_error in ["allow", "deny"] {
        let p = t.write(
            "p.toml",
            broken_policy(on_error).replace("name = \"x\"", "name = \"x\"\nvcpu.max = 0"),
        );
        std::fs::remove_file(t.log_path()).ok();
        let out = t
            .hook(&p, &["g1", "prepare", "begin", "-"])
            .stdin(conforming("g1"))
            .run();
        let joined = "min_levl`, expected one of `mode`, `model`, `fallback`, `check`, `min_level`, `require`, `disable`, `os_floor`; line 11, column 12: key `rule.vcpu.max`";
        if on_error == "deny" {
            refused(&out, "g1", "[hook] on_error", &["2 errors: line 9", joined]);
        } else {
            allowed(&out);
        }
        let log = t.log();
        assert_eq!(log.lines().count(), 1, "one line wanted:\n{log}");
        assert!(
            log.contains("2 errors: line 9, column 5: key `rule.cpu.min_levl`")
                && log.contains(joined),
            "{log}"
        );
    }
}

/// A policy whose one rule gives x86_64 guests the baseline of `cluster` (`[host] cluster`),
/// read with libvirt 9.0.0's cpu_map from `tests/data`.
fn baseline_policy(on_violation: &str, on_error: &str, cluster: &[String]) -> String {
    let list: Vec<String> = cluster.iter().map(|c| format!("{c:?}")).collect();
    format!(
        "version = 1\n\n[hook]\non_violation = \"{on_violation}\"\non_error = \"{on_error}\"\n\n[host]\ncpu_map = {:?}\ncluster = [{}]\n\n[[rule]]\nname = \"cluster cpu\"\nmatch = {{ arch = \"x86_64\" }}\ncpu.model = \"baseline\"\n",
        s(&golden_cpu_map()),
        list.join(", ")
    )
}

/// `cpu.model = "baseline"` in the hook: a guest rewritten for the cluster is let in, one that
/// is not follows `on_violation`; a cluster file that is missing follows `on_error` (allow: logged
/// and let in; deny: refused naming the file), at every checked operation.
#[test]
#[cfg_attr(
    not(vcp_shared_corpus),
    ignore = "needs ../shared/corpus beside the checkout"
)]
fn baseline_policy_in_the_hook_follows_on_violation_and_on_error() {
    let c = shared_corpus();
    let d = c.join("libvirt-cputestdata");
    let hosts = vec![
        s(&d.join("x86_64-cpuid-Xeon-E5-2650-v4-host.xml")),
        s(&d.join("x86_64-cpuid-Core-i7-3770-host.xml")),
    ];
    let t = Scratch::with_snap("hook-baseline");
    let p = t.write("ok.toml", baseline_policy("deny", "deny", &hosts));
    let rewritten = Cmd::new(&["rewrite", "--no-qemu-caps-cache", "--policy", &s(&p), "-"])
        .stdin(cloudstack("g1"))
        .run();
    rewritten.status(0);
    assert!(
        rewritten.stdout.contains(">IvyBridge</model>"),
        "{}",
        rewritten.stdout
    );
    allowed(
        &t.hook(&p, &["g1", "prepare", "begin", "-"])
            .stdin(rewritten.stdout.clone())
            .run(),
    );
    let out = t
        .hook(&p, &["g1", "prepare", "begin", "-"])
        .stdin(cloudstack("g1"))
        .run();
    refused(
        &out,
        "g1",
        "cluster cpu",
        &["does not conform", "needs <model>"],
    );

    let missing = s(&t.path("shared/node-3.xml"));
    let cluster = vec![hosts[0].clone(), missing.clone()];
    let p = t.write("deny.toml", baseline_policy("warn", "deny", &cluster));
    for op in ["prepare", "migrate", "restore"] {
        let out = t
            .hook(&p, &["g1", op, "begin", "-"])
            .stdin(rewritten.stdout.clone())
            .run();
        refused(
            &out,
            "g1",
            "[hook] on_error",
            &[
                "the hook cannot check this guest: cpu.model = \"baseline\"",
                &format!("cannot read {missing}"),
                "[host] cluster",
            ],
        );
    }
    let p = t.write("allow.toml", baseline_policy("deny", "allow", &cluster));
    for op in ["prepare", "migrate", "restore"] {
        allowed(
            &t.hook(&p, &["g1", op, "begin", "-"])
                .stdin(cloudstack("g1"))
                .run(),
        );
    }
    let log = t.log();
    assert!(
        log.contains("on_error = allow")
            && log.contains(&missing)
            && log.contains("code=\"cluster\""),
        "{log}"
    );
    log_has_no_xml(&log);
}

/// Two hosts' facts for a cluster whose CPU drops when the second joins: `tests/data/facts/
/// bookworm.xml` as it is (this machine: its KVM host-model CPU lacks `pni` and `popcnt`,
/// x86-64-v1) and the same facts as host `goodhost` whose host-model CPU is Skylake-Client-IBRS
/// with `pni` (x86-64-v3), as tests/monitoring/run makes them.
pub(crate) fn dropping_cluster(t: &Scratch) -> (String, String) {
    let facts =
        std::fs::read_to_string(crate::harness::root().join("tests/data/facts/bookworm.xml"))
            .expect("tests/data/facts/bookworm.xml");
    let good = facts
        .replacen("name='bookworm'", "name='goodhost'", 1)
        .replacen(
            "<model fallback='forbid'>kvm64</model>",
            "<model fallback='forbid'>Skylake-Client-IBRS</model>",
            1,
        )
        .replacen("<feature policy='disable' name='pni'/>", "", 1);
    assert_ne!(good, facts);
    (
        s(&t.write("goodhost.xml", good)),
        s(&crate::harness::root().join("tests/data/facts/bookworm.xml")),
    )
}

/// A drop of the cluster CPU (a host joins with a lower CPU) is said once: the first hook run
/// that computes the new CPU logs `cluster-cpu-changed` at WARN with the old and new CPU and the
/// host responsible, and remembers it in the snapshot directory; the next runs say nothing. The
/// first CPU ever seen is remembered without a message; a host leaving is a rise, said once.
#[test]
fn a_cluster_cpu_change_is_logged_once_by_the_hook() {
    use virt_cpu_policy::cluster::watch::CLUSTER_CPU_CHANGED_ID;
    let t = Scratch::with_snap("hook-cluster-change");
    let (good, bookworm) = dropping_cluster(&t);
    let changes = |t: &Scratch| t.log().matches(CLUSTER_CPU_CHANGED_ID).count();
    let run = |p: &Path| {
        let out = t
            .hook(p, &["g1", "prepare", "begin", "-"])
            .stdin(cloudstack("g1"))
            .run();
        assert!(out.stdout.is_empty(), "{}", out.stdout);
    };
    let one = t.write(
        "one.toml",
        baseline_policy("warn", "deny", std::slice::from_ref(&good)),
    );
    run(&one);
    let state = std::fs::read_to_string(t.path("snap/cluster-cpu")).expect("the state file");
    assert!(state.contains("level x86-64-v3\n"), "{state}");
    assert_eq!(
        changes(&t),
        0,
        "the first CPU seen is no change: {}",
        t.log()
    );
    run(&one);
    assert_eq!(changes(&t), 0, "{}", t.log());

    let two = t.write(
        "two.toml",
        baseline_policy("warn", "deny", &[good.clone(), bookworm.clone()]),
    );
    run(&two);
    let log = t.log();
    assert_eq!(changes(&t), 1, "{log}");
    let line = log
        .lines()
        .find(|l| l.contains(CLUSTER_CPU_CHANGED_ID))
        .unwrap();
    for needle in [
        " WARN ",
        "the cluster CPU dropped: ",
        "x86-64-v3",
        "-> ",
        "x86-64-v1",
        "hosts responsible: bookworm (missing popcnt, pni, sse4.1, sse4.2, ssse3, avx",
        "direction=\"drop\"",
        "old_level=\"x86-64-v3\"",
        "new_level=\"x86-64-v1\"",
    ] {
        assert!(line.contains(needle), "{needle:?} not in {line}");
    }
    run(&two);
    run(&two);
    assert_eq!(changes(&t), 1, "said once: {}", t.log());
    let state = std::fs::read_to_string(t.path("snap/cluster-cpu")).unwrap();
    assert!(
        state.contains("changes drop 1\n") && state.contains("host bookworm x86-64-v1\n"),
        "{state}"
    );

    run(&one);
    let log = t.log();
    assert_eq!(changes(&t), 2, "{log}");
    let rise = log
        .lines()
        .filter(|l| l.contains(CLUSTER_CPU_CHANGED_ID))
        .nth(1)
        .unwrap();
    assert!(
        rise.contains(" INFO ")
            && rise.contains("the cluster CPU rose")
            && rise.contains("bookworm (left)"),
        "{rise}"
    );
    log_has_no_xml(&log);
}

/// The cluster CPU in the metrics: `audit --format prometheus` with a `cpu.model = "baseline"`
/// policy writes `virt_cpu_policy_cluster_cpu_info` (model, fingerprint, level) and
/// `virt_cpu_policy_cluster_level`, and they follow the cluster: x86-64-v3 for the v3 host
/// alone, 1 once the v1 host joins, under another fingerprint.
#[test]
fn the_cluster_cpu_is_in_the_metrics() {
    let t = Scratch::new("metrics-cluster-cpu");
    let (good, bookworm) = dropping_cluster(&t);
    let guest = t.write("g.xml", cloudstack("g1"));
    // The `virt_cpu_policy_cluster*` lines of `audit --format prometheus` under `policy`.
    let audit = |policy: String| -> Vec<String> {
        let p = t.write("p.toml", policy);
        let out = Cmd::new(&["audit", "--format", "prometheus", "--no-qemu-caps-cache"])
            .arg("--policy")
            .arg(s(&p))
            .arg(s(&guest))
            .run();
        assert!(
            out.stdout.contains("virt_cpu_policy_guests{"),
            "{}{}",
            out.stdout,
            out.stderr
        );
        out.stdout
            .lines()
            .filter(|l| l.starts_with("virt_cpu_policy_cluster"))
            .map(str::to_string)
            .collect()
    };
    let fp = |lines: &[String]| -> String {
        let l = &lines[0];
        let i = l.find("fingerprint=\"").unwrap() + "fingerprint=\"".len();
        l[i..i + 8].to_string()
    };
    let v3 = audit(baseline_policy("warn", "deny", std::slice::from_ref(&good)));
    assert_eq!(v3.len(), 2, "{v3:?}");
    assert!(
        v3[0].starts_with("virt_cpu_policy_cluster_cpu_info{model=\""),
        "{v3:?}"
    );
    assert!(v3[0].ends_with(",level=\"x86-64-v3\"} 1"), "{v3:?}");
    assert_eq!(v3[1], "virt_cpu_policy_cluster_level 3");
    let v1 = audit(baseline_policy("warn", "deny", &[good, bookworm]));
    assert!(v1[0].ends_with(",level=\"x86-64-v1\"} 1"), "{v1:?}");
    assert_eq!(v1[1], "virt_cpu_policy_cluster_level 1");
    assert_ne!(fp(&v3), fp(&v1));
    // No baseline rule, no cluster series.
    assert_eq!(
        audit(policy("enforce", "warn", "deny")),
        Vec::<String>::new()
    );
}

#[test]
fn policy_that_is_not_toml_but_says_deny_refuses() {
    let t = Scratch::with_snap("not-toml");
    let p = t.write(
        "p.toml",
        "this is {{ not toml at all\n[hook]\non_error = \"deny\"\n",
    );
    let out = t
        .hook(&p, &["g1", "prepare", "begin", "-"])
        .stdin(conforming("g1"))
        .run();
    refused(&out, "g1", "[hook] on_error", &["line", "column"]);
    // Under a dotted key, too.
    let p = t.write("q.toml", "[[[ broken\nhook.on_error = \"deny\"\n");
    let out = t
        .hook(&p, &["g1", "prepare", "begin", "-"])
        .stdin(conforming("g1"))
        .run();
    refused(&out, "g1", "[hook] on_error", &["line", "column"]);
    // Not TOML and says allow: allowed.
    let p = t.write(
        "r.toml",
        "this is {{ not toml at all\n[hook]\non_error = \"allow\"\n",
    );
    allowed(
        &t.hook(&p, &["g1", "prepare", "begin", "-"])
            .stdin(conforming("g1"))
            .run(),
    );
}

/// The policy reference (docs/policy.md) writes `on_error = "allow"          # "allow" | "deny"`:
/// an operator who sets deny that way and later breaks the file must still get deny.
#[test]
fn policy_that_is_not_toml_says_deny_with_a_trailing_comment_refuses() {
    let t = Scratch::with_snap("not-toml-comment");
    let p = t.write(
        "p.toml",
        "this is {{ not toml at all\n[hook]\non_violation = \"deny\"\non_error = \"deny\"          # \"allow\" | \"deny\"\n",
    );
    let out = t
        .hook(&p, &["g1", "prepare", "begin", "-"])
        .stdin(conforming("g1"))
        .run();
    refused(&out, "g1", "[hook] on_error", &["line", "column"]);
}

/// TOML literal strings: `on_error = 'deny'` is the same setting as `on_error = "deny"`.
#[test]
fn policy_that_is_not_toml_says_deny_in_a_literal_string_refuses() {
    let t = Scratch::with_snap("not-toml-literal");
    let p = t.write(
        "p.toml",
        "this is {{ not toml at all\n[hook]\non_error = 'deny'\n",
    );
    let out = t
        .hook(&p, &["g1", "prepare", "begin", "-"])
        .stdin(conforming("g1"))
        .run();
    refused(&out, "g1", "[hook] on_error", &["line", "column"]);
}

#[test]
fn missing_policy_file_allows_and_logs() {
    let t = Scratch::with_snap("missing-policy");
    let p = t.path("no-such-policy.toml");
    for (op, xml) in [
        ("prepare", cloudstack("g1")),
        ("started", live_nehalem("g1", &NEHALEM_DISABLED)),
        ("migrate", cloudstack("g1")),
        ("restore", cloudstack("g1")),
    ] {
        allowed(&t.hook(&p, &["g1", op, "begin", "-"]).stdin(xml).run());
    }
    let log = t.log();
    assert!(
        log.contains("no-such-policy.toml"),
        "the missing file is not logged:\n{log}"
    );
    log_has_no_xml(&log);
}

// ---------------------------------------------------------------------------------------------
// Logging and output discipline
// ---------------------------------------------------------------------------------------------

#[test]
fn the_log_never_contains_domain_xml() {
    let t = Scratch::with_snap("no-xml-in-log");
    for v in ["deny", "warn"] {
        let p = t.write("p.toml", policy("enforce", v, "allow"));
        for (op, xml) in [
            ("prepare", cloudstack("g1")),
            ("prepare", conforming("g1")),
            ("started", live_nehalem("g1", &NEHALEM_DISABLED)),
            ("started", live_nehalem("g1", &[])),
            ("migrate", cloudstack("g1")),
            ("migrate", incoming("g1", 300, "Skylake-Client")),
            ("restore", incoming("g1", 8, "Skylake-Client")),
        ] {
            let out = t.hook(&p, &["g1", op, "begin", "-"]).stdin(xml).run();
            assert_eq!(out.stdout, "", "{op}: stdout not empty");
            assert!(
                out.code == 0 || out.code == 1,
                "{op}: exit {}: {}",
                out.code,
                out.stderr
            );
            assert!(!out.stderr.contains("TOPSECRET"), "{op}: {}", out.stderr);
        }
    }
    let log = t.log();
    assert!(!log.is_empty(), "nothing was logged");
    assert!(log.contains("g1"));
    log_has_no_xml(&log);
}

#[test]
fn refusal_stderr_is_one_line_even_with_odd_guest_names() {
    let t = Scratch::with_snap("one-line");
    let p = t.write("p.toml", policy("enforce", "deny", "deny"));
    for name in ["i-2-14-VM", "guest with spaces", "é-ünïcode", "x"] {
        let out = t
            .hook(&p, &[name, "prepare", "begin", "-"])
            .stdin(cloudstack(name))
            .run();
        refused(&out, name, RULE, &[]);
        let out = t
            .hook(&p, &[name, "started", "begin", "-"])
            .stdin(live_nehalem(name, &NEHALEM_DISABLED))
            .run();
        refused(&out, name, RULE, &[]);
    }
}

#[test]
fn refusal_is_one_line_when_the_guest_argument_has_a_newline() {
    let t = Scratch::with_snap("newline-name");
    let p = t.write("p.toml", policy("enforce", "deny", "deny"));
    let out = t
        .hook(&p, &["evil\nname", "prepare", "begin", "-"])
        .stdin(cloudstack("evil"))
        .run();
    out.status(1);
    assert_eq!(out.stdout, "");
    assert_eq!(
        out.stderr.matches('\n').count(),
        1,
        "not one line: {:?}",
        out.stderr
    );
    assert!(
        out.stderr.starts_with("virt-cpu-policy: guest '"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("(rule '") && out.stderr.contains("; fix: "),
        "{}",
        out.stderr
    );
}

// ---------------------------------------------------------------------------------------------
// Concurrency: the policy replaced while hooks run
// ---------------------------------------------------------------------------------------------

#[test]
fn parallel_hooks_while_the_policy_is_replaced_atomically() {
    let t = Scratch::with_snap("parallel");
    let deny = policy("enforce", "deny", "deny");
    let warn = policy("enforce", "warn", "deny");
    let p = t.write("policy.toml", &deny);
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicUsize::new(0));
    let swapper = {
        let stop = Arc::clone(&stop);
        let swaps = Arc::clone(&swaps);
        let dir = t.0.clone();
        let p = p.clone();
        std::thread::spawn(move || {
            let mut i = 0usize;
            while !stop.load(Ordering::SeqCst) {
                let text = if i % 2 == 0 { &warn } else { &deny };
                let tmp = dir.join(format!("policy.toml.tmp{i}"));
                std::fs::write(&tmp, text).unwrap();
                std::fs::rename(&tmp, &p).unwrap();
                swaps.fetch_add(1, Ordering::SeqCst);
                i += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let results = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let workers: Vec<_> = (0..50)
        .map(|i| {
            let results = Arc::clone(&results);
            let p = p.clone();
            let log = t.path(&format!("hook-{i}.log"));
            let snap = t.path("snap");
            std::thread::spawn(move || {
                let name = format!("g{i}");
                let out = Cmd::new(&["hook", "--policy"])
                    .arg(s(&p))
                    .arg("--log-file")
                    .arg(s(&log))
                    .arg("--snapshot-dir")
                    .arg(s(&snap))
                    .args(&[&name, "prepare", "begin", "-"])
                    .stdin(cloudstack(&name))
                    .run();
                let logged = std::fs::read_to_string(&log).unwrap_or_default();
                results.lock().unwrap().push((name, out, logged));
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let elapsed = start.elapsed();
    stop.store(true, Ordering::SeqCst);
    swapper.join().unwrap();
    let results = results.lock().unwrap();
    assert_eq!(results.len(), 50);
    let (mut n_allow, mut n_refuse) = (0, 0);
    for (name, out, logged) in results.iter() {
        assert_eq!(out.stdout, "", "{name}: stdout not empty");
        match out.code {
            0 => {
                // The warn policy: allowed, logged as such.
                assert_eq!(out.stderr, "", "{name}");
                assert!(
                    logged.contains("allow (on_violation = warn)"),
                    "{name}: exit 0 but the log does not show the warn policy:\n{logged}"
                );
                n_allow += 1;
            }
            1 => {
                // The deny policy: the violation, not a tool failure.
                let mut needles = vec!["x86-64-v2"];
                needles.extend(QEMU64_MISSING);
                refused(out, name, RULE, &needles);
                assert!(
                    logged.contains("refuse (on_violation = deny)"),
                    "{name}: exit 1 but the log does not show the deny policy:\n{logged}"
                );
                n_refuse += 1;
            }
            c => panic!("{name}: exit {c}\nstderr: {}", out.stderr),
        }
        log_has_no_xml(logged);
    }
    eprintln!(
        "parallel: {n_allow} allowed (warn), {n_refuse} refused (deny), {} policy swaps, {elapsed:?}",
        swaps.load(Ordering::SeqCst)
    );
    // 50 hooks counted their decisions in one file at once: none lost, each under its kind.
    assert_eq!(
        counts(&t),
        format!(
            "hook-allowed 0\nhook-violation-allowed {n_allow}\nhook-violation-refused {n_refuse}\nhook-libvirt-refused 0\nhook-error-allowed 0\nhook-error-refused 0\n"
        )
    );
    assert!(
        elapsed < Duration::from_secs(60),
        "50 hooks took {elapsed:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Counting the decisions (snap/hook-decisions, for the daemon's metrics)
// ---------------------------------------------------------------------------------------------

/// The counts file's lines that are not comments (`KIND N`), or "" when there is none.
fn counts(t: &Scratch) -> String {
    std::fs::read_to_string(t.path("snap/hook-decisions"))
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// One run of each of the six kinds, as libvirt runs the binary: each counted once, in its own
/// line; an operation the hook passes and a guest outside the policy's scope are not counted.
#[test]
fn every_kind_of_decision_is_counted_once() {
    let t = Scratch::with_snap("count-kinds");
    let deny = t.write("deny.toml", policy("enforce", "deny", "deny"));
    let warn = t.write("warn.toml", policy("enforce", "warn", "allow"));
    let hook = |p: &Path, name: &str, xml: String| {
        t.hook(p, &[name, "prepare", "begin", "-"]).stdin(xml).run()
    };
    allowed(&hook(&deny, "g-ok", conforming("g-ok")));
    allowed(&hook(&warn, "g-warn", cloudstack("g-warn")));
    refused(
        &hook(&deny, "g-deny", cloudstack("g-deny")),
        "g-deny",
        RULE,
        &[],
    );
    let topo = conforming("g-topo").replace("<vcpu>2</vcpu>", "<vcpu>3</vcpu>");
    refused(
        &hook(&warn, "g-topo", topo),
        "g-topo",
        "libvirt: topology-mismatch",
        &[],
    );
    allowed(&hook(&warn, "g-bad", "<domain".into()));
    refused(
        &hook(&deny, "g-bad", "<domain".into()),
        "g-bad",
        "[hook] on_error",
        &[],
    );
    assert_eq!(
        counts(&t),
        "hook-allowed 1\nhook-violation-allowed 1\nhook-violation-refused 1\nhook-libvirt-refused 1\nhook-error-allowed 1\nhook-error-refused 1\n"
    );
    // Not judged, not logged, not counted: an operation the hook passes, a xen guest.
    allowed(
        &t.hook(&deny, &["g-ok", "stopped", "end", "-"])
            .stdin(cloudstack("g-ok"))
            .run(),
    );
    let xen = cloudstack("g-xen").replace("<domain type='kvm'>", "<domain type='xen'>");
    allowed(&hook(&deny, "g-xen", xen));
    allowed(&hook(&deny, "g-ok", conforming("g-ok")));
    assert!(
        counts(&t).starts_with("hook-allowed 2\nhook-violation-allowed 1\n"),
        "{}",
        counts(&t)
    );
    assert!(
        !t.log().contains("decision count") && !t.log().contains("cannot count"),
        "no warning about counting:\n{}",
        t.log()
    );
}

/// Counting never changes the answer: with a counts file that is not counts (replaced, a warning
/// in the log) and with a state directory that cannot be made (nothing counted, a warning), the
/// exit code and the one line on stderr are those of a run that counted.
#[test]
fn counting_problems_are_warnings_and_the_decision_stands() {
    let t = Scratch::with_snap("count-broken");
    let deny = t.write("deny.toml", policy("enforce", "deny", "deny"));
    let run = |snap: &Path| {
        Cmd::new(&["hook", "--policy"])
            .arg(s(&deny))
            .arg("--log-file")
            .arg(s(&t.log_path()))
            .arg("--snapshot-dir")
            .arg(s(snap))
            .args(&["g1", "prepare", "begin", "-"])
            .stdin(cloudstack("g1"))
            .run()
    };
    let good = run(&t.path("snap"));
    let line = refused(&good, "g1", RULE, &[]);
    assert_eq!(counts(&t).lines().nth(2), Some("hook-violation-refused 1"));
    // A corrupt file: replaced by counts starting from this decision.
    t.write(
        "snap/hook-decisions",
        "hook-violation-refused 41\nhook-allowed lots\n",
    );
    let out = run(&t.path("snap"));
    assert_eq!((out.code, out.stderr.as_str()), (1, good.stderr.as_str()));
    assert_eq!(
        counts(&t),
        "hook-allowed 0\nhook-violation-allowed 0\nhook-violation-refused 1\nhook-libvirt-refused 0\nhook-error-allowed 0\nhook-error-refused 0\n"
    );
    let log = t.log();
    assert!(
        log.contains("the hook's decision counts were replaced")
            && log.contains("line 2: `lots` is not a count"),
        "{log}"
    );
    // A state directory that cannot be made (its parent is a file): nothing counted.
    t.write("notadir", "x");
    let out = run(&t.path("notadir/snap"));
    assert_eq!((out.code, out.stderr.trim_end()), (1, line.as_str()));
    assert!(
        t.log()
            .contains("cannot count the hook's decision; the decision stands")
    );
    // A counts file that is a directory (the rename cannot replace it): the same.
    let d = Scratch::with_snap("count-dir");
    std::fs::create_dir_all(d.path("snap/hook-decisions/x")).unwrap();
    let out = run(&d.path("snap"));
    assert_eq!((out.code, out.stderr.trim_end()), (1, line.as_str()));
}

// ---------------------------------------------------------------------------------------------
// The packaged hook script when the binary cannot run
// ---------------------------------------------------------------------------------------------

/// The packaged `hooks/qemu.d/50-virt-cpu-policy`, with its binary a path that does not exist, the
/// policy `policy`, its log file in `t` and no journal, run as libvirt runs it at `prepare begin`.
fn script_without_binary(t: &Scratch, policy: &Path) -> Output {
    script_run(
        t,
        &t.path("missing/virt-cpu-policy"),
        policy,
        ["prepare", "begin"],
    )
}

/// The packaged hook script with its binary `bin`, the policy `policy`, its log file in `t` and no
/// journal, run as libvirt runs it at operation `op` (OPERATION SUB-OPERATION), a domain on stdin.
fn script_run(t: &Scratch, bin: &Path, policy: &Path, op: [&str; 2]) -> Output {
    let text =
        std::fs::read_to_string(crate::harness::root().join("hooks/qemu.d/50-virt-cpu-policy"))
            .expect("read the hook script");
    let set = |text: String, var: &str, value: &str| -> String {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("{var}=")))
            .unwrap_or_else(|| panic!("the hook script sets {var}"))
            .to_string();
        text.replacen(&line, &format!("{var}={value}"), 1)
    };
    let text = set(text, "BIN", &s(bin));
    let text = set(text, "POLICY", &s(policy));
    let text = set(text, "LOG_FILE", &s(&t.log_path()));
    let text = set(text, "JOURNAL", &s(&t.path("no-journal")));
    let text = set(text, "STATE_DIR", &s(&t.path("state")));
    let script = t.write("50-virt-cpu-policy", text);
    let out = Command::new("sh")
        .arg(&script)
        .args(["guest-1", op[0], op[1], "-"])
        .stdin(Stdio::null())
        .output()
        .expect("run sh");
    Output::from(out)
}

/// The script starts the binary for exactly the operations the binary checks
/// (`hook::Phase::of`), and answers every other one of libvirt's (docs/hooks.html, "QEMU
/// guest") without it: exit 0, nothing on stdout. Its binary here records each call.
#[test]
fn hook_script_starts_the_binary_only_where_it_checks() {
    // libvirt's qemu hook operations and their sub-operations.
    let ops = [
        ["prepare", "begin"],
        ["start", "begin"],
        ["started", "begin"],
        ["stopped", "end"],
        ["release", "end"],
        ["migrate", "begin"],
        ["restore", "begin"],
        ["reconnect", "begin"],
        ["attach", "begin"],
    ];
    let t = Scratch::new("script-ops");
    let calls = t.path("calls");
    let bin = t.write(
        "record",
        format!("#!/bin/sh\necho \"$*\" >>'{}'\ncat >/dev/null\n", s(&calls)),
    );
    std::fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod the recorder");
    let policy = t.write("policy.toml", "version = 1\n");
    for op in ops {
        let _ = std::fs::remove_file(&calls);
        let out = script_run(&t, &bin, &policy, op);
        assert_eq!(out.code, 0, "{op:?}: {}", out.stderr);
        assert!(out.stdout.is_empty(), "{op:?}: stdout {}", out.stdout);
        let called = std::fs::read_to_string(&calls).unwrap_or_default();
        let checks = virt_cpu_policy::hook::Phase::of(op[0], op[1]).is_some();
        let want = if checks {
            format!("hook guest-1 {} {} -\n", op[0], op[1])
        } else {
            String::new()
        };
        assert_eq!(called, want, "{op:?}: the binary's calls");
    }
}

/// The script reads `[hook] on_error` itself when the binary cannot run, in every TOML spelling
/// the binary accepts: a `[hook]` table (quoted or spaced), a dotted key, and an inline table,
/// which it once missed (a policy saying `hook = { on_error = "deny" }` let every guest through).
#[test]
fn hook_script_reads_on_error_in_every_toml_spelling() {
    let cases: &[(&str, i32)] = &[
        ("[hook]\non_error = \"deny\"\n", 1),
        ("[ hook ]\non_error='deny' # refuse\n", 1),
        ("[\"hook\"]\n\"on_error\" = \"deny\"\n", 1),
        ("hook.on_error = \"deny\"\n", 1),
        ("hook = { on_error = \"deny\" }\n", 1),
        (
            "hook = { on_violation = \"warn\", on_error = \"deny\" }\n",
            1,
        ),
        ("hook = { on_violation = \"deny\" }\n", 0),
        (
            "hook = { on_violation = \"deny\", on_error = \"allow\" }\n",
            0,
        ),
        ("mode = \"audit\"\nhook = { on_error = \"deny\" }\n", 0),
        (
            "[hook]\non_violation = \"deny\"\n[[rule]]\nname = \"on_error\"\n",
            0,
        ),
        ("", 0),
    ];
    for (i, (body, want)) in cases.iter().enumerate() {
        let t = Scratch::new(&format!("script-{i}"));
        let policy = t.write("policy.toml", format!("version = 1\n{body}"));
        // The binary, given the same policy, agrees on what on_error says.
        let bin_out = Scratch::with_snap(&format!("script-bin-{i}"))
            .hook(&policy, &["guest-1", "prepare", "begin", "-"])
            .stdin("<domain")
            .run();
        assert_eq!(
            bin_out.code, *want,
            "the binary on {body:?}: {}",
            bin_out.stderr
        );
        let out = script_without_binary(&t, &policy);
        assert_eq!(out.code, *want, "the script on {body:?}: {}", out.stderr);
        assert!(out.stdout.is_empty(), "stdout: {}", out.stdout);
        assert!(
            out.stderr.contains("the hook cannot check this guest")
                && out.stderr.contains("it is missing"),
            "{body:?}: {}",
            out.stderr
        );
        let (want_decision, kind) = if *want == 1 {
            ("refuse (on_error = deny)", Decision::HookErrorRefused)
        } else {
            ("allow (on_error = allow)", Decision::HookErrorAllowed)
        };
        assert!(t.log().contains(want_decision), "{body:?}: {}", t.log());
        // Counted where and as the binary counts: its reader reads the script's file.
        let counts = hook_decisions::read(&t.path("state")).expect("counts the binary reads");
        assert_eq!(
            counts.iter().filter(|(_, n)| *n > 0).collect::<Vec<_>>(),
            [(kind, 1)],
            "{body:?}"
        );
    }
}

/// The script counts its decision as the binary does when the binary cannot run: added to the
/// counts the binary wrote (up to 2^53, what awk's numbers hold exactly), a file that is not
/// counts replaced, and a state directory that cannot be made leaves the answer as it was.
#[test]
fn hook_script_counts_like_the_binary() {
    let t = Scratch::new("script-count");
    let policy = t.write("policy.toml", "version = 1\n[hook]\non_error = \"deny\"\n");
    let mut counts = hook_decisions::Counts::default();
    counts.add(Decision::HookAllowed);
    std::fs::create_dir_all(t.path("state")).unwrap();
    t.write(
        "state/hook-decisions",
        counts.render().replace(
            "hook-error-refused 0\n",
            "hook-error-refused 9007199254740990\n",
        ),
    );
    let out = script_without_binary(&t, &policy);
    assert_eq!(out.code, 1, "{}", out.stderr);
    let read = hook_decisions::read(&t.path("state")).expect("counts");
    assert_eq!(read.get(Decision::HookAllowed), 1);
    assert_eq!(read.get(Decision::HookErrorRefused), 9_007_199_254_740_991);
    // Not counts (a count too large for awk is not one either): replaced, from this decision.
    for junk in ["hook-allowed lots\n", "hook-allowed 12345678901234567\n"] {
        t.write("state/hook-decisions", junk);
        script_without_binary(&t, &policy).status(1);
        let read = hook_decisions::read(&t.path("state")).expect("counts");
        assert_eq!(
            read.iter().filter(|(_, n)| *n > 0).collect::<Vec<_>>(),
            [(Decision::HookErrorRefused, 1)],
            "{junk:?}"
        );
    }
    // A state directory that cannot be made: the same refusal, nothing else on stderr.
    let first = script_without_binary(&t, &policy).stderr;
    std::fs::remove_dir_all(t.path("state")).unwrap();
    t.write("state", "a file");
    let out = script_without_binary(&t, &policy);
    assert_eq!((out.code, out.stderr.as_str()), (1, first.as_str()));
    let names: Vec<String> = std::fs::read_dir(&t.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".hook-decisions"))
        .collect();
    assert!(names.is_empty(), "{names:?}");
}

/// A counts file a newer version wrote, with kinds this one does not know: the script keeps them
/// as the binary does (`hook_decisions::count`), byte for byte, and both start again from the
/// decision on a file that is not counts.
#[test]
fn hook_script_carries_a_newer_versions_kinds_like_the_binary() {
    let t = Scratch::new("script-newer");
    let policy = t.write("policy.toml", "version = 1\n[hook]\non_error = \"deny\"\n");
    let binary = Scratch::new("script-newer-bin");
    let newer = "# newer\nhook-allowed 4\nhook-zeta-refused 7\nhook-error-refused 2\nhook-alpha 18446744073709551615\n";
    let cases = [
        // Kept, in the file's order, after the known kinds.
        (newer, true),
        // Leading zeros dropped, as the binary reads the count.
        ("hook-new 0007\nhook-allowed 00\n", true),
        ("hook-new 000018446744073709551615\n", true),
        // Not counts: a count beyond u64, a name not of a kind's shape, a kind counted twice.
        ("hook-new 18446744073709551616\n", false),
        ("Hook-New 1\n", false),
        ("hook-new 1\nhook-allowed 1\nhook-new 1\n", false),
    ];
    for (i, (text, kept)) in cases.into_iter().enumerate() {
        std::fs::create_dir_all(t.path("state")).unwrap();
        t.write("state/hook-decisions", text);
        script_without_binary(&t, &policy).status(1);
        let by_script = std::fs::read_to_string(t.path("state/hook-decisions")).unwrap();
        let dir = binary.path(&format!("state-{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("hook-decisions"), text).unwrap();
        let (counts, replaced) = hook_decisions::count(&dir, Decision::HookErrorRefused).unwrap();
        assert_eq!(replaced.is_none(), kept, "{text:?}: {replaced:?}");
        let by_binary = std::fs::read_to_string(dir.join("hook-decisions")).unwrap();
        assert_eq!(by_script, by_binary, "{text:?}");
        assert_eq!(hook_decisions::read(&t.path("state")).unwrap(), counts);
    }
    let read = {
        t.write("state/hook-decisions", newer);
        script_without_binary(&t, &policy).status(1);
        hook_decisions::read(&t.path("state")).unwrap()
    };
    assert_eq!(
        read.unknown(),
        [
            ("hook-zeta-refused".to_string(), 7),
            ("hook-alpha".to_string(), u64::MAX)
        ]
    );
    assert_eq!(
        (
            read.get(Decision::HookAllowed),
            read.get(Decision::HookErrorRefused)
        ),
        (4, 3)
    );
}

/// The VDSM hook (`hooks/vdsm/before_vm_start/50_virt_cpu_policy`) maps a domain that cannot
/// conform to `on_violation` and a binary that cannot run to `on_error` (`deny` → 2, VDSM stops
/// the start; else 1), reading `[hook]` in every TOML spelling the binary accepts: it once missed
/// an inline table and quoted keys, so `hook = { on_violation = "deny" }` let the start go on.
#[test]
fn vdsm_hook_reads_hook_settings_in_every_toml_spelling() {
    let script = crate::harness::root().join("hooks/vdsm/before_vm_start/50_virt_cpu_policy");
    let domain =
        std::fs::read_to_string(crate::harness::root().join("examples/cloudstack-default-cpu.xml"))
            .expect("the example");
    // (the [hook] settings, VDSM's exit for a violation, for a binary that cannot run)
    let cases: &[(&str, i32, i32)] = &[
        (
            "[hook]\non_violation = \"deny\"\non_error = \"deny\"\n",
            2,
            2,
        ),
        ("[ \"hook\" ]\n\"on_violation\" = \"deny\"\n", 2, 1),
        (
            "hook.on_violation = \"deny\"\nhook . \"on_error\" = \"deny\"\n",
            2,
            2,
        ),
        (
            "hook = { on_violation = \"deny\", on_error = \"deny\" }\n",
            2,
            2,
        ),
        ("hook = { on_error = \"deny\" }\n", 1, 2),
        ("hook = { on_violation = \"deny\" }\n", 2, 1),
        (
            "hook = { on_violation = \"warn\", on_error = \"allow\" }\n",
            1,
            1,
        ),
        ("", 1, 1),
    ];
    for (i, (settings, violation, error)) in cases.iter().enumerate() {
        let t = Scratch::new(&format!("vdsm-{i}"));
        // A rule no domain can meet: a feature libvirt 9.0's cpu_map does not know
        // (cpu-feature-unknown, exit 1).
        let policy = t.write(
            "policy.toml",
            format!(
                "version = 1\n{settings}[host]\ncpu_map = {:?}\n[[rule]]\nname = \"never\"\ncpu.require = [\"no-such-feature\"]\n",
                s(&golden_cpu_map())
            ),
        );
        for (binary, want) in [
            (bin().to_string(), *violation),
            (s(&t.path("missing/virt-cpu-policy")), *error),
        ] {
            let domxml = t.write("domain.xml", &domain);
            let out = Command::new(&script)
                .env("_hook_domxml", &domxml)
                .env("VIRT_CPU_POLICY_BIN", &binary)
                .env("VIRT_CPU_POLICY_POLICY", &policy)
                .stdin(Stdio::null())
                .output()
                .expect("run the VDSM hook");
            let out = Output::from(out);
            assert_eq!(out.code, want, "{settings:?} with {binary}: {}", out.stderr);
            assert_eq!(
                std::fs::read_to_string(&domxml).unwrap(),
                domain,
                "{settings:?}: the XML is left as it was"
            );
        }
    }
}

/// A guest whose OS needs x86-64-v3 (CloudStack's `Rocky Linux 10 (64-bit)` in `<description>`)
/// started with a v2 CPU, under a policy that asks only x86-64-v2 and says nothing of the floor:
/// `started begin` refuses it with `os-floor` (its kernel stops at boot), naming what it lacks;
/// a rule's `cpu.os_floor = false` waives it.
#[test]
fn started_deny_refuses_a_cpu_below_the_floor_of_the_guests_os() {
    let t = Scratch::with_snap("started-floor");
    let p = t.write("p.toml", policy("enforce", "deny", "allow"));
    let live =
        live_nehalem("rocky", &[]).replace("DESCRIPTION-MARKER-7f1c", "Rocky Linux 10 (64-bit)");
    let out = t
        .hook(&p, &["rocky", "started", "begin", "-"])
        .stdin(live.clone())
        .run();
    refused(
        &out,
        "rocky",
        "the floor of Rocky Linux 10 (64-bit)",
        &["x86-64-v3", "avx2", "below the floor"],
    );
    let waived = format!(
        "{}\n[[rule]]\nname = \"our v2 builds\"\nmatch = {{ os = \"Rocky Linux 10*\" }}\ncpu.os_floor = false\n",
        policy("enforce", "deny", "allow")
    );
    let p = t.write("waived.toml", &waived);
    let out = t
        .hook(&p, &["rocky", "started", "begin", "-"])
        .stdin(live)
        .run();
    allowed(&out);
}

// ---------------------------------------------------------------------------------------------
// the stack's known hazards (src/hazards.toml) at migrate, restore and check
// ---------------------------------------------------------------------------------------------

/// A KVM guest of two threads arriving by live migration at libvirt 11.3 / QEMU 10.0 (trixie's
/// releases; the rig's migration from bookworm fails there, "extra features: ht"): the hook is
/// not told the source host's releases, so it lets the guest in with the hazard as a warning
/// naming the release it depends on; at 12.8 / 11.1 nothing is said. At `restore` on libvirt
/// 12.4 with QEMU 7.1 (no guest starts there: libvirt 12.4 NEWS) it refuses in the entry's
/// words, and `check` of a start there says so too.
#[test]
#[cfg_attr(
    not(vcp_shared_corpus),
    ignore = "needs ../shared/corpus beside the checkout"
)]
fn known_hazards_of_the_stack_at_migrate_restore_and_check() {
    let caps = host_file("capabilities.xml");
    let t = Scratch::with_snap("hazards");
    let p = t.write("p.toml", policy("enforce", "warn", "allow"));
    let threads = incoming("ht", 2, "Broadwell").replace(
        "<topology sockets='2' dies='1' cores='1' threads='1'/>",
        "<topology sockets='1' dies='1' cores='1' threads='2'/>",
    );
    assert!(threads.contains("threads='2'"));
    let versions = |l: &str, q: &str| {
        vec![
            "--caps".to_string(),
            s(&caps),
            "--libvirt-version".into(),
            l.into(),
            "--qemu-version".into(),
            q.into(),
        ]
    };
    let run = |vs: &[String], op: &str| {
        let mut args: Vec<&str> = vs.iter().map(String::as_str).collect();
        args.extend(["ht", op, "begin", "-"]);
        t.hook(&p, &args).stdin(threads.clone()).run()
    };
    allowed(&run(&versions("11.3.0", "10.0.0"), "migrate"));
    let log = t.log();
    assert!(
        log.contains("stack-hazard")
            && log.contains("ht-extra-after-qemu-10")
            && log.contains("the QEMU release of the guest's source host"),
        "{log}"
    );
    allowed(&run(&versions("12.8.0", "11.1.0"), "migrate"));
    let after = t.log();
    assert_eq!(
        after.matches("ht-extra-after-qemu-10").count(),
        log.matches("ht-extra-after-qemu-10").count(),
        "{after}"
    );
    let out = run(&versions("12.4.0", "7.1.0"), "restore");
    refused(
        &out,
        "ht",
        "libvirt: stack-hazard",
        &["libvirt-12.4-qemu-7.2", "upgrade QEMU to 7.2"],
    );
    allowed(&run(&versions("12.4.0", "7.2.0"), "restore"));
    log_has_no_xml(&t.log());

    let guest = t.write("ht.xml", &threads);
    let check = |l: &str, q: &str| {
        Cmd::new(&["check", "--format", "json"])
            .args(&versions(l, q))
            .arg(s(&guest))
            .run()
    };
    let codes = |out: &Output| -> Vec<String> {
        let v: serde_json::Value = serde_json::from_str(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}\n{}", out.stdout, out.stderr));
        v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["code"] == "stack-hazard")
            .map(|f| format!("{} {}", f["severity"].as_str().unwrap(), f["message"]))
            .collect()
    };
    let hazards = codes(&check("12.4.0", "7.1.0"));
    assert_eq!(hazards.len(), 1, "{hazards:?}");
    assert!(
        hazards[0].starts_with("error ") && hazards[0].contains("libvirt-12.4-qemu-7.2"),
        "{hazards:?}"
    );
    assert_eq!(codes(&check("12.4.0", "7.2.0")), Vec::<String>::new());
    // A start is never a live migration: the ht entry is not the check's question.
    assert_eq!(codes(&check("11.3.0", "10.0.0")), Vec::<String>::new());
}
