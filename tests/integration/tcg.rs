//! What QEMU's TCG refuses at start, asked of every libvirt generation of the rig
//! ([`generations`]: libvirt 7.0 / QEMU 5.2, 9.0 / 7.2 on the host, 11.3 / 10.0, 12.8 / 11.1):
//! the tool's judgement of a guest against a real `virsh define` + `virsh start`, with the
//! agreement counted per generation.
//!
//! * vCPUs whose APIC IDs reach 255 (`tcg-vcpu-limit`, `tcg-x2apic`): with and without x2APIC,
//!   topologies whose counts are not powers of two, and the hot-plug of a vCPU that needs x2APIC
//!   (QEMU 10.0 aborts the running guest).
//! * The guest CPU against what TCG emulates (`tcg-cpu-missing`, `tcg-check-full`): custom models
//!   with `check='partial'`, `check='full'`, listed features, host-model.
//! * The golden cases with an `oracle-start` file: their input and their `expected-stdout`
//!   defined and started on the generation of the libvirt their `args` name
//!   (`--libvirt-version`), as the file says.
//!
//! Guests are named `vcp-test-<pid>-…`, diskless, 64 MiB, and destroyed and undefined after each
//! try (also when an assertion fails).

use crate::harness::{Cmd, Generation, Oracle, Scratch, generation_facts, generations, s};
use std::collections::BTreeSet;

/// `Running hypervisor: QEMU 10.0.13` of `virsh version`: the oracle's QEMU.
pub fn qemu_version(o: &Oracle) -> String {
    let v = o.virsh(&["version"]);
    v.stdout
        .lines()
        .find_map(|l| l.strip_prefix("Running hypervisor: QEMU "))
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|| {
            panic!(
                "{}: no QEMU version in virsh version: {}",
                o.label, v.stdout
            )
        })
}

/// What the oracle's libvirt says of a guest document.
#[derive(Debug)]
pub(crate) enum Start {
    /// Defined and started (then destroyed).
    Runs,
    /// Refused at define or start: libvirt's last line.
    Refused(String),
}

/// Define `xml` (whose `<name>` is `name`) on `o`, start it, run `after` while it runs, then
/// destroy and undefine it whatever happened.
pub(crate) fn try_start(
    o: &Oracle,
    dir: &Scratch,
    name: &str,
    xml: &str,
    after: impl FnOnce(),
) -> Start {
    let file = dir.write(&format!("{name}.xml"), xml);
    let d = o.virsh(&["define", &s(&file)]);
    let result = if !d.ok {
        Start::Refused(last_line(&d.stderr))
    } else {
        let st = o.virsh(&["start", name]);
        if st.ok {
            after();
            Start::Runs
        } else {
            Start::Refused(last_line(&st.stderr))
        }
    };
    let _ = o.virsh(&["destroy", name]);
    let _ = o.virsh(&["undefine", name]);
    result
}

/// The last line of libvirt's error that is not QEMU's hint ("Try x2apic=on in -cpu.").
fn last_line(s: &str) -> String {
    s.lines()
        .rfind(|l| !l.trim().is_empty() && !l.starts_with("Try "))
        .unwrap_or("")
        .trim()
        .to_string()
}

/// A diskless TCG guest: `vcpu` is the `<vcpu>` element, `cpu` the `<cpu>` element (or ""),
/// `machine` the machine type; above 255 vCPUs it has what libvirt 9.0 asks for (an Intel IOMMU
/// in eim mode and the split I/O APIC).
fn guest(name: &str, machine: &str, vcpu: &str, cpu: &str, big: bool) -> String {
    let (ioapic, iommu) = if big {
        (
            "<ioapic driver='qemu'/>",
            "<iommu model='intel'><driver intremap='on' eim='on'/></iommu>",
        )
    } else {
        ("", "")
    };
    format!(
        "<domain type='qemu'>\n  <name>{name}</name>\n  <memory unit='MiB'>64</memory>\n  {vcpu}\n  <os>\n    <type arch='x86_64' machine='{machine}'>hvm</type>\n  </os>\n  <features>\n    <acpi/>\n    <apic/>\n    {ioapic}\n  </features>\n  {cpu}\n  <devices>\n    {iommu}\n    <console type='pty'/>\n    <memballoon model='none'/>\n  </devices>\n</domain>\n"
    )
}

/// The error codes of `check --format json` of `file` with this oracle's facts: its libvirt and
/// QEMU versions, its cpu_map and the TCG domcapabilities `domcaps`.
fn tool_errors(
    o: &Oracle,
    qemu: &str,
    dir: &Scratch,
    file: &std::path::Path,
    domcaps: &std::path::Path,
) -> (BTreeSet<String>, serde_json::Value) {
    let policy = dir.write("empty.toml", "version = 1\n");
    let out = Cmd::new(&["check", "--format", "json", "--no-qemu-caps-cache"])
        .args(&o.tool_args())
        .args(&[
            "--qemu-version",
            qemu,
            "--caps",
            &s(domcaps),
            "--policy",
            &s(&policy),
        ])
        .arg(s(file))
        .run();
    let v: serde_json::Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("{}: check JSON: {e}\n{}{}", o.label, out.stdout, out.stderr));
    let codes = v["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["severity"] == "error")
        .filter_map(|f| f["code"].as_str().map(str::to_string))
        .collect();
    (codes, v)
}

/// The features named after `key` ("Host CPU does not provide required features: a, b", "missing
/// features: a,b") up to the end of that clause, for comparison.
fn named_features(line: &str, key: &str) -> BTreeSet<String> {
    let Some(rest) = line.split(key).nth(1) else {
        return BTreeSet::new();
    };
    let clause = rest.split(" (").next().unwrap_or(rest);
    let clause = clause.split(", missing").next().unwrap_or(clause);
    clause
        .split(',')
        .map(|f| f.trim().trim_end_matches(['"', '.']).to_string())
        .filter(|f| !f.is_empty())
        .collect()
}

/// The generations that answer ([`generations`]: an absent one is named on stderr, and under
/// `VCP_REQUIRE_GENERATIONS` a failure); at least one.
fn answering() -> Vec<Generation> {
    let all = generations();
    assert!(!all.is_empty(), "no libvirt generation answers");
    all
}

/// `virsh domcapabilities --virttype qemu --machine MACHINE` of `o`: the text, and the file in
/// `dir` that holds it (the tool's `--caps`).
fn tcg_domcaps(o: &Oracle, dir: &Scratch, machine: &str) -> (String, std::path::PathBuf) {
    let dc = o.virsh(&[
        "domcapabilities",
        "--virttype",
        "qemu",
        "--machine",
        machine,
    ]);
    assert!(dc.ok, "{}: domcapabilities: {}", o.label, dc.stderr);
    let file = dir.write("domcaps.xml", &dc.stdout);
    (dc.stdout, file)
}

/// The models to try: a fixed set covering usable and unusable ones on both generations (every
/// model of the domcapabilities with `VCP_TCG_ALL_MODELS=1`).
fn models(domcaps: &str) -> Vec<String> {
    let doc = roxmltree::Document::parse(domcaps).expect("domcapabilities parse");
    let listed: Vec<String> = doc
        .descendants()
        .filter(|n| n.has_tag_name("model") && n.attribute("usable").is_some())
        .filter_map(|n| n.text().map(str::to_string))
        .filter(|m| !m.contains("-v"))
        .collect();
    if std::env::var("VCP_TCG_ALL_MODELS").as_deref() == Ok("1") {
        return listed;
    }
    let chosen = [
        "qemu64",
        "pentium",
        "Penryn",
        "Nehalem",
        "SandyBridge",
        "Haswell",
        "EPYC",
        "Opteron_G3",
    ];
    listed
        .into_iter()
        .filter(|m| chosen.contains(&m.as_str()))
        .collect()
}

#[test]
#[ignore = "needs a running libvirtd (the host's, and the generation roots'): .ci/run starts them"]
fn tcg_cpu_checks_agree_with_libvirt_at_start() {
    let (mut disagree, mut figures) = (Vec::new(), Vec::new());
    for g in &answering() {
        let o: &Oracle = g;
        let qemu = qemu_version(o);
        let dir = Scratch::new("tcg-cpu");
        let (dc, domcaps) = tcg_domcaps(o, &dir, "pc");
        let cpu = |mode: &str, check: &str, model: &str, features: &str| {
            let model = if model.is_empty() {
                String::new()
            } else {
                format!("<model fallback='forbid'>{model}</model>")
            };
            format!("<cpu mode='{mode}' check='{check}'>{model}{features}</cpu>")
        };
        let req = |f: &str, p: &str| format!("<feature policy='{p}' name='{f}'/>");
        let mut tries: Vec<(String, String)> = models(&dc)
            .into_iter()
            .map(|m| (format!("{m} partial"), cpu("custom", "partial", &m, "")))
            .collect();
        tries.extend([
            ("Nehalem full".into(), cpu("custom", "full", "Nehalem", "")),
            (
                "Nehalem full + hypervisor".into(),
                cpu("custom", "full", "Nehalem", &req("hypervisor", "require")),
            ),
            (
                "SandyBridge full + hypervisor".into(),
                cpu(
                    "custom",
                    "full",
                    "SandyBridge",
                    &req("hypervisor", "require"),
                ),
            ),
            (
                "Nehalem partial + avx512f".into(),
                cpu("custom", "partial", "Nehalem", &req("avx512f", "require")),
            ),
            (
                "Nehalem partial, avx512f forced".into(),
                cpu("custom", "partial", "Nehalem", &req("avx512f", "force")),
            ),
            (
                "Nehalem partial + vme".into(),
                cpu("custom", "partial", "Nehalem", &req("vme", "require")),
            ),
            (
                "Nehalem partial + x2apic".into(),
                cpu("custom", "partial", "Nehalem", &req("x2apic", "require")),
            ),
            (
                "Nehalem partial, sse4.2 forbidden".into(),
                cpu("custom", "partial", "Nehalem", &req("sse4.2", "forbid")),
            ),
            (
                "SandyBridge partial, x2apic and tsc-deadline disabled".into(),
                cpu(
                    "custom",
                    "partial",
                    "SandyBridge",
                    &(req("x2apic", "disable") + &req("tsc-deadline", "disable")),
                ),
            ),
            (
                "SandyBridge none".into(),
                cpu("custom", "none", "SandyBridge", ""),
            ),
            ("host-model".into(), cpu("host-model", "partial", "", "")),
            (
                "host-model + avx512f".into(),
                cpu("host-model", "partial", "", &req("avx512f", "require")),
            ),
        ]);
        let (mut agree, mut refused) = (0, 0);
        for (i, (what, cpu)) in tries.iter().enumerate() {
            let name = format!("vcp-test-{}-tcgcpu{i}", std::process::id());
            let xml = guest(&name, "pc", "<vcpu>1</vcpu>", cpu, false);
            let file = dir.write("g.xml", &xml);
            let (codes, report) = tool_errors(o, &qemu, &dir, &file, &domcaps);
            let tool_refuses = !codes.is_empty();
            let libvirt = try_start(o, &dir, &name, &xml, || ());
            match (&libvirt, tool_refuses) {
                (Start::Runs, false) => agree += 1,
                (Start::Refused(line), true) => {
                    agree += 1;
                    refused += 1;
                    let tool_line: String = report["findings"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|f| f["message"].as_str())
                        .collect::<Vec<_>>()
                        .join(" | ");
                    for key in [
                        "required features: ",
                        "forbidden features: ",
                        "missing features: ",
                    ] {
                        let (l, t) = (named_features(line, key), named_features(&tool_line, key));
                        if l != t {
                            eprintln!(
                                "tcg: {}: {what}: libvirt names {key}{l:?}, the tool {t:?}",
                                o.label
                            );
                        }
                    }
                }
                _ => disagree.push(format!(
                    "{}: {what}: libvirt {libvirt:?}, the tool's errors {codes:?}\n{report}",
                    o.label
                )),
            }
        }
        eprintln!(
            "tcg: {} (QEMU {qemu}): {agree} of {} TCG CPUs judged as libvirt starts them ({refused} refused alike)",
            o.label,
            tries.len()
        );
        figures.push(format!("{}: {agree}/{}", g.name, tries.len()));
    }
    agreement("CPU checks", &figures, &disagree);
}

/// Prints the per-generation agreement (`bullseye: 20/20, ...`) of `what`, then fails with every
/// disagreement.
fn agreement(what: &str, figures: &[String], disagree: &[String]) {
    eprintln!(
        "tcg: {what} agreeing with virsh start: {}",
        figures.join(", ")
    );
    assert!(disagree.is_empty(), "{}", disagree.join("\n\n"));
}

#[test]
#[ignore = "needs a running libvirtd (the host's, and the generation roots'): .ci/run starts them"]
fn tcg_apic_ids_agree_with_libvirt_at_start() {
    let x2apic = "<feature policy='require' name='x2apic'/>";
    let (mut disagree, mut figures) = (Vec::new(), Vec::new());
    for g in &answering() {
        let o: &Oracle = g;
        let qemu = qemu_version(o);
        let dir = Scratch::new("tcg-apic");
        let (_, domcaps) = tcg_domcaps(o, &dir, "q35");
        let sparse = "<topology sockets='2' cores='129' threads='1'/>";
        let tries: Vec<(&str, String, String, bool)> = vec![
            ("288 vCPUs, 2 online, qemu64", "<vcpu current='2'>288</vcpu>".into(), "<cpu mode='custom'><model>qemu64</model></cpu>".into(), true),
            ("288 vCPUs, 2 online, qemu64 + x2apic", "<vcpu current='2'>288</vcpu>".into(), format!("<cpu mode='custom'><model>qemu64</model>{x2apic}</cpu>"), true),
            ("255 vCPUs as 85 sockets of 3 cores", "<vcpu>255</vcpu>".into(), "<cpu mode='custom'><model>qemu64</model><topology sockets='85' cores='3' threads='1'/></cpu>".into(), false),
            ("255 vCPUs, 2 online, 85 sockets of 3 cores, + x2apic", "<vcpu current='2'>255</vcpu>".into(), format!("<cpu mode='custom'><model>qemu64</model><topology sockets='85' cores='3' threads='1'/>{x2apic}</cpu>"), false),
            ("255 vCPUs, 2 online, no topology", "<vcpu current='2'>255</vcpu>".into(), "<cpu mode='custom'><model>qemu64</model></cpu>".into(), false),
            ("258 vCPUs, 130 online, 2 sockets of 129, Nehalem", "<vcpu current='130'>258</vcpu>".into(), format!("<cpu mode='custom'><model>Nehalem</model>{sparse}</cpu>"), true),
            ("258 vCPUs, 130 online, 2 sockets of 129, host-model", "<vcpu current='130'>258</vcpu>".into(), format!("<cpu mode='host-model'>{sparse}</cpu>"), true),
            ("258 vCPUs, 130 online, 2 sockets of 129, maximum", "<vcpu current='130'>258</vcpu>".into(), format!("<cpu mode='maximum'>{sparse}</cpu>"), true),
        ];
        let mut agreed = 0;
        for (i, (what, vcpu, cpu, big)) in tries.iter().enumerate() {
            let name = format!("vcp-test-{}-apic{i}", std::process::id());
            let xml = guest(&name, "q35", vcpu, cpu, *big);
            let file = dir.write("g.xml", &xml);
            let (codes, report) = tool_errors(o, &qemu, &dir, &file, &domcaps);
            let libvirt = try_start(o, &dir, &name, &xml, || ());
            let agrees = matches!(
                (&libvirt, codes.is_empty()),
                (Start::Runs, true) | (Start::Refused(_), false)
            );
            eprintln!(
                "tcg: {} (QEMU {qemu}): {what}: libvirt {libvirt:?}; the tool {}",
                o.label,
                if codes.is_empty() {
                    "accepts it".to_string()
                } else {
                    format!("refuses it {codes:?}")
                }
            );
            agreed += usize::from(agrees);
            if !agrees {
                disagree.push(format!(
                    "{}: {what}: libvirt {libvirt:?}, the tool {codes:?}\n{report}",
                    o.label
                ));
            }
        }
        figures.push(format!("{}: {agreed}/{}", g.name, tries.len()));
    }
    agreement("APIC-ID verdicts", &figures, &disagree);
}

/// The guest the tool calls a hot-plug away from failing does fail there: QEMU 9.0 and later
/// start a TCG guest whose maximum needs x2APIC while the online vCPUs do not, and hot-plugging
/// the first vCPU with an APIC ID of 255 or more stops it; with x2APIC the same hot-plug works.
/// Asked of every generation whose QEMU is 9.0 or later (trixie's 10.0, forky's 11.1).
#[test]
#[ignore = "needs a running libvirtd (the host's, and the generation roots'): .ci/run starts them"]
fn tcg_hotplug_past_apic_id_254_needs_x2apic() {
    let all = answering();
    let modern: Vec<&Generation> = all
        .iter()
        .filter(|g| {
            let v = qemu_version(g);
            v.split('.').next().and_then(|m| m.parse::<u32>().ok()) >= Some(9)
        })
        .collect();
    assert!(
        !modern.is_empty(),
        "no generation with QEMU 9.0 or later answers (trixie, forky)"
    );
    for o in modern {
        hotplug_on(o);
    }
}

/// [`tcg_hotplug_past_apic_id_254_needs_x2apic`] on one generation.
fn hotplug_on(o: &Oracle) {
    let qemu = qemu_version(o);
    let dir = Scratch::new("tcg-hotplug");
    let (_, domcaps) = tcg_domcaps(o, &dir, "q35");
    // 2 sockets of 129 cores: vCPU 129 is socket 1, APIC ID 256.
    let vcpus: String = (0..258)
        .map(|i| match i {
            0 => "<vcpu id='0' enabled='yes' hotpluggable='no'/>".to_string(),
            1 => "<vcpu id='1' enabled='yes' hotpluggable='yes'/>".to_string(),
            _ => format!("<vcpu id='{i}' enabled='no' hotpluggable='yes'/>"),
        })
        .collect();
    for with_x2apic in [false, true] {
        let name = format!("vcp-test-{}-hotplug", std::process::id());
        let feature = if with_x2apic {
            "<feature policy='require' name='x2apic'/>"
        } else {
            ""
        };
        let cpu = format!(
            "<cpu mode='custom'><model>qemu64</model><topology sockets='2' cores='129' threads='1'/>{feature}</cpu>"
        );
        let xml = guest(
            &name,
            "q35",
            &format!("<vcpu current='2'>258</vcpu><vcpus>{vcpus}</vcpus>"),
            &cpu,
            true,
        );
        let file = dir.write("g.xml", &xml);
        // The guest starts (no error), and the tool warns of the hot-plug.
        let (codes, report) = tool_errors(o, &qemu, &dir, &file, &domcaps);
        assert!(codes.is_empty(), "{report}");
        let warned = report["findings"].as_array().unwrap().iter().any(|f| {
            f["code"] == "tcg-x2apic"
                && f["severity"] == "warning"
                && f["message"]
                    .as_str()
                    .unwrap()
                    .contains("hot-plugging vCPU 129")
        });
        assert_eq!(warned, !with_x2apic, "{report}");
        let mut state = String::new();
        let mut plugged = None;
        let started = try_start(o, &dir, &name, &xml, || {
            let r = o.virsh(&["setvcpu", &name, "129", "--enable", "--live"]);
            plugged = Some(if r.ok {
                Ok(())
            } else {
                Err(last_line(&r.stderr))
            });
            // QEMU aborts moments after the hot-plug: watch the state for a few seconds.
            for _ in 0..20 {
                state = o.virsh(&["domstate", &name]).stdout.trim().to_string();
                if state != "running" {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(250));
            }
        });
        assert!(matches!(started, Start::Runs), "{}: {started:?}", o.label);
        eprintln!(
            "tcg: {} (QEMU {qemu}): 258 vCPUs (2 online) {} x2apic: hot-plugging vCPU 129 (APIC ID 256): {plugged:?}, the guest then {state:?}; the tool {}",
            o.label,
            if with_x2apic { "with" } else { "without" },
            if with_x2apic {
                "accepts it"
            } else {
                "warns tcg-x2apic (a hot-plug away from failing)"
            }
        );
        // Without x2APIC the hot-plug fails: QEMU 10.0 aborts the guest, 11.1 refuses the vCPU
        // and keeps running; with it the vCPU comes and the guest runs.
        let hotplug_worked = plugged == Some(Ok(())) && state == "running";
        assert_eq!(
            hotplug_worked, with_x2apic,
            "{}: hot-plug {plugged:?}, state {state}",
            o.label
        );
    }
}

/// `--libvirt-version`'s (major, minor) in a golden case's `args`.
fn case_libvirt(case: &crate::golden::Case) -> Option<(u32, u32)> {
    let args = case.args()?;
    let i = args.iter().position(|a| a == "--libvirt-version")?;
    let mut v = args.get(i + 1)?.split('.').map(|p| p.parse().unwrap_or(0));
    Some((v.next()?, v.next().unwrap_or(0)))
}

/// Every golden case with an `oracle-start` file, on the libvirt its `args` name: each line is
/// `input starts`, `input refused: TEXT` (libvirt's error contains TEXT) or `output starts` (its
/// `expected-stdout`). So a rewrite is shown to write what starts where its input started, and a
/// refusal of the tool to be one libvirt makes too. A KVM guest (`<domain type='kvm'>`) is said
/// SKIP without a usable `/dev/kvm` (a failure with `VCP_REQUIRE_KVM=1`).
#[test]
#[ignore = "needs a running libvirtd (the host's, and the generation roots'): .ci/run starts them"]
fn golden_cases_start_as_their_oracle_start_file_says() {
    let all = generations();
    let dir = Scratch::new("golden-start");
    let mut failures = Vec::new();
    let (mut ran, mut skipped) = (0, 0);
    for case in crate::golden::cases() {
        let Ok(spec) = std::fs::read_to_string(case.dir.join("oracle-start")) else {
            continue;
        };
        let release = case_libvirt(&case).unwrap_or_else(|| {
            panic!(
                "case {}: an oracle-start case names --libvirt-version",
                case.name
            )
        });
        let Some(o) = all.iter().find(|o| o.major_minor() == release) else {
            // generations() has said which generation is absent, and why (SKIP); under CI
            // (VCP_REQUIRE_GENERATIONS) an absent one is a failure there.
            eprintln!(
                "tcg: SKIP case {}: no libvirt {}.{} answers",
                case.name, release.0, release.1
            );
            skipped += 1;
            continue;
        };
        for line in spec.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let (which, want) = line
                .split_once(' ')
                .unwrap_or_else(|| panic!("case {}: oracle-start line `{line}`", case.name));
            let file = match which {
                "input" => case.dir.join("input.xml"),
                "output" => case.dir.join("expected-stdout"),
                _ => panic!("case {}: oracle-start line `{line}`", case.name),
            };
            let text = std::fs::read_to_string(&file).unwrap();
            let kvm = roxmltree::Document::parse(&text)
                .is_ok_and(|d| d.root_element().attribute("type") == Some("kvm"));
            if kvm && !crate::libvirt::kvm_or_skip(&format!("tcg: case {} {which}", case.name)) {
                skipped += 1;
                continue;
            }
            // `start-`: libvirt.rs defines the same cases by their names at the same time, on
            // the same daemons (a test binary's tests run in parallel).
            let name = format!(
                "vcp-test-{}-start-{}",
                std::process::id(),
                case.name.replace('.', "-")
            );
            let (xml, _) = crate::libvirt::for_define(&text, &name, None, o);
            let got = try_start(o, &dir, &name, &xml, || ());
            ran += 1;
            let ok = match (&got, want) {
                (Start::Runs, "starts") => true,
                (Start::Refused(l), w) => w
                    .strip_prefix("refused: ")
                    .is_some_and(|t| l.contains(t.trim())),
                _ => false,
            };
            eprintln!("tcg: {}: case {}: {which}: {got:?}", o.label, case.name);
            if !ok {
                failures.push(format!(
                    "{}: case {}: {which} should be `{want}`, libvirt: {got:?}",
                    o.label, case.name
                ));
            }
        }
    }
    eprintln!(
        "tcg: {ran} oracle-start lines checked against virsh start ({skipped} case(s) skipped)"
    );
    assert!(ran > 0, "no oracle-start case ran");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A host's domcapabilities are per virt type: a `type='qemu'` guest is judged with the TCG ones
/// and a `type='kvm'` guest with KVM's, whatever order the files come in. On the bookworm
/// generation's host (libvirt 9.0 / QEMU 7.2, `tests/data/generations/bookworm`) Nehalem is
/// `usable='yes'` for TCG and `usable='no'` for KVM (its KVM lacks `pni`).
#[test]
fn domcapabilities_are_told_apart_by_virt_type() {
    let facts = generation_facts("bookworm");
    let (kvm, qemu) = (
        s(&facts.join("domcapabilities-x86_64-q35-kvm.xml")),
        s(&facts.join("domcapabilities-x86_64-q35-qemu.xml")),
    );
    let dir = Scratch::new("tcg-domcaps");
    let policy = dir.write("empty.toml", "version = 1\n");
    for vt in ["qemu", "kvm"] {
        let cpu = "<cpu mode='custom' match='exact' check='partial'><model fallback='forbid'>Nehalem</model></cpu>";
        let xml = guest("vcp-test-domcaps", "q35", "<vcpu>1</vcpu>", cpu, false).replacen(
            "type='qemu'",
            &format!("type='{vt}'"),
            1,
        );
        let file = dir.write("g.xml", xml);
        for order in [[&kvm, &qemu], [&qemu, &kvm]] {
            let out = Cmd::new(&["check", "--format", "json", "--no-qemu-caps-cache"])
                .args(&["--libvirt-version", "9.0.0", "--qemu-version", "7.2.22"])
                .args(&[
                    "--caps",
                    order[0],
                    "--caps",
                    order[1],
                    "--policy",
                    &s(&policy),
                ])
                .arg(s(&file))
                .run();
            let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
            let codes: Vec<&str> = v["findings"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|f| f["code"].as_str())
                .collect();
            let unusable = v["findings"]
                .as_array()
                .unwrap()
                .iter()
                .find(|f| f["code"] == "cpu-model-unusable");
            if vt == "qemu" {
                assert!(codes.is_empty(), "TCG Nehalem runs here: {v}");
            } else {
                let f = unusable.unwrap_or_else(|| panic!("KVM's Nehalem is usable='no': {v}"));
                assert!(
                    f["message"].as_str().unwrap().contains("q35-kvm.xml"),
                    "{f}"
                );
                assert!(!codes.iter().any(|c| c.starts_with("tcg-")), "{v}");
            }
        }
    }
}

/// `rewrite --policy POLICY FILE` given generation `g`'s own captured facts (its versions,
/// cpu_map, capabilities and TCG domcapabilities of a pc guest), and a reader of its version
/// file's fields (`libvirt`, `qemu`).
fn rewrite_with_facts_of(
    g: &str,
    policy: &std::path::Path,
    file: &std::path::Path,
) -> (crate::harness::Output, impl Fn(&str) -> String) {
    let facts = generation_facts(g);
    let version = std::fs::read_to_string(facts.join("version")).unwrap();
    let g = g.to_string();
    let field = move |k: &str| {
        version
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{k} ")))
            .unwrap_or_else(|| panic!("{g}: no {k} in its version file"))
            .to_string()
    };
    let out = Cmd::new(&["rewrite", "--no-qemu-caps-cache"])
        .args(&["--libvirt-version", &field("libvirt")])
        .args(&["--qemu-version", &field("qemu")])
        .args(&["--cpu-map", &s(&facts.join("cpu_map"))])
        .args(&["--caps", &s(&facts.join("capabilities.xml"))])
        .args(&[
            "--caps",
            &s(&facts.join("domcapabilities-x86_64-pc-qemu.xml")),
        ])
        .args(&["--policy", &s(policy)])
        .arg(s(file))
        .run();
    (out, field)
}

/// A `cpu.min_level` the CPU as written reaches, but this QEMU's TCG does not emulate
/// (libvirt's default `check='none'` for a custom CPU: QEMU drops what its TCG lacks and the
/// guest starts below the level): a `host-level` warning naming exactly what TCG lacks, from
/// each generation's own captured facts (its TCG domcapabilities, cpu_map and versions). QEMU
/// 5.2 (bullseye) has no AVX, AVX2, F16C or FMA under TCG; 7.2 and later emulate all of
/// x86-64-v3. The guest proof (tests/guest/run in the bullseye root) boots the result and
/// finds exactly those missing from /proc/cpuinfo.
#[test]
fn min_level_beyond_what_tcg_emulates_is_a_host_level_warning() {
    let dir = Scratch::new("tcg-level");
    let policy = dir.write(
        "v3.toml",
        "version = 1\n\n[[rule]]\nname = \"v3\"\nmatch = { arch = \"x86_64\" }\ncpu.min_level = \"x86-64-v3\"\n",
    );
    let file = dir.write(
        "g.xml",
        guest(
            "vcp-test-level",
            "pc",
            "<vcpu>1</vcpu>",
            "<cpu><topology sockets='1' cores='1' threads='1'/></cpu>",
            false,
        ),
    );
    for (g, lacks) in [
        ("bullseye", Some("avx, avx2, f16c, fma")),
        ("bookworm", None),
        ("trixie", None),
        ("forky", None),
    ] {
        let (out, field) = rewrite_with_facts_of(g, &policy, &file);
        assert_eq!(out.code, 0, "{g}: {}", out.stderr);
        for f in ["avx", "avx2", "f16c", "fma"] {
            assert!(
                out.stdout.contains(&format!("name='{f}'/>")),
                "{g}: the rewrite requires {f}:\n{}",
                out.stdout
            );
        }
        let warning = out
            .stderr
            .lines()
            .find(|l| l.contains("warning[host-level]"));
        match lacks {
            Some(list) => {
                let w =
                    warning.unwrap_or_else(|| panic!("{g}: no host-level warning: {}", out.stderr));
                assert!(
                    w.contains(&format!(
                        "does not emulate {list}: QEMU drops them at start"
                    )) && w.contains(&format!("QEMU {}", field("qemu")))
                        && w.contains("will not reach x86-64-v3"),
                    "{g}: {w}"
                );
            }
            None => assert!(warning.is_none(), "{g}: {}", out.stderr),
        }
    }
}

/// `tcg-cpu-hotplug`: a TCG guest with room to hot-plug vCPUs on QEMU 5.1.0 to 7.2.0 (which
/// never tells the guest of them) gets a warning naming the QEMU release, from each generation's
/// own captured facts after a `vcpu.max` rewrite (only QEMU 5.2, bullseye); the bounds by
/// `--qemu-version` (5.0.0 and 7.2.1 without, 5.1.0 and 7.2.0 with); nothing for a guest whose
/// vCPUs are all online, for KVM, or for an unknown QEMU. The guest proof (tests/guest/run)
/// boots the result on QEMU 5.2 and shows the guest never sees the vCPUs, and that it sees them
/// once it has switched QEMU to the modern hotplug interface itself; 7.2, 10.0 and 11.1 deliver
/// them.
#[test]
fn tcg_cpu_hotplug_is_lost_on_qemu_5_1_to_7_2_0() {
    let dir = Scratch::new("tcg-hotplug");
    let policy = dir.write(
        "max4.toml",
        "version = 1\n\n[[rule]]\nname = \"scale\"\nmatch = { arch = \"x86_64\" }\nvcpu.max = 4\n",
    );
    let empty = dir.write("empty.toml", "version = 1\n");
    let topology = "<cpu><topology sockets='1' cores='1' threads='1'/></cpu>";
    let one = dir.write(
        "one.xml",
        guest(
            "vcp-test-hp",
            "pc",
            "<vcpu current='1'>1</vcpu>",
            topology,
            false,
        ),
    );
    // `rewrite` says warnings on stderr, `check` in its report on stdout.
    let warned = |out: &crate::harness::Output| {
        out.stderr
            .lines()
            .chain(out.stdout.lines())
            .find(|l| l.contains("warning[tcg-cpu-hotplug]"))
            .map(str::to_string)
    };
    for g in ["bullseye", "bookworm", "trixie", "forky"] {
        let (out, field) = rewrite_with_facts_of(g, &policy, &one);
        assert_eq!(out.code, 0, "{g}: {}", out.stderr);
        assert!(
            out.stdout.contains("<vcpu current=\"1\">4</vcpu>")
                || out.stdout.contains("<vcpu current='1'>4</vcpu>"),
            "{g}: the rewrite raises the maximum to 4:\n{}",
            out.stdout
        );
        match (g, warned(&out)) {
            ("bullseye", Some(w)) => assert!(
                w.contains(&format!("QEMU {} (from --qemu-version)", field("qemu")))
                    && w.contains(
                        "up to the maximum 4 succeeds, but the guest keeps its 1 vCPU(s)"
                    ),
                "{g}: {w}"
            ),
            ("bullseye", None) => panic!("{g}: no tcg-cpu-hotplug warning: {}", out.stderr),
            (_, None) => {}
            (_, Some(w)) => panic!(
                "{g}: QEMU {} delivers hot-plugged vCPUs: {w}",
                field("qemu")
            ),
        }
    }
    // The bounds, with `check` of domains written with room (no rule), and without.
    let four = |name: &str, vcpu: &str, virt: &str| {
        let xml = guest(
            "vcp-test-hp",
            "q35",
            vcpu,
            "<cpu><topology sockets='4' cores='1' threads='1'/></cpu>",
            false,
        );
        dir.write(name, xml.replace("type='qemu'", &format!("type='{virt}'")))
    };
    let room = four("room.xml", "<vcpu current='2'>4</vcpu>", "qemu");
    let full = four("full.xml", "<vcpu>4</vcpu>", "qemu");
    let kvm = four("kvm.xml", "<vcpu current='2'>4</vcpu>", "kvm");
    let check = |file: &std::path::Path, qemu: Option<&str>| {
        let mut c = Cmd::new(&["check", "--no-qemu-caps-cache", "--policy", &s(&empty)]);
        if let Some(q) = qemu {
            c = c.args(&["--qemu-version", q]);
        }
        let out = c.arg(s(file)).run();
        assert_eq!(out.code, 0, "{}: {}", file.display(), out.stderr);
        warned(&out)
    };
    for (qemu, lost) in [
        ("5.0.0", false),
        ("5.1.0", true),
        ("6.2.0", true),
        ("7.2.0", true),
        ("7.2.1", false),
        ("8.0.0", false),
    ] {
        let w = check(&room, Some(qemu));
        assert_eq!(w.is_some(), lost, "QEMU {qemu}: {w:?}");
        if let Some(w) = w {
            assert!(
                w.contains(&format!("QEMU {qemu} (from --qemu-version)"))
                    && w.contains("the maximum 4 succeeds, but the guest keeps its 2 vCPU(s)"),
                "{w}"
            );
        }
        assert_eq!(check(&full, Some(qemu)), None, "all online, QEMU {qemu}");
        assert_eq!(check(&kvm, Some(qemu)), None, "KVM, QEMU {qemu}");
    }
    assert_eq!(check(&room, None), None, "an unknown QEMU is no evidence");
    // current='0' is refused (vcpu-current): no guest, no hot-plug warning.
    let zero = four("zero.xml", "<vcpu current='0'>4</vcpu>", "qemu");
    let out = Cmd::new(&["check", "--no-qemu-caps-cache", "--policy", &s(&empty)])
        .args(&["--qemu-version", "6.2.0"])
        .arg(s(&zero))
        .run();
    assert!(
        out.stdout.contains("error[vcpu-current]") && warned(&out).is_none(),
        "{}{}",
        out.stdout,
        out.stderr
    );
    // A <vcpus> list with a hole (vCPU 1 off below enabled ones; libvirt 9.0 starts it with 3
    // online): the room is one vCPU, counted by the enabled entries, not the highest id.
    let hole = four(
        "hole.xml",
        "<vcpu current='3'>4</vcpu>\n  <vcpus>\n    <vcpu id='0' enabled='yes' hotpluggable='no' order='1'/>\n    <vcpu id='1' enabled='no' hotpluggable='yes'/>\n    <vcpu id='2' enabled='yes' hotpluggable='yes' order='2'/>\n    <vcpu id='3' enabled='yes' hotpluggable='yes' order='3'/>\n  </vcpus>",
        "qemu",
    );
    let w = check(&hole, Some("5.2.0")).expect("a hole in <vcpus> is room to hot-plug");
    assert!(w.contains("the guest keeps its 3 vCPU(s)"), "{w}");
    // No disabled vCPU is hotpluggable: nothing can be hot-plugged, nothing to warn of.
    let fixed = four(
        "fixed.xml",
        "<vcpu current='3'>4</vcpu>\n  <vcpus>\n    <vcpu id='0' enabled='yes' hotpluggable='no' order='1'/>\n    <vcpu id='1' enabled='no' hotpluggable='no'/>\n    <vcpu id='2' enabled='yes' hotpluggable='yes' order='2'/>\n    <vcpu id='3' enabled='yes' hotpluggable='yes' order='3'/>\n  </vcpus>",
        "qemu",
    );
    let out = Cmd::new(&["check", "--no-qemu-caps-cache", "--policy", &s(&empty)])
        .args(&["--qemu-version", "5.2.0"])
        .arg(s(&fixed))
        .run();
    assert!(warned(&out).is_none(), "{}{}", out.stdout, out.stderr);
}

/// The QEMU capability cache of another root (`--qemu-caps-cache ROOT/var/cache/libvirt/qemu/
/// capabilities`: a generation's root, as a chroot or another machine's disk mounted here) is
/// judged fresh against that root's emulator, not this machine's: `host` names the root's QEMU
/// release, the one its libvirtd runs (`virsh version`). Before, every file of another root was
/// stale against this machine's QEMU, and the release unknown.
#[test]
#[ignore = "needs the libvirt generations: .ci/run builds and starts them (tests/libvirt/generations)"]
fn another_roots_qemu_cache_names_that_roots_qemu() {
    let gens = generations();
    assert!(!gens.is_empty(), "no libvirt generation answers");
    for g in &gens {
        let cache = g.oracle.root.join("var/cache/libvirt/qemu/capabilities");
        let out = Cmd::new(&["host", "--qemu-caps-cache", &s(&cache)]).run();
        assert_eq!(out.code, 0, "{}: {}", g.name, out.stderr);
        let want = qemu_version(&g.oracle);
        let line = out
            .stdout
            .lines()
            .find(|l| l.starts_with("QEMU (qemu-system-x86_64): "))
            .unwrap_or_else(|| panic!("{}: no QEMU line: {}", g.name, out.stdout));
        assert!(
            line.starts_with(&format!("QEMU (qemu-system-x86_64): {want} ")),
            "{}: {line} (virsh version: QEMU {want})",
            g.name
        );
        eprintln!("tcg: {}'s cache: {line}", g.name);
    }
}

/// An x86 model libvirt's cpu_map knows but the emulator does not offer (QEMU 7.1 removed
/// `Icelake-Client`, which every generation's cpu_map keeps): on each captured generation,
/// judged from its own TCG domcapabilities, a guest naming it with `fallback='forbid'` is
/// refused as libvirt refuses it ("CPU model Icelake-Client is not supported by hypervisor",
/// seen on libvirt 9.0/QEMU 7.2), with the default fallback it is a warning (libvirt starts the
/// closest model it offers: `IvyBridge` and features there), and nothing where the
/// domcapabilities list it (QEMU 5.2).
#[test]
fn a_model_the_emulator_does_not_offer_is_refused_only_under_fallback_forbid() {
    let dir = Scratch::new("tcg-offered");
    let policy = dir.write("empty.toml", "version = 1\n");
    let mut seen = BTreeSet::new();
    // Every captured generation, named by its directory: a new one is picked up as it comes.
    let root = generation_facts(".");
    for entry in std::fs::read_dir(&root).unwrap() {
        let facts = entry.unwrap().path();
        let domcaps = facts.join("domcapabilities-x86_64-q35-qemu.xml");
        if !domcaps.is_file() {
            continue;
        }
        let offered = std::fs::read_to_string(&domcaps)
            .unwrap()
            .contains(">Icelake-Client</model>");
        seen.insert(offered);
        for forbid in [true, false] {
            let fallback = if forbid { " fallback='forbid'" } else { "" };
            let cpu = format!(
                "<cpu mode='custom' match='exact'><model{fallback}>Icelake-Client</model></cpu>"
            );
            let file = dir.write(
                "g.xml",
                guest("vcp-test-offered", "q35", "<vcpu>1</vcpu>", &cpu, false),
            );
            let out = Cmd::new(&["check", "--format", "json", "--no-qemu-caps-cache"])
                .args(&[
                    "--caps",
                    &s(&facts.join("capabilities.xml")),
                    "--caps",
                    &s(&domcaps),
                ])
                .args(&[
                    "--cpu-map",
                    &s(&facts.join("cpu_map")),
                    "--policy",
                    &s(&policy),
                ])
                .arg(s(&file))
                .run();
            let v: serde_json::Value = serde_json::from_str(&out.stdout)
                .unwrap_or_else(|e| panic!("{}: {e}: {}", facts.display(), out.stderr));
            let found: Vec<&serde_json::Value> = v["findings"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|f| {
                    f["code"] == "cpu-model-unknown"
                        && f["message"]
                            .as_str()
                            .unwrap()
                            .contains("not one this QEMU offers")
                })
                .collect();
            let at = facts.display();
            if offered {
                assert!(found.is_empty(), "{at}: offered, said {v}");
            } else {
                assert_eq!(found.len(), 1, "{at}: {v}");
                let severity = if forbid { "error" } else { "warning" };
                assert_eq!(found[0]["severity"], severity, "{at}: {v}");
                if forbid {
                    assert!(
                        found[0]["message"].as_str().unwrap().contains(
                            "\"CPU model Icelake-Client is not supported by hypervisor\""
                        ),
                        "{at}: {v}"
                    );
                }
            }
        }
    }
    assert_eq!(seen.len(), 2, "generations offering it and not: {seen:?}");
}
