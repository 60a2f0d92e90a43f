//! What differs between libvirt generations, asked of the libvirts themselves: the host's
//! (Debian 12, libvirt 9.0, QEMU 7.2) and the Debian 13 root's (libvirt 11.3, QEMU 10.0,
//! `tests/libvirt/root`). See `tests/libvirt/ROOT-NOTES.md` and the version rules in
//! `src/facts.rs`.
//!
//! * The built-in machine-type table against QEMU's own `query-machines` (QMP) of each QEMU: the
//!   1024/4096 rows come from a real QEMU 10.0 here, not from field reports.
//! * `<topology clusters>`: ignored by libvirt 9.0; read by 11.3, where QEMU 10.0 refuses more
//!   than one cluster on x86 when the guest starts (what the differential test's allow-list
//!   entry `topology-clusters` stands on).
//! * More than 255 x86 vCPUs under TCG: refused at start without x2APIC in the guest CPU (QEMU
//!   10.0), and at all by QEMU 7.2; the tool's `tcg-x2apic` and `tcg-vcpu-limit` errors (more in
//!   `tcg.rs`).
//! * CPU models: the versioned models of 11.3's cpu_map (`Haswell-v2`...) and the models 9.0 lacks
//!   (`EPYC-Genoa`) are known to the tool reading that cpu_map, unknown with 9.0's, and a policy
//!   naming one gives a domain 11.3 defines.

use crate::harness::{Cmd, Oracle, Scratch, oracles, s};
use std::io::Write;
use std::process::Stdio;
use virt_cpu_policy::vcpu_limits::builtin_limit;

/// `query-machines` of the oracle's `qemu-system-ARCH`: (name, cpu-max, alias).
pub(crate) fn query_machines(
    oracle: &Oracle,
    qemu_arch: &str,
) -> Vec<(String, u32, Option<String>)> {
    let program = format!("/usr/bin/qemu-system-{qemu_arch}");
    if !oracle.path(&program).exists() {
        return Vec::new();
    }
    let mut child = oracle
        .command(&program)
        .args([
            "-machine",
            "none",
            "-nodefaults",
            "-display",
            "none",
            "-qmp",
            "stdio",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start QEMU for QMP");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(
            b"{\"execute\":\"qmp_capabilities\"}\n{\"execute\":\"query-machines\"}\n{\"execute\":\"quit\"}\n",
        )
        .unwrap();
    let out = child.wait_with_output().expect("QMP output");
    let text = String::from_utf8_lossy(&out.stdout);
    let list = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find_map(|v| v["return"].as_array().cloned())
        .unwrap_or_else(|| {
            panic!(
                "{}: no query-machines answer from {program}:\n{text}",
                oracle.label
            )
        });
    list.iter()
        .filter_map(|m| {
            Some((
                m["name"].as_str()?.to_string(),
                u32::try_from(m["cpu-max"].as_u64()?).ok()?,
                m["alias"].as_str().map(str::to_string),
            ))
        })
        .collect()
}

#[test]
#[ignore = "needs libvirt's QEMU (host) and the Debian 13 root: .ci/run installs and starts them"]
fn machine_table_matches_qemu_query_machines() {
    let mut wrong = Vec::new();
    for oracle in crate::harness::every_generation() {
        for (qemu_arch, arch) in [("x86_64", "x86_64"), ("aarch64", "aarch64")] {
            let machines = query_machines(&oracle, qemu_arch);
            if machines.is_empty() {
                assert!(
                    qemu_arch != "x86_64",
                    "{}: no qemu-system-x86_64",
                    oracle.label
                );
                continue;
            }
            let (mut agree, mut uncovered) = (0, 0);
            let mut rows: Vec<String> = Vec::new();
            for (name, max, alias) in &machines {
                match builtin_limit(arch, name) {
                    Some(b) if b.max_cpus == *max => {
                        agree += 1;
                        if alias.is_some() || name.ends_with("-8.1") || name.ends_with("-9.0") {
                            rows.push(format!("{name}={max}"));
                        }
                    }
                    Some(b) => wrong.push(format!(
                        "{}: {arch} {name}: built-in {} ({}), QEMU's query-machines {max}",
                        oracle.label, b.max_cpus, b.rule
                    )),
                    None => uncovered += 1,
                }
            }
            eprintln!(
                "oracles: {}: qemu-system-{qemu_arch} query-machines: {} machine types, {agree} match the built-in table, {uncovered} not covered (boards, microvm, isapc...); e.g. {}",
                oracle.label,
                machines.len(),
                rows.join(" ")
            );
            assert!(
                agree > 10,
                "{}: too few machine types matched",
                oracle.label
            );
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A guest with `<topology ... clusters='2' ...>` for `vcpus` vCPUs.
fn clusters_guest(name: &str, vcpus: u32) -> String {
    format!(
        "<domain type='qemu'>\n  <name>{name}</name>\n  <memory unit='MiB'>64</memory>\n  <vcpu>{vcpus}</vcpu>\n  <os>\n    <type arch='x86_64' machine='q35'>hvm</type>\n  </os>\n  <cpu>\n    <topology sockets='1' dies='1' clusters='2' cores='2' threads='2'/>\n  </cpu>\n  <devices>\n    <console type='pty'/>\n  </devices>\n</domain>\n"
    )
}

#[test]
#[ignore = "needs the host's libvirtd and the Debian 13 root's: .ci/run starts them"]
fn x86_clusters_per_libvirt_generation() {
    let dir = Scratch::new("clusters");
    for oracle in oracles() {
        let name = format!("vcp-test-{}-clusters", std::process::id());
        // 1 × 1 × 2 × 2 × 2 = 8 with clusters read, 4 without.
        let (vcpus, clusters_read) = if oracle.major_minor() >= (10, 1) {
            (8, true)
        } else {
            (4, false)
        };
        let file = dir.write("clusters.xml", clusters_guest(&name, vcpus));
        let tool = Cmd::new(&["check", "--format", "json", "--no-qemu-caps-cache"])
            .args(&oracle.tool_args())
            .args(&["--policy", &s(&dir.write("p.toml", "version = 1\n"))])
            .arg(s(&file))
            .run();
        let v: serde_json::Value = serde_json::from_str(&tool.stdout).expect("check JSON");
        let finding = |code: &str| {
            v["findings"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|f| f["code"] == code)
                .cloned()
        };
        let d = oracle.virsh(&["define", &s(&file)]);
        assert!(d.ok, "{}: define: {}", oracle.label, d.stderr);
        let started = oracle.virsh(&["start", &name]);
        let _ = oracle.virsh(&["destroy", &name]);
        let _ = oracle.virsh(&["undefine", &name]);
        let clusters = finding("topology-clusters").expect("a topology-clusters finding");
        // libvirt sometimes reads QEMU's last words too late and says only "QEMU unexpectedly
        // closed the monitor": QEMU's own log of the guest holds them then.
        let refusal = "clusters > 1 not supported by this machine's CPU topology";
        let qemu_log =
            std::fs::read_to_string(oracle.path(&format!("/var/log/libvirt/qemu/{name}.log")))
                .unwrap_or_default();
        if clusters_read {
            assert!(
                !started.ok
                    && (started.stderr.contains(refusal)
                        || (started.stderr.contains("unexpectedly closed the monitor")
                            && qemu_log.contains(refusal))),
                "{}: QEMU should refuse clusters=2 at start: {}",
                oracle.label,
                started.stderr
            );
            assert_eq!(clusters["severity"], "error", "{v}");
            eprintln!(
                "oracles: {}: clusters='2' on x86 defined, refused at start by QEMU (\"clusters > 1 not supported by this machine's CPU topology\"); the tool: error[topology-clusters]",
                oracle.label
            );
        } else {
            assert!(started.ok, "{}: start: {}", oracle.label, started.stderr);
            assert_eq!(clusters["severity"], "warning", "{v}");
            assert!(finding("topology-mismatch").is_none(), "{v}");
            eprintln!(
                "oracles: {}: clusters='2' ignored (4 vCPUs = 1 x 1 x 2 x 2, defined and started); the tool: warning[topology-clusters], no mismatch",
                oracle.label
            );
        }
    }
}

/// A custom guest CPU with `model`.
fn model_guest(name: &str, model: &str) -> String {
    format!(
        "<domain type='qemu'>\n  <name>{name}</name>\n  <memory unit='MiB'>64</memory>\n  <vcpu>1</vcpu>\n  <os>\n    <type arch='x86_64' machine='q35'>hvm</type>\n  </os>\n  <cpu mode='custom' match='exact'>\n    <model fallback='forbid'>{model}</model>\n  </cpu>\n  <devices/>\n</domain>\n"
    )
}

#[test]
#[ignore = "needs the Debian 13 root: .ci/run starts it"]
fn cpu_models_follow_the_hosts_cpu_map() {
    let dir = Scratch::new("models");
    let all = oracles();
    let Some(new) = all.iter().find(|o| o.major_minor() >= (11, 0)) else {
        panic!("no libvirt 11 to ask (tests/libvirt/root start, VCP_ROOT)");
    };
    let old = &all[0];
    for model in ["Haswell-v2", "EPYC-Genoa", "SapphireRapids-v3"] {
        let name = format!("vcp-test-{}-model", std::process::id());
        let file = dir.write("m.xml", model_guest(&name, model));
        let judge = |o: &Oracle| {
            let out = Cmd::new(&["check", "--no-qemu-caps-cache"])
                .args(&o.tool_args())
                .args(&["--policy", &s(&dir.write("p.toml", "version = 1\n"))])
                .arg(s(&file))
                .run();
            out.stdout.contains("cpu-model-unknown")
        };
        assert!(
            judge(old),
            "{}: {model} should be unknown to 9.0's cpu_map",
            old.label
        );
        assert!(
            !judge(new),
            "{}: {model} should be known to its cpu_map",
            new.label
        );
        let d = new.virsh(&["define", &s(&file)]);
        let _ = new.virsh(&["undefine", &name]);
        assert!(d.ok, "{}: define {model}: {}", new.label, d.stderr);
    }
    // A policy naming a model only 11.3 has: an error with 9.0's cpu_map, a defined domain with
    // 11.3's.
    let policy = dir.write(
        "genoa.toml",
        "version = 1\n[[rule]]\nname = \"genoa\"\ncpu.model = \"EPYC-Genoa\"\n",
    );
    let name = format!("vcp-test-{}-genoa", std::process::id());
    let input = dir.write("in.xml", model_guest(&name, "EPYC"));
    let with = |o: &Oracle| {
        Cmd::new(&["rewrite", "--no-qemu-caps-cache", "--policy", &s(&policy)])
            .args(&o.tool_args())
            .arg(s(&input))
            .run()
    };
    let refused = with(old);
    refused.status(1);
    assert!(
        refused.stderr.contains("cpu-model-unknown"),
        "{}",
        refused.stderr
    );
    let out = with(new);
    out.status(0);
    let file = dir.write("genoa.xml", &out.stdout);
    let d = new.virsh(&["define", &s(&file)]);
    let _ = new.virsh(&["undefine", &name]);
    assert!(
        d.ok,
        "{}: define the EPYC-Genoa rewrite: {}",
        new.label, d.stderr
    );
    eprintln!(
        "oracles: Haswell-v2, EPYC-Genoa, SapphireRapids-v3: unknown with {}'s cpu_map, known with {}'s and defined there; a policy naming EPYC-Genoa: error with the first, a defined domain with the second",
        old.label, new.label
    );
}

/// A TCG guest with `vcpus` vCPUs on q35, IOMMU in eim mode, qemu64 with or without x2APIC.
fn tcg_guest(name: &str, vcpus: u32, x2apic: bool) -> String {
    let feature = if x2apic {
        "<feature policy='require' name='x2apic'/>"
    } else {
        ""
    };
    format!(
        "<domain type='qemu'>\n  <name>{name}</name>\n  <memory unit='MiB'>256</memory>\n  <vcpu>{vcpus}</vcpu>\n  <os>\n    <type arch='x86_64' machine='q35'>hvm</type>\n  </os>\n  <features>\n    <acpi/>\n    <apic/>\n    <ioapic driver='qemu'/>\n  </features>\n  <cpu mode='custom'>\n    <model>qemu64</model>{feature}\n  </cpu>\n  <devices>\n    <iommu model='intel'>\n      <driver intremap='on' eim='on'/>\n    </iommu>\n    <console type='pty'/>\n  </devices>\n</domain>\n"
    )
}

#[test]
#[ignore = "needs the host's libvirtd and the Debian 13 root's: .ci/run starts them"]
fn more_than_255_tcg_vcpus_need_x2apic() {
    let dir = Scratch::new("x2apic");
    let policy = dir.write("p.toml", "version = 1\n");
    for oracle in oracles() {
        for x2apic in [false, true] {
            let name = format!("vcp-test-{}-x2apic", std::process::id());
            let file = dir.write("g.xml", tcg_guest(&name, 280, x2apic));
            let qemu = crate::tcg::qemu_version(&oracle);
            let tool = Cmd::new(&["check", "--no-qemu-caps-cache", "--policy", &s(&policy)])
                .args(&oracle.tool_args())
                .args(&["--qemu-version", &qemu])
                .arg(s(&file))
                .run();
            let refused = ["error[tcg-x2apic]", "error[tcg-vcpu-limit]"]
                .iter()
                .any(|c| tool.stdout.contains(c));
            let d = oracle.virsh(&["define", &s(&file)]);
            assert!(d.ok, "{}: define: {}", oracle.label, d.stderr);
            let started = oracle.virsh(&["start", &name]);
            let _ = oracle.virsh(&["destroy", &name]);
            let _ = oracle.virsh(&["undefine", &name]);
            let qemu10 = oracle.major_minor() >= (11, 0);
            eprintln!(
                "oracles: {}: 280 TCG vCPUs, qemu64{}: {}; the tool {}",
                oracle.label,
                if x2apic { " + x2apic" } else { "" },
                if started.ok {
                    "starts".to_string()
                } else {
                    format!(
                        "refused at start: {}",
                        started.stderr.trim().lines().last().unwrap_or("")
                    )
                },
                if refused { "refuses it" } else { "accepts it" }
            );
            // Without x2APIC no QEMU starts it; with it QEMU 10 does (QEMU 7.2 cannot at all).
            assert_eq!(
                started.ok,
                x2apic && qemu10,
                "{}: {}",
                oracle.label,
                started.stderr
            );
            assert_eq!(refused, !started.ok, "{}", tool.stdout);
        }
    }
}

/// A guest of `arch` and machine type `machine` (with `<emulator>` when given) with nothing else
/// to judge.
fn machine_guest(name: &str, arch: &str, machine: &str, emulator: Option<&str>) -> String {
    let emulator = emulator.map_or_else(String::new, |e| format!("<emulator>{e}</emulator>"));
    format!(
        "<domain type='qemu'>\n  <name>{name}</name>\n  <memory unit='MiB'>64</memory>\n  <vcpu>1</vcpu>\n  <os>\n    <type arch='{arch}' machine='{machine}'>hvm</type>\n  </os>\n  <devices>{emulator}</devices>\n</domain>\n"
    )
}

/// `check --format json` of `file` as the oracle's system runs it: directly on the host, inside
/// the root (`chroot`, the binary copied in: it needs only libc) for the Debian 13 root, so the
/// tool reads that libvirt's QEMU capability cache and that QEMU's ctime.
fn check_inside(oracle: &Oracle, file: &str, policy: &str) -> serde_json::Value {
    let out = if oracle.is_host() {
        Cmd::new(&["check", "--format", "json", "--policy", policy, file]).run()
    } else {
        // Named after this process: another checkout's run may copy its own binary in too.
        let name = format!("/tmp/virt-cpu-policy-{}", std::process::id());
        let inside = oracle.path(&name);
        std::fs::copy(crate::harness::bin(), &inside).expect("copy the tool into the root");
        // A test thread forking while the copy's file was open for writing leaves that
        // descriptor open in its child until the child's exec: the copy cannot be run until
        // then ("Text file busy", ETXTBSY). Tried again after a moment.
        let mut tries = 0;
        let o = loop {
            let o = oracle
                .command(&name)
                .args(["check", "--format", "json", "--policy", policy, file])
                .output()
                .expect("run the tool in the root");
            tries += 1;
            if tries == 20 || !String::from_utf8_lossy(&o.stderr).contains("Text file busy") {
                break o;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        let _ = std::fs::remove_file(inside);
        crate::harness::Output::from(o)
    };
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{}: check JSON: {e}\n{}{}",
            oracle.label, out.stdout, out.stderr
        )
    })
}

#[test]
#[ignore = "needs the four generations' libvirtds: .ci/run starts them"]
fn machine_types_the_emulator_lacks_are_refused_like_define() {
    let mut rows = Vec::new();
    for oracle in crate::harness::every_generation() {
        let dir = oracle.path(&format!("/tmp/vcp-machines-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let inside = |p: &std::path::Path| {
            let rel = p.strip_prefix(&oracle.root).unwrap();
            format!("/{}", rel.display())
        };
        let policy = dir.join("p.toml");
        std::fs::write(&policy, "version = 1\n").unwrap();
        // The newest machine types of QEMU 10.0 arrive at a QEMU 7.2 host with a migrated or
        // copied definition; 99.0 is nobody's.
        let x86_64 = Some("/usr/bin/qemu-system-x86_64");
        let mut guests = vec![
            ("x86_64", "q35", None),
            ("x86_64", "pc", None),
            ("x86_64", "pc-q35-7.2", None),
            ("x86_64", "pc-q35-10.0", None),
            ("x86_64", "pc-i440fx-10.0", None),
            ("x86_64", "pc-q35-99.0", None),
            ("x86_64", "pc-i440fx-2.11", None),
            ("x86_64", "pc-q35-5.1", None),
            ("i686", "pc-q35-99.0", None),
            ("i686", "pc-q35-99.0", x86_64),
            ("i686", "q35", x86_64),
        ];
        if oracle.path("/usr/bin/qemu-system-arm").exists() {
            guests.extend([("armv7l", "virt", None), ("armv7l", "virt-99.0", None)]);
        }
        // Judged two ways: with the generation's own capabilities (its daemon's, given with
        // --caps: the facts of a host judged from elsewhere), and inside the root with its QEMU
        // capability cache where the tool runs there (not in Debian 11's root: its glibc 2.31
        // is older than this build's).
        let caps = oracle.virsh(&["capabilities"]);
        assert!(
            caps.ok,
            "{}: virsh capabilities: {}",
            oracle.label, caps.stderr
        );
        let caps_file = dir.join("capabilities.xml");
        std::fs::write(&caps_file, &caps.stdout).unwrap();
        let runs_inside = oracle.is_host() || {
            let name = format!("/tmp/virt-cpu-policy-probe-{}", std::process::id());
            std::fs::copy(crate::harness::bin(), oracle.path(&name)).unwrap();
            let ok = oracle
                .command(&name)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success());
            let _ = std::fs::remove_file(oracle.path(&name));
            ok
        };
        let (mut agree, mut refused) = (0, 0);
        for (i, (arch, machine, emulator)) in guests.iter().enumerate() {
            let name = format!("vcp-test-{}-machine", std::process::id());
            let file = dir.join(format!("{i}.xml"));
            std::fs::write(&file, machine_guest(&name, arch, machine, *emulator)).unwrap();
            let with_caps = Cmd::new(&["check", "--format", "json", "--policy", &s(&policy)])
                .args(&[
                    "--caps",
                    &s(&caps_file),
                    "--libvirt-version",
                    &oracle.version,
                ])
                .args(&["--cpu-map", &s(&oracle.cpu_map()), &s(&file)])
                .run();
            let mut verdicts = vec![(
                "with its capabilities",
                serde_json::from_str(&with_caps.stdout).unwrap_or_else(|e| {
                    panic!("{}: check JSON: {e}: {}", oracle.label, with_caps.stderr)
                }),
            )];
            if runs_inside {
                verdicts.push((
                    "with its QEMU capability cache",
                    check_inside(&oracle, &inside(&file), &inside(&policy)),
                ));
            }
            let d = oracle.virsh(&["define", &s(&file)]);
            let _ = oracle.virsh(&["undefine", &name]);
            for (how, v) in &verdicts {
                let tool = v["findings"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|f| f["code"] == "machine-unsupported")
                    .map(|f| f["message"].as_str().unwrap_or("").to_string());
                match (&tool, d.ok) {
                    (None, true) => agree += 1,
                    (Some(m), false) => {
                        let libvirt = d
                            .stderr
                            .lines()
                            .find_map(|l| l.split("unsupported configuration: ").nth(1))
                            .unwrap_or_else(|| {
                                panic!("{}: {arch} {machine}: {}", oracle.label, d.stderr)
                            });
                        assert!(
                            m.starts_with(libvirt.trim()),
                            "{}: {arch} {machine} ({how}): the tool says `{m}`, libvirt `{libvirt}`",
                            oracle.label
                        );
                        agree += 1;
                        refused += 1;
                    }
                    _ => panic!(
                        "{}: {arch} {machine} {emulator:?} ({how}): the tool says {tool:?}, define {}: {}",
                        oracle.label,
                        if d.ok { "accepts" } else { "refuses" },
                        d.stderr
                    ),
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        assert!(refused >= 1, "{}: no machine type refused", oracle.label);
        rows.push(format!(
            "{}: {agree} verdicts on {} guests' machine types agree with define ({}), {refused} refused alike",
            oracle.label,
            guests.len(),
            if runs_inside {
                "with its capabilities and with its QEMU capability cache"
            } else {
                "with its capabilities"
            }
        ));
    }
    eprintln!("oracles: {}", rows.join("; "));
}
