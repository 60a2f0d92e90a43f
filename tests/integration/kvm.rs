//! libvirt's start-time check of a KVM custom CPU (`src/validate/kvm.rs`) against the host's
//! real libvirt under KVM: each guest CPU below is judged by `virt-cpu-policy check` with this
//! host's own facts (`virsh capabilities`, `virsh domcapabilities --virttype kvm`, libvirt's
//! cpu_map) and started with `virsh start`; the tool's `cpu-incompatible` (`check='partial'`)
//! or `kvm-check-full` (`check='full'`) must be there exactly when libvirt refuses, and say
//! libvirt's reason.
//!
//! On this machine (its KVM lacks `pni` and `popcnt`, its CPUID has them; an Intel CPU, so no
//! `svm`) libvirt 9.0 starts `Nehalem` (`usable='no'`) under `check='partial'` and refuses
//! `qemu64` ("Host CPU does not provide required features: svm"); elsewhere the answers differ,
//! and agreement is what is asserted.
//!
//! Needs the host's libvirtd and a usable `/dev/kvm` (`chmod 666 /dev/kvm` after a root's
//! package scripts reset it): without `/dev/kvm` it says SKIP, and with `VCP_REQUIRE_KVM=1`
//! fails instead.

use crate::harness::{Cmd, Scratch, oracles, s};
use crate::tcg::{Start, try_start};

/// The guest CPUs judged (label, `<cpu>`).
const CPUS: [(&str, &str); 14] = [
    (
        "nehalem-partial",
        "<cpu mode='custom' match='exact' check='partial'><model>Nehalem</model></cpu>",
    ),
    (
        "nehalem-default-forbid",
        "<cpu mode='custom' match='exact'><model fallback='forbid'>Nehalem</model></cpu>",
    ),
    (
        "nehalem-minimum",
        "<cpu mode='custom' match='minimum' check='partial'><model>Nehalem</model></cpu>",
    ),
    (
        "nehalem-none",
        "<cpu mode='custom' match='exact' check='none'><model>Nehalem</model></cpu>",
    ),
    (
        "require-popcnt",
        "<cpu mode='custom' match='exact'><model>kvm64</model><feature policy='require' name='popcnt'/></cpu>",
    ),
    (
        "require-kvm-adds",
        "<cpu mode='custom' match='exact'><model>kvm64</model><feature policy='require' name='x2apic'/><feature policy='require' name='hypervisor'/><feature policy='require' name='tsc-deadline'/></cpu>",
    ),
    (
        "require-svm",
        "<cpu mode='custom' match='exact'><model>kvm64</model><feature policy='require' name='svm'/></cpu>",
    ),
    (
        "require-svm-minimum",
        "<cpu mode='custom' match='minimum'><model>kvm64</model><feature policy='require' name='svm'/></cpu>",
    ),
    (
        "forbid-lm",
        "<cpu mode='custom' match='exact'><model>kvm64</model><feature policy='forbid' name='lm'/></cpu>",
    ),
    (
        "qemu64-default",
        "<cpu mode='custom' match='exact'><model>qemu64</model></cpu>",
    ),
    (
        "nehalem-full",
        "<cpu mode='custom' match='exact' check='full'><model>Nehalem</model></cpu>",
    ),
    (
        "pentium-full",
        "<cpu mode='custom' match='exact' check='full'><model>pentium</model></cpu>",
    ),
    (
        "kvm64-hypervisor-full",
        "<cpu mode='custom' check='full'><model>kvm64</model><feature policy='require' name='hypervisor'/></cpu>",
    ),
    (
        "nehalem-full-minimum",
        "<cpu mode='custom' match='minimum' check='full'><model>Nehalem</model></cpu>",
    ),
];

/// A small diskless KVM guest named `name` with `cpu`.
fn guest(name: &str, cpu: &str) -> String {
    format!(
        "<domain type='kvm'>\n  <name>{name}</name>\n  <memory unit='MiB'>64</memory>\n  <vcpu>1</vcpu>\n  <os>\n    <type arch='x86_64' machine='pc'>hvm</type>\n  </os>\n  {cpu}\n  <devices>\n    <console type='pty'/>\n    <memballoon model='none'/>\n  </devices>\n</domain>\n"
    )
}

/// Whether the tool's finding (`code`, `message`) says what libvirt's refusal `line` says:
/// "the CPU is incompatible with host CPU: REASON" is `cpu-incompatible` with REASON in its
/// sentence; "guest CPU doesn't match specification: extra features: ..., missing features: ..."
/// is `kvm-check-full` naming every missing feature, and `hypervisor` when libvirt names it
/// extra (the other extra features are not predicted).
fn agrees(line: &str, code: &str, message: &str) -> bool {
    if let Some((_, reason)) = line.split_once("the CPU is incompatible with host CPU: ") {
        return code == "cpu-incompatible" && message.contains(reason.trim());
    }
    let Some((_, diff)) = line.split_once("guest CPU doesn't match specification: ") else {
        return false;
    };
    let (extra, missing) = match diff.split_once("missing features: ") {
        Some((e, m)) => (e, m.trim()),
        None => (diff, ""),
    };
    let said = message.split(" (").next().unwrap_or_default();
    code == "kvm-check-full"
        && message.starts_with("guest CPU doesn't match specification: ")
        && (missing.is_empty() || said.contains(&format!("missing features: {missing}")))
        && extra.contains("hypervisor") == said.contains("extra features: hypervisor")
}

#[test]
#[ignore = "needs the host's libvirtd and a usable /dev/kvm: .ci/run starts libvirtd"]
fn kvm_custom_cpu_checks_agree_with_virsh_start() {
    if !crate::libvirt::dev_kvm_usable() {
        assert!(
            std::env::var("VCP_REQUIRE_KVM").as_deref() != Ok("1"),
            "VCP_REQUIRE_KVM=1 but /dev/kvm is absent or not usable (chmod 666 /dev/kvm)"
        );
        eprintln!("kvm: SKIP: /dev/kvm is absent or not usable (chmod 666 /dev/kvm)");
        return;
    }
    let host = oracles().into_iter().next().expect("the host's libvirt");
    let dir = Scratch::new("kvm-start");
    let facts = |name: &str, args: &[&str]| {
        let v = host.virsh(args);
        assert!(v.ok, "virsh {args:?}: {}", v.stderr);
        dir.write(name, v.stdout)
    };
    let caps = facts("capabilities.xml", &["capabilities"]);
    let domcaps = facts(
        "domcapabilities-kvm.xml",
        &[
            "domcapabilities",
            "--virttype",
            "kvm",
            "--arch",
            "x86_64",
            "--machine",
            "pc",
        ],
    );
    let policy = dir.write("empty.toml", "version = 1\n");
    let (mut refused, mut failures) = (0, Vec::new());
    for (label, cpu) in CPUS {
        let name = format!("vcp-test-{}-kvm-{label}", std::process::id());
        let xml = guest(&name, cpu);
        let file = dir.write(&format!("{label}.xml"), &xml);
        let out = Cmd::new(&["check", "--format", "json", "--no-qemu-caps-cache"])
            .args(&["--cpu-map", "/usr/share/libvirt/cpu_map"])
            .args(&["--caps", &s(&caps), "--caps", &s(&domcaps)])
            .args(&["--policy", &s(&policy)])
            .arg(s(&file))
            .run();
        let v: serde_json::Value = serde_json::from_str(&out.stdout)
            .unwrap_or_else(|e| panic!("{label}: check's JSON: {e}: {}", out.stderr));
        let tool = v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["code"] == "cpu-incompatible" || f["code"] == "kvm-check-full")
            .map(|f| {
                let text = |k: &str| f[k].as_str().unwrap().to_string();
                (text("code"), text("message"))
            });
        let got = try_start(&host, &dir, &name, &xml, || ());
        eprintln!("kvm: {label}: libvirt {got:?}; tool {tool:?}");
        let agree = match (&got, &tool) {
            (Start::Runs, None) => true,
            (Start::Refused(l), Some((code, m))) => {
                refused += 1;
                agrees(l, code, m)
            }
            _ => false,
        };
        if !agree {
            failures.push(format!("{label}: libvirt {got:?}, tool {tool:?}"));
        }
    }
    eprintln!(
        "kvm: {} guest CPUs judged, {refused} refused by libvirt and the tool alike",
        CPUS.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
