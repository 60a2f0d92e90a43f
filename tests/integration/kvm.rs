//! libvirt's start-time check of a KVM custom CPU (`src/validate/kvm.rs`) against the host's
//! real libvirt under KVM: each guest CPU below is judged by `virt-cpu-policy check` with this
//! host's own facts (`virsh capabilities`, `virsh domcapabilities --virttype kvm`, libvirt's
//! cpu_map) and started with `virsh start`; the tool's `cpu-incompatible` (`check='partial'`)
//! or `kvm-check-full` (`check='full'`) must be there exactly when libvirt refuses, and say
//! libvirt's reason.
//!
//! On the Intel machines of the project's CI (their KVM lacks `pni` and `popcnt`, their CPUID has
//! them; no `svm`) libvirt 9.0 starts `Nehalem` (`usable='no'`) under `check='partial'` and
//! refuses `qemu64` ("Host CPU does not provide required features: svm"); on its AMD EPYC
//! machines (nested KVM: no `svm` in the CPUID either) the answers differ; agreement is what
//! is asserted.
//!
//! Needs the host's libvirtd and a usable `/dev/kvm` (`chmod 666 /dev/kvm` after a root's
//! package scripts reset it): without `/dev/kvm` it says SKIP, and with `VCP_REQUIRE_KVM=1`
//! fails instead.

use crate::harness::{
    Cmd, Generation, Scratch, bin, generation_scratch, generations, in_parallel, oracles, root, s,
};
use crate::producers::{
    DATA, Facts, POLICIES, fnv1a, manifest, qemu_version_option, reason, renamed, start_seed,
    startable as startable_form, tool, tool_args,
};
use crate::tcg::{Start, try_start};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The guest CPUs judged (label, `<cpu>`).
const CPUS: [(&str, &str); 16] = [
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
    // What KVM gives: on an AMD host whose QEMU is older than 10.1 these carry
    // arch-capabilities and QEMU aborts (`kvm-arch-capabilities`); elsewhere they start.
    ("host-model", "<cpu mode='host-model'/>"),
    ("host-passthrough", "<cpu mode='host-passthrough'/>"),
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
/// is `kvm-check-full` naming every missing feature, only extra features libvirt names, and
/// `hypervisor` when libvirt names it extra (the model-specific ones, `vme`, `apic`, are not
/// predicted).
pub(crate) fn agrees(line: &str, code: &str, message: &str) -> bool {
    if let Some((_, reason)) = line.split_once("the CPU is incompatible with host CPU: ") {
        let missing = "Host CPU does not provide required features: ";
        let said = message.split(" (").next().unwrap_or_default();
        // A model judged against what KVM gives lists its features in QEMU's order, not the
        // cpu_map's (src/validate/kvm.rs): the same set is agreement.
        // libvirt 11.3 and 12.8 may name a feature twice ("..., spec-ctrl, ssbd, ..., spec-ctrl,
        // ssbd", seen on an AMD host): the same set is agreement.
        let set = |s: &str| {
            s.split(", ")
                .map(|f| f.trim().to_string())
                .collect::<std::collections::BTreeSet<String>>()
        };
        let same = match (
            reason.trim().strip_prefix(missing),
            said.split_once(missing),
        ) {
            (Some(l), Some((_, t))) => set(l) == set(t),
            _ => message.contains(reason.trim()),
        };
        return code == "cpu-incompatible" && same;
    }
    let Some((_, diff)) = line.split_once("guest CPU doesn't match specification: ") else {
        return false;
    };
    let (extra, missing) = match diff.split_once("missing features: ") {
        Some((e, m)) => (e, m.trim()),
        None => (diff, ""),
    };
    let said = message.split(" (").next().unwrap_or_default();
    // The extra features the tool names: each one libvirt names too (it names more), and
    // `hypervisor` exactly when libvirt does.
    let names = |list: &str| -> Vec<String> {
        list.trim()
            .trim_end_matches(',')
            .split(',')
            .map(|f| f.trim().to_string())
            .filter(|f| !f.is_empty())
            .collect()
    };
    let libvirt_extra = names(extra.trim().strip_prefix("extra features: ").unwrap_or(""));
    let tool_extra = said
        .split_once("extra features: ")
        .map(|(_, rest)| names(rest.split(", missing").next().unwrap_or_default()))
        .unwrap_or_default();
    code == "kvm-check-full"
        && message.starts_with("guest CPU doesn't match specification: ")
        && (missing.is_empty() || said.contains(&format!("missing features: {missing}")))
        && tool_extra.iter().all(|f| libvirt_extra.contains(f))
        && libvirt_extra.iter().any(|f| f == "hypervisor")
            == tool_extra.iter().any(|f| f == "hypervisor")
}

/// Whether libvirt's failure `line` is QEMU aborting on MSR 0x10a (`arch-capabilities`) at
/// start, a fact of the machine's QEMU and CPU vendor that the tool warns of
/// (`kvm-arch-capabilities`, src/validate/arch_caps.rs): "error: failed to set MSR 0x10a to
/// 0x69", then "kvm_buf_set_msrs: Assertion `ret == cpu->kvm_msr_buf->nmsrs' failed." (QEMU 5.2,
/// 7.2 and 10.0 on AMD EPYC).
pub(crate) fn msr_abort(line: &str) -> bool {
    // libvirt's last line may be QEMU's assertion alone, which follows a failure to set any
    // MSR: where the tool's word matters, its `kvm-arch-capabilities` warning is asked for too.
    line.contains("failed to set MSR 0x10a") || line.contains("kvm_buf_set_msrs: Assertion")
}

/// [`msr_abort`] of a failed `virsh start` of guest `name` on `o`'s libvirt: its error, else the
/// guest's QEMU log (`ROOT/var/log/libvirt/qemu/NAME.log`). libvirt at times reports only "QEMU
/// unexpectedly closed the monitor", when QEMU's last lines had not reached it yet (seen with
/// libvirt 11.3 on an AMD host); the log has them.
pub(crate) fn msr_abort_of(o: &crate::harness::Oracle, name: &str, stderr: &str) -> bool {
    msr_abort(stderr)
        || (stderr.contains("unexpectedly closed the monitor")
            && std::fs::read_to_string(o.root.join(format!("var/log/libvirt/qemu/{name}.log")))
                .is_ok_and(|log| msr_abort(&log)))
}

/// The tool's findings of `check --format json` output `json` with one of `codes`: (code,
/// message) of the first, or None.
fn finding_of(json: &serde_json::Value, codes: &[&str]) -> Option<(String, String)> {
    json["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|f| codes.iter().any(|c| f["code"] == *c))
        .map(|f| {
            let text = |k: &str| f[k].as_str().unwrap_or_default().to_string();
            (text("code"), text("message"))
        })
}

#[test]
#[ignore = "needs the host's libvirtd and a usable /dev/kvm: .ci/run starts libvirtd"]
fn kvm_custom_cpu_checks_agree_with_virsh_start() {
    if !crate::libvirt::kvm_or_skip("kvm") {
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
        &crate::producers::kvm_domcaps_args("pc"),
    );
    let policy = dir.write("empty.toml", "version = 1\n");
    let qemu = crate::tcg::qemu_version(&host);
    let (mut refused, mut msr, mut failures) = (0, 0, Vec::new());
    for (label, cpu) in CPUS {
        let name = format!("vcp-test-{}-kvm-{label}", std::process::id());
        let xml = guest(&name, cpu);
        let file = dir.write(&format!("{label}.xml"), &xml);
        let out = Cmd::new(&["check", "--format", "json", "--no-qemu-caps-cache"])
            .args(&["--cpu-map", "/usr/share/libvirt/cpu_map"])
            .args(&["--caps", &s(&caps), "--caps", &s(&domcaps)])
            .args(&["--policy", &s(&policy), "--qemu-version", &qemu])
            .arg(s(&file))
            .run();
        let v: serde_json::Value = serde_json::from_str(&out.stdout)
            .unwrap_or_else(|e| panic!("{label}: check's JSON: {e}: {}", out.stderr));
        let tool = finding_of(&v, &["cpu-incompatible", "kvm-check-full"]);
        let warned = finding_of(&v, &["kvm-arch-capabilities"]).is_some();
        let got = try_start(&host, &dir, &name, &xml, || ());
        eprintln!("kvm: {label}: libvirt {got:?}; tool {tool:?}, kvm-arch-capabilities {warned}");
        // QEMU's abort on MSR 0x10a (an AMD host, QEMU before 10.1) comes after libvirt's
        // checks passed: the tool must have warned of it and said nothing else.
        let agree = match (&got, &tool) {
            (Start::Runs, None) => !warned,
            (Start::Refused(l), None) if msr_abort(l) => {
                msr += 1;
                warned
            }
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
        "kvm: {} guest CPUs judged, {refused} refused by libvirt and the tool alike, {msr} aborted by QEMU {qemu} on MSR 0x10a as the tool warned",
        CPUS.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The features QEMU's KVM adds to the CPUID (what libvirt's "full" host CPU has beyond
/// `virsh capabilities`' host CPU: domcapabilities' host-model `require`s, `arch-capabilities`
/// and its bits on an AMD host, `x2apic`, `tsc-deadline`... on others), each required by a
/// `kvm64` guest under `check='partial'`, judged by `check` with nothing given but the guest
/// (the host as found: its CPUID decoded, its QEMU capability cache) and started by libvirt:
/// libvirt compares with the CPUID plus those features, so the tool must too (found on an AMD
/// host: `rdctl-no`, `mds-no`, `arch-capabilities` refused by the tool, started by libvirt).
/// One feature neither gives is refused by both.
#[test]
#[ignore = "needs the host's libvirtd and a usable /dev/kvm: .ci/run starts libvirtd"]
fn as_found_kvm_additions_agree_with_virsh_start() {
    if !crate::libvirt::kvm_or_skip("kvm") {
        return;
    }
    let host = oracles().into_iter().next().expect("the host's libvirt");
    let virsh = |args: &[&str]| {
        let v = host.virsh(args);
        assert!(v.ok, "virsh {args:?}: {}", v.stderr);
        v.stdout
    };
    let caps = virsh(&["capabilities"]);
    let domcaps = virsh(&crate::producers::kvm_domcaps_args("pc"));
    let names = |text: &str, within: &str, policy: Option<&str>| -> BTreeSet<String> {
        let doc = roxmltree::Document::parse(text).unwrap();
        let scope = doc
            .descendants()
            .find(|n| match within {
                "host" => {
                    n.has_tag_name("cpu") && n.parent().is_some_and(|p| p.has_tag_name("host"))
                }
                _ => n.has_tag_name("mode") && n.attribute("name") == Some("host-model"),
            })
            .expect("the host CPU");
        scope
            .children()
            .filter(|n| n.has_tag_name("feature"))
            .filter(|n| policy.is_none_or(|p| n.attribute("policy") == Some(p)))
            .filter_map(|n| n.attribute("name").map(str::to_string))
            .collect()
    };
    let cpuid = names(&caps, "host", None);
    let host_model = names(&domcaps, "host-model", Some("require"));
    let added: Vec<String> = host_model.difference(&cpuid).cloned().collect();
    let absent = ["svm", "vmx", "avx512f", "amx-tile"]
        .into_iter()
        .find(|f| !cpuid.contains(*f) && !host_model.contains(*f))
        .expect("a feature this host lacks");
    eprintln!("kvm as found: QEMU's KVM adds {added:?} to the CPUID; {absent} it lacks");
    let dir = Scratch::new("kvm-as-found");
    let mut failures = Vec::new();
    let cases = added
        .iter()
        .map(|f| (f.as_str(), true))
        .chain([(absent, false)]);
    for (i, (feature, given)) in cases.enumerate() {
        let name = format!("vcp-test-{}-kvm-found-{i}", std::process::id());
        let cpu = format!(
            "<cpu mode='custom' match='exact' check='partial'><model fallback='forbid'>kvm64</model><feature policy='require' name='{feature}'/></cpu>"
        );
        let xml = guest(&name, &cpu);
        let file = dir.write(&format!("{i}.xml"), &xml);
        // Nothing handed in: this machine's CPUID, cpu_map and QEMU capability cache.
        let out = Cmd::new(&["check", "--format", "json"]).arg(s(&file)).run();
        let v: serde_json::Value = serde_json::from_str(&out.stdout)
            .unwrap_or_else(|e| panic!("{feature}: check's JSON: {e}: {}", out.stderr));
        let tool = finding_of(&v, &["cpu-incompatible", "not-compared"]);
        let warned = finding_of(&v, &["kvm-arch-capabilities"]).is_some();
        let got = try_start(&host, &dir, &name, &xml, || ());
        eprintln!("kvm as found: {feature}: libvirt {got:?}; tool {tool:?}, warned {warned}");
        let agree = match (&got, &tool) {
            (Start::Runs, None) => given && !warned,
            // QEMU's abort on MSR 0x10a comes after libvirt's comparison passed: the tool,
            // as found, warns of it (this machine's CPUID vendor, its QEMU's release).
            (Start::Refused(l), None) if msr_abort_of(&host, &name, l) => given && warned,
            (Start::Refused(l), Some((code, m))) => !given && agrees(l, code, m),
            _ => false,
        };
        if !agree {
            failures.push(format!("{feature}: libvirt {got:?}, tool {tool:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The generations whose KVM works on this machine and in CI: the host's libvirt 9.0 and the
/// trixie (11.3) and forky (12.8) roots (bullseye's QEMU 5.2 is left out: its KVM is not asked).
pub(crate) const KVM_GENERATIONS: [&str; 3] = ["bookworm", "trixie", "forky"];

/// The default number of custom-CPU documents started per generation besides every one the tool
/// refuses ([`kvm_start_budget`]): what keeps the three generations under two minutes in CI.
const KVM_STARTS: usize = 8;

/// How many custom-CPU documents of one generation are started besides the tool's refusals
/// (`VCP_KVM_STARTS`, a number or `all`; `all` also starts every other document with a `<cpu>`).
fn kvm_start_budget() -> Option<usize> {
    match std::env::var("VCP_KVM_STARTS").as_deref() {
        Ok("all") => None,
        Ok(n) => Some(
            n.parse()
                .unwrap_or_else(|_| panic!("VCP_KVM_STARTS={n}: a number or `all`")),
        ),
        Err(_) => Some(KVM_STARTS),
    }
}

/// Whether `text` is an x86_64 KVM domain (`<domain type='kvm'>`, arch x86_64 or unsaid) with a
/// `<cpu>`, and whether that CPU is custom with a model (what `src/validate/kvm.rs` judges).
fn kvm_x86_cpu(text: &str) -> Option<bool> {
    let doc = roxmltree::Document::parse(text).ok()?;
    let dom = doc.root_element();
    if !dom.has_tag_name("domain") || dom.attribute("type") != Some("kvm") {
        return None;
    }
    fn child<'a, 'i>(n: roxmltree::Node<'a, 'i>, tag: &str) -> Option<roxmltree::Node<'a, 'i>> {
        n.children().find(|c| c.is_element() && c.has_tag_name(tag))
    }
    let arch = child(dom, "os")
        .and_then(|os| child(os, "type"))
        .and_then(|t| t.attribute("arch"))
        .unwrap_or("x86_64");
    if arch != "x86_64" {
        return None;
    }
    let cpu = child(dom, "cpu")?;
    Some(cpu.attribute("mode").unwrap_or("custom") == "custom" && child(cpu, "model").is_some())
}

/// `text` with `<memory>` and `<currentMemory>` made 128 MiB when it has no NUMA cells (whose
/// sizes must add up to it): the guest is created paused and never touches it anyway.
fn small(text: &str) -> String {
    let Ok(doc) = roxmltree::Document::parse(text) else {
        return text.to_string();
    };
    if doc.descendants().any(|n| n.has_tag_name("cell")) {
        return text.to_string();
    }
    let edits = doc
        .root_element()
        .children()
        .filter(|n| n.has_tag_name("memory") || n.has_tag_name("currentMemory"))
        .map(|n| {
            let tag = n.tag_name().name();
            (n.range(), format!("<{tag} unit='MiB'>128</{tag}>"))
        })
        .collect();
    crate::producers::splice(text, edits)
}

/// What one document came to: libvirt's start against the tool's `cpu-incompatible` /
/// `kvm-check-full`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum KvmClass {
    /// Started by libvirt and not refused by the tool; or refused by both, for the same reason.
    Agree,
    /// Refused by the tool, started by libvirt: the hook would stop a guest libvirt starts.
    FalseRefusal,
    /// Refused by libvirt for its CPU check, not by the tool.
    FalseAccept,
    /// Refused by both, the tool's sentence not libvirt's reason.
    OtherReason,
    /// Aborted by QEMU on MSR 0x10a (`arch-capabilities` on AMD, QEMU before 10.1) after
    /// libvirt's checks passed, as the tool's `kvm-arch-capabilities` warned.
    MsrWarned,
    /// Aborted by QEMU on MSR 0x10a, and the tool did not warn; or started, and it warned.
    MsrMissed,
    /// Refused by libvirt for something else (not judged).
    NotJudged,
    /// Not started: outside the start sample, and not refused by the tool (in the sample only a
    /// custom CPU with a model is asked).
    NotStarted,
}

/// One generation's KVM oracle: each document (label, text) and its rewrites under the
/// producers' policies, checked with this libvirt's live facts and created paused.
fn kvm_generation(
    g: &Generation,
    docs: &[(String, String)],
    exe: &Path,
    tmp: &Path,
) -> (BTreeMap<KvmClass, usize>, String, Vec<String>) {
    let started_at = Instant::now();
    let (prefix, _sweep, dir) = generation_scratch(g, "kvmo", tmp);
    // Live facts: the judged CPU is this machine's, whatever machine captured the stored ones.
    let facts = Facts::live_kvm(g, &dir, qemu_version_option(exe));
    let empty = dir.join("empty.toml");
    std::fs::write(&empty, "version = 1\n").unwrap();
    let policies: Vec<(&str, PathBuf)> = POLICIES
        .iter()
        .map(|(n, t)| {
            let p = dir.join(format!("{n}.toml"));
            std::fs::write(&p, t).unwrap();
            (*n, p)
        })
        .collect();
    // The subjects: each document and each rewrite that differs from it, once per text.
    let mut seen = std::collections::HashSet::new();
    let mut subjects = Vec::new();
    for (k, (label, text)) in docs.iter().enumerate() {
        let file = dir.join(format!("doc-{k}.xml"));
        std::fs::write(&file, text).unwrap();
        if seen.insert(text.clone()) {
            subjects.push((label.clone(), text.clone()));
        }
        for (pname, policy) in &policies {
            let mut args = tool_args("rewrite", policy);
            args.extend(facts.args(text));
            args.push(s(&file));
            let out = tool(exe, &args);
            if out.code == 0
                && kvm_x86_cpu(&out.stdout).is_some()
                && seen.insert(out.stdout.clone())
            {
                subjects.push((format!("{label} ({pname})"), out.stdout));
            }
        }
    }
    let budget = kvm_start_budget();
    let seed = start_seed();
    let mut order: Vec<usize> = (0..subjects.len()).collect();
    order.sort_by_key(|&k| fnv1a(&format!("{seed}/{}", subjects[k].0)));
    let (mut counts, mut report, mut failures) = (BTreeMap::new(), String::new(), Vec::new());
    let (mut custom_started, mut starts) = (0, 0);
    for k in order {
        let (label, text) = &subjects[k];
        let custom = kvm_x86_cpu(text) == Some(true);
        // Only a custom CPU with a model can draw either error (src/validate/kvm.rs): in the
        // sample the others are not asked, nor started.
        if budget.is_some() && !custom {
            *counts.entry(KvmClass::NotStarted).or_insert(0) += 1;
            continue;
        }
        let file = dir.join(format!("subject-{k}.xml"));
        std::fs::write(&file, text).unwrap();
        let mut args = tool_args("check", &empty);
        args.extend(facts.args(text));
        args.push(s(&file));
        let out = tool(exe, &args);
        let v: serde_json::Value = serde_json::from_str(out.stdout.trim())
            .unwrap_or_else(|e| panic!("{label}: check's JSON: {e}: {}", out.stderr));
        let said = finding_of(&v, &["cpu-incompatible", "kvm-check-full"]);
        let warned = finding_of(&v, &["kvm-arch-capabilities"]).is_some();
        let start = said.is_some()
            || match budget {
                None => true,
                Some(b) => custom && custom_started < b,
            };
        if !start {
            *counts.entry(KvmClass::NotStarted).or_insert(0) += 1;
            continue;
        }
        if custom && said.is_none() {
            custom_started += 1;
        }
        starts += 1;
        let name = format!("{prefix}{k}");
        let startable = dir.join(format!("{name}.xml"));
        std::fs::write(&startable, small(&startable_form(&renamed(text, &name)))).unwrap();
        let c = g.virsh(&["create", "--paused", &s(&startable)]);
        let libvirt = if c.ok {
            let d = g.virsh(&["destroy", &name]);
            assert!(d.ok, "{}: virsh destroy {name}: {}", g.label, d.stderr);
            None
        } else {
            Some(reason(&c.stderr))
        };
        let cpu_refusal = libvirt.as_deref().filter(|l| {
            l.contains("the CPU is incompatible with host CPU")
                || l.contains("guest CPU doesn't match specification")
        });
        let class = match (&libvirt, cpu_refusal, &said) {
            (None, _, None) if warned => KvmClass::MsrMissed,
            (Some(l), None, None) if msr_abort(l) => {
                if warned {
                    KvmClass::MsrWarned
                } else {
                    KvmClass::MsrMissed
                }
            }
            (None, _, None) => KvmClass::Agree,
            (None, _, Some(_)) => KvmClass::FalseRefusal,
            (Some(_), Some(l), Some((code, m))) if agrees(l, code, m) => KvmClass::Agree,
            (Some(_), Some(_), Some(_)) => KvmClass::OtherReason,
            (Some(_), Some(_), None) => KvmClass::FalseAccept,
            (Some(_), None, _) => KvmClass::NotJudged,
        };
        *counts.entry(class).or_insert(0) += 1;
        let line = format!(
            "kvm-producers: {}: {class:?}: {label}: libvirt {}; tool {}",
            g.name,
            libvirt.as_deref().unwrap_or("started"),
            said.as_ref()
                .map_or("nothing".to_string(), |(c, m)| format!("{c}: {m}"))
        );
        if class != KvmClass::Agree || said.is_some() {
            writeln!(report, "{line}").unwrap();
        }
        if matches!(
            class,
            KvmClass::FalseRefusal
                | KvmClass::FalseAccept
                | KvmClass::OtherReason
                | KvmClass::MsrMissed
        ) {
            failures.push(line);
        }
    }
    writeln!(
        report,
        "kvm-producers: {}: {} documents, {} subjects with their rewrites, {starts} started (VCP_KVM_STARTS sample {budget:?}, VCP_PRODUCERS_SEED={seed}) [{:.1?}]: {counts:?}",
        g.label,
        docs.len(),
        subjects.len(),
        started_at.elapsed()
    )
    .unwrap();
    (counts, report, failures)
}

/// Every `<domain type='kvm'>` x86_64 document with a `<cpu>` of `tests/data/producers` (those
/// made for each generation) and of `../shared/corpus` (all generations), and their rewrites under
/// the producers' policies: `check`'s `cpu-incompatible` / `kvm-check-full` with each libvirt's
/// live facts against `virsh create --paused` on that libvirt under KVM. Every document the tool
/// refuses is started; of the others a sample of custom CPUs ([`kvm_start_budget`], in the
/// producers' order of `VCP_PRODUCERS_SEED`; `VCP_KVM_STARTS=all` asks and starts every one). Fails on a false refusal, a false accept, or a
/// refusal for another reason than libvirt's.
#[test]
#[ignore = "needs the libvirt generations and a usable /dev/kvm: .ci/run builds and starts them"]
fn producers_kvm_against_virsh_create() {
    if !crate::libvirt::kvm_or_skip("kvm-producers") {
        return;
    }
    let started = Instant::now();
    let manifest = manifest();
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    let corpus: Vec<(String, String)> = crate::harness::corpus()
        .map(|c| c.join("virt-manager/domains"))
        .and_then(|d| std::fs::read_dir(d).ok())
        .into_iter()
        .flatten()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "xml"))
        .map(|p| {
            let label = format!("corpus/{}", p.file_name().unwrap().to_string_lossy());
            (label, read(&p))
        })
        .filter(|(_, t)| kvm_x86_cpu(t).is_some())
        .collect();
    match crate::harness::corpus() {
        Some(_) => eprintln!(
            "kvm-producers: {} KVM documents of ../shared/corpus judged on each generation",
            corpus.len()
        ),
        None => eprintln!(
            "kvm-producers: ../shared/corpus is absent: only tests/data/producers is judged"
        ),
    }
    let tmp = Scratch::new("kvm-producers");
    let exe = tmp.0.join("virt-cpu-policy");
    std::fs::copy(bin(), &exe).expect("copy the binary under test");
    let gens: Vec<Generation> = generations()
        .into_iter()
        .filter(|g| KVM_GENERATIONS.contains(&g.name.as_str()))
        .collect();
    assert!(!gens.is_empty(), "no KVM generation answers");
    let runs = in_parallel(&gens, |g| {
        let mut docs: Vec<(String, String)> = manifest
            .iter()
            .filter(|d| d.versions.contains(&g.version))
            .map(|d| (d.file.clone(), read(&root().join(DATA).join(&d.file))))
            .filter(|(_, t)| kvm_x86_cpu(t).is_some())
            .collect();
        docs.extend(corpus.iter().cloned());
        kvm_generation(g, &docs, &exe, &tmp.0)
    });
    let mut failures = Vec::new();
    for (_, report, f) in &runs {
        eprint!("{report}");
        failures.extend(f.iter().cloned());
    }
    eprintln!(
        "kvm-producers: {} generations [{:.1?}]",
        runs.len(),
        started.elapsed()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The guest CPUs whose forbidden features the next test asks each libvirt about (label,
/// `<cpu>`): a feature of the host-model CPU's model (`lm`, `sse2`), one of the host's CPUID
/// that KVM may not give (`avx512f`), two at once, under host-model and a custom `kvm64`.
/// `arch-capabilities` is disabled where the host-model CPU would carry it (QEMU before 10.1
/// aborts it on AMD, which is not this test's question).
const FORBIDDING: [(&str, &str); 6] = [
    (
        "host-model-forbid-lm",
        "<cpu mode='host-model'><feature policy='disable' name='arch-capabilities'/><feature policy='forbid' name='lm'/></cpu>",
    ),
    (
        "host-model-forbid-avx512f",
        "<cpu mode='host-model'><feature policy='disable' name='arch-capabilities'/><feature policy='forbid' name='avx512f'/></cpu>",
    ),
    (
        "host-model-forbid-sse2-avx512f",
        "<cpu mode='host-model'><feature policy='disable' name='arch-capabilities'/><feature policy='forbid' name='sse2'/><feature policy='forbid' name='avx512f'/></cpu>",
    ),
    (
        "custom-forbid-avx512f",
        "<cpu mode='custom' match='exact'><model>kvm64</model><feature policy='forbid' name='avx512f'/></cpu>",
    ),
    (
        "custom-forbid-avx512f-lm",
        "<cpu mode='custom' match='exact'><model>kvm64</model><feature policy='forbid' name='avx512f'/><feature policy='forbid' name='lm'/></cpu>",
    ),
    (
        "custom-forbid-sse2",
        "<cpu mode='custom' match='exact'><model>kvm64</model><feature policy='forbid' name='sse2'/></cpu>",
    ),
];

/// A forbidden feature the host has is refused at start in one of two sets of libvirt's words,
/// and the tool must say the same ones: libvirt 9.0 and later look it up first in the list of
/// their "full" host CPU ("Host CPU provides forbidden feature 'lm'"), and leave one the host
/// CPU has only through its model to the comparison ("Host CPU provides forbidden features:
/// avx512f"), which is libvirt 7.0's only path. Which applies depends on how each libvirt's
/// cpu_map decodes this machine's CPU (on an AMD EPYC: 9.0 the first for `avx512f`, 11.3 and 12.8
/// the second, their `EPYC-Genoa` holding it), so each generation is asked live, with its own
/// facts. A CPU libvirt starts is not refused by the tool.
#[test]
#[ignore = "needs the libvirt generations and a usable /dev/kvm: .ci/run builds and starts them"]
fn forbidden_features_are_refused_in_each_libvirts_words() {
    if !crate::libvirt::kvm_or_skip("forbidden features") {
        return;
    }
    let tmp = Scratch::new("kvm-forbid");
    let exe = PathBuf::from(bin());
    let empty = tmp.write("empty.toml", "version = 1\n");
    let (mut refused, mut started, mut failures) = (0, 0, Vec::new());
    for g in generations() {
        let (prefix, _sweep, dir) = generation_scratch(&g, "forbid", tmp.path("").as_path());
        let facts = Facts::live_kvm(&g, &dir, qemu_version_option(&exe));
        let scratch = Scratch::new(&format!("kvm-forbid-{}", g.name));
        for (label, cpu) in FORBIDDING {
            let name = format!("{prefix}{label}");
            let xml = guest(&name, cpu);
            let out = Cmd::new(&["check", "--format", "json", "--policy", &s(&empty)])
                .args(&facts.args(&xml))
                .stdin(xml.clone())
                .run();
            let json: serde_json::Value = serde_json::from_str(&out.stdout)
                .unwrap_or_else(|e| panic!("{} {label}: {e}: {}", g.label, out.stderr));
            let said = finding_of(&json, &["cpu-incompatible"]);
            match try_start(&g, &scratch, &name, &xml, || {}) {
                Start::Runs => {
                    started += 1;
                    if let Some((_, m)) = said {
                        failures.push(format!("{} {label}: libvirt starts it; tool: {m}", g.label));
                    }
                }
                Start::Refused(line) => {
                    refused += 1;
                    let words = line
                        .split_once("the CPU is incompatible with host CPU: ")
                        .map(|(_, w)| w.trim().to_string());
                    let tool = said.as_ref().map(|(_, m)| {
                        m.trim_start_matches("the CPU is incompatible with host CPU: ")
                            .split(" (")
                            .next()
                            .unwrap_or_default()
                            .to_string()
                    });
                    if words.is_none() || words != tool {
                        failures.push(format!(
                            "{} {label}: libvirt: {line}; tool: {tool:?}",
                            g.label
                        ));
                    }
                }
            }
        }
    }
    eprintln!(
        "forbidden features: {refused} refused by libvirt, {started} started, {} disagree",
        failures.len()
    );
    assert!(
        refused > 0,
        "libvirt refused no forbidden feature: nothing was compared"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
