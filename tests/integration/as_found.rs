//! The tool as found (nothing handed to it but the guest: this machine's CPUID decoded with its
//! libvirt's cpu_map, its QEMU capability cache, its arch) against this machine's libvirt, on
//! guest shapes whose answer a new user met wrong on an AMD host (a KVM `host-model` CPU with
//! a feature required or forbidden, `check='full'` under KVM, `check='partial'` under TCG, a KVM
//! guest of another arch, the modes QEMU aborts on an AMD host, an OS floor KVM cannot give):
//! each is judged by `check --format json` and started (`virsh define` + `start`), and the
//! verdicts must agree:
//!
//! * an error of libvirt's checks (`cpu-incompatible`, `kvm-check-full`, `tcg-cpu-missing`,
//!   `tcg-check-full`, `arch-unsupported`): libvirt refused, for that reason;
//! * `os-floor` alone: libvirt started the guest, and its live CPU lacks a feature of the floor
//!   (QEMU dropped what KVM cannot give): the guest's OS cannot boot;
//! * no error: libvirt started it with the floor's features, or QEMU aborted on MSR 0x10a and
//!   the tool warned `kvm-arch-capabilities` (an AMD host, QEMU before 10.1);
//! * never `not-compared`: as found on a host whose libvirtd runs, every fact is there.
//!
//! Which answer each shape gets differs between machines (vendor, nested KVM, QEMU); agreement
//! is what is asserted, on either vendor.

use crate::harness::{Cmd, Scratch, check_json, oracles, s};
use crate::tcg::{Start, try_start};

/// The floor the `os-floor` case's OS needs (RHEL 10: x86-64-v3), as libvirt names them.
const V3: [&str; 16] = [
    "cx16", "lahf_lm", "popcnt", "pni", "sse4.1", "sse4.2", "ssse3", "avx", "avx2", "bmi1", "bmi2",
    "f16c", "fma", "abm", "movbe", "xsave",
];

/// A diskless guest `name` of virt type `vt` and arch `arch`, with `cpu` and `metadata`.
fn guest(name: &str, vt: &str, arch: &str, cpu: &str, metadata: &str) -> String {
    let machine = if arch == "aarch64" { "virt" } else { "pc" };
    format!(
        "<domain type='{vt}'>\n  <name>{name}</name>\n  {metadata}\n  <memory unit='MiB'>64</memory>\n  <vcpu>1</vcpu>\n  <os>\n    <type arch='{arch}' machine='{machine}'>hvm</type>\n  </os>\n  {cpu}\n  <devices>\n    <memballoon model='none'/>\n  </devices>\n</domain>\n"
    )
}

/// The cases: (label, virt type, arch, `<cpu>`, whether the OS is RHEL 10).
fn cases() -> Vec<(&'static str, &'static str, &'static str, String, bool)> {
    let cpu = |s: &str| s.to_string();
    let v3: String = V3
        .iter()
        .map(|f| format!("<feature policy='require' name='{f}'/>"))
        .collect();
    vec![
        (
            "host-model",
            "kvm",
            "x86_64",
            cpu("<cpu mode='host-model'/>"),
            false,
        ),
        (
            "host-passthrough",
            "kvm",
            "x86_64",
            cpu("<cpu mode='host-passthrough'/>"),
            false,
        ),
        (
            "maximum",
            "kvm",
            "x86_64",
            cpu("<cpu mode='maximum'/>"),
            false,
        ),
        (
            "minimum",
            "kvm",
            "x86_64",
            cpu("<cpu mode='custom' match='minimum'><model>kvm64</model></cpu>"),
            false,
        ),
        (
            "host-model-require-svm",
            "kvm",
            "x86_64",
            cpu(
                "<cpu mode='host-model'><feature policy='disable' name='arch-capabilities'/><feature policy='require' name='svm'/></cpu>",
            ),
            false,
        ),
        (
            "host-model-require-vmx",
            "kvm",
            "x86_64",
            cpu(
                "<cpu mode='host-model'><feature policy='disable' name='arch-capabilities'/><feature policy='require' name='vmx'/></cpu>",
            ),
            false,
        ),
        (
            "host-model-forbid-sse2",
            "kvm",
            "x86_64",
            cpu(
                "<cpu mode='host-model'><feature policy='disable' name='arch-capabilities'/><feature policy='forbid' name='sse2'/></cpu>",
            ),
            false,
        ),
        (
            "host-model-forbid-avx512f",
            "kvm",
            "x86_64",
            cpu(
                "<cpu mode='host-model'><feature policy='disable' name='arch-capabilities'/><feature policy='forbid' name='avx512f'/></cpu>",
            ),
            false,
        ),
        (
            "full-qemu64",
            "kvm",
            "x86_64",
            cpu(
                "<cpu mode='custom' match='exact' check='full'><model>qemu64</model><feature policy='disable' name='svm'/><feature policy='require' name='hypervisor'/><feature policy='require' name='x2apic'/></cpu>",
            ),
            false,
        ),
        (
            "full-kvm64",
            "kvm",
            "x86_64",
            cpu(
                "<cpu mode='custom' match='exact' check='full'><model>kvm64</model><feature policy='require' name='hypervisor'/><feature policy='require' name='x2apic'/></cpu>",
            ),
            false,
        ),
        (
            "tcg-partial-skylake",
            "qemu",
            "x86_64",
            cpu(
                "<cpu mode='custom' match='exact' check='partial'><model>Skylake-Server</model></cpu>",
            ),
            false,
        ),
        (
            "tcg-host-model-avx512f",
            "qemu",
            "x86_64",
            cpu(
                "<cpu mode='host-model' check='partial'><feature policy='require' name='avx512f'/></cpu>",
            ),
            false,
        ),
        (
            "tcg-partial-nehalem-avx2",
            "qemu",
            "x86_64",
            cpu(
                "<cpu mode='custom' match='exact' check='partial'><model>Nehalem</model><feature policy='require' name='avx2'/></cpu>",
            ),
            false,
        ),
        (
            // QEMU 7.2 names it `neoverse-n1`: libvirt cannot translate libvirt's name.
            "aarch64-tcg-neoverse",
            "qemu",
            "aarch64",
            cpu("<cpu mode='custom' match='exact'><model>Neoverse-N1</model></cpu>"),
            false,
        ),
        (
            "aarch64-tcg-cortex-a57",
            "qemu",
            "aarch64",
            cpu("<cpu mode='custom' match='exact'><model>cortex-a57</model></cpu>"),
            false,
        ),
        (
            "aarch64-kvm",
            "kvm",
            "aarch64",
            cpu("<cpu mode='host-passthrough'/>"),
            false,
        ),
        (
            "rhel10-qemu64-v3",
            "kvm",
            "x86_64",
            format!(
                "<cpu mode='custom' match='exact' check='partial'><model>qemu64</model><feature policy='disable' name='svm'/>{v3}</cpu>"
            ),
            true,
        ),
    ]
}

/// The error codes of libvirt's own checks, each with the words of libvirt's refusal it says.
const REFUSALS: [(&str, &str); 6] = [
    ("cpu-incompatible", "the CPU is incompatible with host CPU"),
    ("cpu-model-unknown", "CPU model"),
    ("kvm-check-full", "guest CPU doesn't match specification"),
    ("tcg-cpu-missing", "the CPU is incompatible with host CPU"),
    ("tcg-check-full", "guest CPU doesn't match specification"),
    ("arch-unsupported", "does not support virt type 'kvm'"),
];

/// The features of the floor the live `<cpu>` of a running guest disables (QEMU dropped them).
fn dropped_floor(live: &str) -> Vec<String> {
    let doc = roxmltree::Document::parse(live).expect("live XML");
    doc.descendants()
        .filter(|n| n.has_tag_name("feature") && n.attribute("policy") == Some("disable"))
        .filter_map(|n| n.attribute("name"))
        .filter(|f| V3.contains(f))
        .map(str::to_string)
        .collect()
}

#[test]
#[cfg(target_arch = "x86_64")]
#[ignore = "needs the host's libvirtd, its cpu_map and QEMU capability cache, and a usable /dev/kvm: .ci/run starts libvirtd"]
fn as_found_verdicts_agree_with_libvirt() {
    if !crate::libvirt::kvm_or_skip("as found") {
        return;
    }
    let host = oracles().into_iter().next().expect("the host's libvirt");
    let dir = Scratch::new("as-found");
    let policy = dir.write("policy.toml", "version = 1\n");
    let rhel10 = "<metadata><libosinfo:libosinfo xmlns:libosinfo='http://libosinfo.org/xmlns/libvirt/domain/1.0'><libosinfo:os id='http://redhat.com/rhel/10.0'/></libosinfo:libosinfo></metadata>";
    let mut failures = Vec::new();
    for (i, (label, vt, arch, cpu, os)) in cases().into_iter().enumerate() {
        let name = format!("vcp-as-found-{i}");
        let xml = guest(&name, vt, arch, &cpu, if os { rhel10 } else { "" });
        let file = dir.write(&format!("{label}.xml"), &xml);
        // Nothing handed in but a policy without rules (the default one would rewrite the CPU
        // to its level first): the machine as found.
        let out = Cmd::new(&["check", "--format", "json", "--policy", &s(&policy)])
            .arg(s(&file))
            .run();
        let (_, findings) = check_json(&out, label);
        let has = |code: &str| findings.iter().any(|f| f.0 == code);
        let refusal = REFUSALS.iter().find(|(c, _)| has(c));
        let floor = has("os-floor");
        let other_errors: Vec<&str> = findings
            .iter()
            .filter(|f| f.1 == "error" && f.0 != "os-floor" && refusal.is_none_or(|r| f.0 != r.0))
            .map(|f| f.0.as_str())
            .collect();
        let host_ref = &host;
        let mut live = String::new();
        let got = try_start(&host, &dir, &name, &xml, || {
            live = host_ref.virsh(&["dumpxml", &name]).stdout;
        });
        let dropped = if live.is_empty() {
            Vec::new()
        } else {
            dropped_floor(&live)
        };
        eprintln!(
            "as found: {label}: libvirt {got:?}{}; tool exit {} {:?}",
            if dropped.is_empty() {
                String::new()
            } else {
                format!(", live CPU drops {dropped:?}")
            },
            out.code,
            findings.iter().map(|f| f.0.as_str()).collect::<Vec<_>>()
        );
        let agree = if has("not-compared") || !other_errors.is_empty() {
            false
        } else {
            match (&got, refusal) {
                (Start::Refused(l), Some((code, words))) => {
                    l.contains(words)
                        && (!code.starts_with("cpu-incompatible")
                            || crate::kvm::agrees(
                                l,
                                code,
                                &findings.iter().find(|f| f.0 == *code).unwrap().2,
                            ))
                }
                (Start::Refused(l), None) if crate::kvm::msr_abort_of(&host, &name, l) => {
                    has("kvm-arch-capabilities") && !floor
                }
                (Start::Runs, None) => {
                    !has("kvm-arch-capabilities") && floor == (os && !dropped.is_empty())
                }
                _ => false,
            }
        };
        if !agree {
            failures.push(format!(
                "{label}: libvirt {got:?} (live CPU drops {dropped:?}); tool exit {}: {findings:?}",
                out.code
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
