//! `baseline` and `compare` at the command line: the exit-code contract, bad input, and
//! `cpu.model = "baseline"` with `[host] cluster`. The golden cases of `tests/baseline-cases/`
//! run in `golden.rs` (`baseline_golden_cases`), in the one format both golden suites share.

use crate::golden::{Case, golden_cpu_map};
use crate::harness::{Cmd, Scratch, s, shared_corpus};

/// Every case folder of `tests/baseline-cases`, sorted by name.
pub fn cases() -> Vec<Case> {
    crate::golden::baseline_cases()
}

/// The expected JSON of a `--format json` baseline case (placeholders left in place).
pub fn expected_json(case: &Case) -> Option<serde_json::Value> {
    let args = std::fs::read_to_string(case.dir.join("args")).ok()?;
    if !args.starts_with("baseline") || !args.lines().any(|l| l.trim() == "json") {
        return None;
    }
    let text = std::fs::read_to_string(case.dir.join("expected-stdout")).ok()?;
    serde_json::from_str(&text).ok()
}

/// `baseline --format toml` of `hosts` written as a policy, and `rewrite` of `domain` with it:
/// (the policy text, the rewrite's output).
fn toml_then_rewrite(dir: &Scratch, map: &str, hosts: &[String], domain: &str) -> (String, String) {
    let out = Cmd::new(&["baseline", "--format", "toml", "--cpu-map", map])
        .args(hosts)
        .run();
    out.status(0);
    let policy = dir.write("policy.toml", &out.stdout);
    let domain = dir.write("d.xml", domain);
    let rw = Cmd::new(&[
        "rewrite",
        "--no-qemu-caps-cache",
        "--cpu-map",
        map,
        "--policy",
    ])
    .arg(s(&policy))
    .arg(s(&domain))
    .run();
    rw.status(0);
    (out.stdout, rw.stdout)
}

/// The toml output is a policy the tool itself loads, and its rule gives a guest the baseline.
#[test]
#[cfg_attr(
    not(vcp_shared_corpus),
    ignore = "needs ../shared/corpus beside the checkout"
)]
fn toml_output_is_a_working_policy() {
    let c = shared_corpus();
    let d = c.join("libvirt-cputestdata");
    let map = s(&golden_cpu_map());
    let dir = Scratch::new("baseline-toml");
    let hosts = [
        s(&d.join("x86_64-cpuid-Xeon-E5-2650-v4-host.xml")),
        s(&d.join("x86_64-cpuid-Core-i7-3770-host.xml")),
    ];
    let (_, rw) = toml_then_rewrite(
        &dir,
        &map,
        &hosts,
        "<domain type='kvm'><name>g</name><vcpu>2</vcpu><os><type arch='x86_64' machine='q35'>hvm</type></os>\
         <cpu><topology sockets='1' cores='2' threads='1'/></cpu></domain>",
    );
    assert!(rw.contains(">IvyBridge</model>"), "{rw}");
    assert!(rw.contains("name='vmx'"), "{rw}");
    // An i686 cluster's rule: no cpu.min_level, which the policy reader refuses off x86_64
    // (review: every i686 guest was `level-arch`, cannot conform).
    let host = dir.write(
        "i686.xml",
        "<cpu><arch>i686</arch><model>Nehalem</model></cpu>",
    );
    let (policy, rw) = toml_then_rewrite(
        &dir,
        &map,
        &[s(&host)],
        "<domain type='kvm'><name>g</name><vcpu>1</vcpu><os><type arch='i686'>hvm</type></os><cpu><model>pentium3</model></cpu></domain>",
    );
    assert!(policy.contains("match = { arch = \"i686\" }"), "{policy}");
    assert!(!policy.contains("min_level"), "{policy}");
    assert!(rw.contains(">Nehalem</model>"), "{rw}");
}

#[test]
fn bad_input_exits_2_with_one_line_and_no_stdout() {
    let dir = Scratch::new("baseline-bad");
    let not_facts = dir.write("n.xml", "<domain type='kvm'/>");
    let broken = dir.write("b.xml", "<cpu><arch>x86_64</arch>");
    let fifo_dir = dir.path("empty");
    std::fs::create_dir_all(&fifo_dir).unwrap();
    // A FIFO among the facts is a host that cannot be read, said, never waited for or skipped.
    let with_fifo = dir.path("with-fifo");
    std::fs::create_dir_all(&with_fifo).unwrap();
    std::fs::copy(&not_facts, with_fifo.join("a.xml")).unwrap();
    let fifo = with_fifo.join("0-fifo.xml");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    // A host name that would write its own lines into the toml, nova or cloudstack output.
    let injected = dir.write(
        "inject.xml",
        "<hostFacts name=\"node-b&#10;mode = &quot;audit&quot;&#10;#\"><capabilities><host><cpu><arch>x86_64</arch><model>Nehalem</model><vendor>Intel</vendor></cpu></host></capabilities></hostFacts>",
    );
    for args in [
        vec![
            "baseline".to_string(),
            "--format".into(),
            "toml".into(),
            s(&injected),
        ],
        vec!["baseline".to_string(), s(&with_fifo)],
        vec!["baseline".to_string(), s(&not_facts)],
        vec!["baseline".to_string(), s(&broken)],
        vec!["baseline".to_string(), s(&fifo_dir)],
        vec!["baseline".to_string(), s(&dir.path("missing.xml"))],
        vec![
            "baseline".into(),
            "--cpu-map".into(),
            s(&dir.0),
            s(&not_facts),
        ],
        vec![
            "compare".into(),
            "--host".into(),
            s(&not_facts),
            s(&not_facts),
        ],
    ] {
        let out = Cmd::new(&args).run();
        assert_eq!(out.code, 2, "{args:?}: {}", out.stderr);
        assert!(out.stdout.is_empty(), "{args:?}: {}", out.stdout);
        assert_eq!(out.stderr.lines().count(), 1, "{args:?}: {}", out.stderr);
    }
    let out = Cmd::new(&["baseline", "--format", "toml"])
        .arg(s(&injected))
        .run();
    assert!(
        out.stderr.contains("has a control character"),
        "{}",
        out.stderr
    );
    // A host CPU without <model>: libvirt's "Missing CPU model name", not "incompatible".
    let no_model = dir.write("no-model.xml", "<cpu><arch>x86_64</arch></cpu>");
    let out = Cmd::new(&["baseline", "--cpu-map", &s(&golden_cpu_map())])
        .arg(s(&no_model))
        .run();
    out.status(2);
    assert!(
        out.stderr.contains("Missing CPU model name"),
        "{}",
        out.stderr
    );
}

#[test]
#[cfg_attr(
    not(vcp_shared_corpus),
    ignore = "needs ../shared/corpus beside the checkout"
)]
fn bad_cpu_map_and_vendor_mix_exit_with_one_line() {
    let dir = Scratch::new("baseline-bad-map");
    // A cpu_map that is not one: still one line (when the facts are x86).
    let c = shared_corpus();
    let host = c.join("libvirt-cputestdata/x86_64-cpuid-Xeon-E5-2650-v4-host.xml");
    let out = Cmd::new(&["baseline", "--cpu-map"])
        .arg(s(&dir.0))
        .arg(s(&host))
        .run();
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("index.xml"), "{}", out.stderr);
    // --strict-vendor refuses a vendor mix as libvirt does, and names each host's CPU.
    let amd = c.join("libvirt-cputestdata/x86_64-cpuid-Opteron-6282-host.xml");
    let out = Cmd::new(&[
        "baseline",
        "--strict-vendor",
        "--cpu-map",
        &s(&golden_cpu_map()),
    ])
    .arg(s(&host))
    .arg(s(&amd))
    .run();
    out.status(1);
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    assert!(
        out.stderr.contains("CPU vendors do not match (hosts x86_64-cpuid-Xeon-E5-2650-v4-host: Broadwell, Intel; x86_64-cpuid-Opteron-6282-host: Opteron_G4, AMD)"),
        "{}",
        out.stderr
    );
}

// ---------------------------------------------------------------------------------------------
// `cpu.model = "baseline"` with `[host] cluster`
// ---------------------------------------------------------------------------------------------

/// libvirt's test CPUs of three Intel hosts (a Broadwell, an Ivy Bridge without avx2, a
/// Nehalem) and the cpu_map to read them with; panics without them (nothing would be tested).
fn three_hosts() -> (Vec<String>, String) {
    let c = shared_corpus();
    let d = c.join("libvirt-cputestdata");
    let hosts = [
        "x86_64-cpuid-Xeon-E5-2650-v4-host.xml",
        "x86_64-cpuid-Core-i7-3770-host.xml",
        "x86_64-cpuid-Xeon-W3520-host.xml",
    ]
    .iter()
    .map(|f| s(&d.join(f)))
    .collect();
    (hosts, s(&golden_cpu_map()))
}

/// A policy whose one rule gives x86_64 guests the cluster's baseline (`extra` adds keys to the
/// rule), with `[host] cluster` naming `cluster`.
fn baseline_policy(cluster: &[String], extra: &str) -> String {
    let list: Vec<String> = cluster.iter().map(|c| format!("{c:?}")).collect();
    format!(
        "version = 1\n\n[[rule]]\nname = \"cluster cpu\"\nmatch = {{ arch = \"x86_64\" }}\ncpu.model = \"baseline\"\n{extra}\n[host]\ncluster = [{}]\n",
        list.join(", ")
    )
}

const KVM_GUEST: &str = "<domain type='kvm'>\n  <name>g</name>\n  <vcpu>2</vcpu>\n  <os>\n    <type arch='x86_64' machine='q35'>hvm</type>\n  </os>\n  <cpu>\n    <topology sockets='1' cores='2' threads='1'/>\n  </cpu>\n</domain>\n";

/// (model, required features, disabled features) of the first `<cpu>` of a document.
fn cpu_of(xml: &str) -> (String, Vec<String>, Vec<String>) {
    let doc = roxmltree::Document::parse(xml).expect("the output parses");
    let cpu = doc
        .descendants()
        .find(|n| n.has_tag_name("cpu"))
        .expect("a <cpu>");
    let model = cpu
        .children()
        .find(|n| n.has_tag_name("model"))
        .and_then(|m| m.text())
        .unwrap_or_default()
        .to_string();
    let with = |p: &str| -> Vec<String> {
        cpu.children()
            .filter(|n| n.has_tag_name("feature") && n.attribute("policy") == Some(p))
            .filter_map(|n| n.attribute("name").map(str::to_string))
            .collect()
    };
    (model, with("require"), with("disable"))
}

/// `CMD --no-qemu-caps-cache --cpu-map MAP --policy POLICY [EXTRA...] FILE`.
fn judge(
    cmd: &str,
    map: &str,
    policy: &std::path::Path,
    extra: &[&str],
    file: &std::path::Path,
) -> crate::harness::Output {
    Cmd::new(&[cmd, "--no-qemu-caps-cache", "--cpu-map", map, "--policy"])
        .arg(s(policy))
        .args(extra)
        .arg(s(file))
        .run()
}

/// `check`'s answer on a guest that needs no more change, on a judged host whose own CPU is not
/// given: `not-compared` (exit 4), naming the missing fact.
#[track_caller]
fn not_compared(out: &crate::harness::Output) {
    out.status(4);
    assert!(
        out.stdout.contains("warning[not-compared]") && out.stdout.contains("not known"),
        "{}",
        out.stdout
    );
}

#[test]
#[cfg_attr(
    not(vcp_shared_corpus),
    ignore = "needs ../shared/corpus beside the checkout"
)]
fn baseline_policy_gives_guests_the_clusters_cpu() {
    let (hosts, map) = three_hosts();
    let t = Scratch::new("policy-baseline");
    let policy = t.write("p.toml", baseline_policy(&hosts, ""));
    let guest = t.write("g.xml", KVM_GUEST);
    let json = Cmd::new(&[
        "baseline",
        "--migratable",
        "--format",
        "json",
        "--cpu-map",
        &map,
    ])
    .args(&hosts)
    .run();
    json.status(0);
    let want: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    let list = |k: &str| -> Vec<String> {
        want[k]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect()
    };
    let rewrite =
        |policy: &std::path::Path, extra: &[&str]| judge("rewrite", &map, policy, extra, &guest);
    let out = rewrite(&policy, &["--explain"]);
    out.status(0);
    let (model, require, disable) = cpu_of(&out.stdout);
    assert_eq!(model, want["model"].as_str().unwrap(), "{}", out.stdout);
    assert_eq!(require, list("require"), "{}", out.stdout);
    assert_eq!(disable, list("disable"), "{}", out.stdout);
    // The Ivy Bridge lacks avx2: the guest must not get it.
    assert!(!out.stdout.contains("avx2"), "{}", out.stdout);
    for needle in [
        format!(
            "rule 'cluster cpu': <model>: (none) -> {model} (the cluster's baseline model, for 3 host(s): x86_64-cpuid-Xeon-E5-2650-v4-host, x86_64-cpuid-Core-i7-3770-host, x86_64-cpuid-Xeon-W3520-host from [host] cluster of policy {}; left out of the baseline: ds, acpi, ht, tm, pbe, dtes64, monitor, ds_cpl, est, tm2, xtpr: KVM never gives a guest these",
            s(&policy)
        ),
        format!(
            "rule 'cluster cpu': <feature policy='require' name='{}'/> added (the cluster's baseline: every host has it)",
            require[0]
        ),
    ] {
        assert!(
            out.stderr.contains(&needle),
            "{needle}\nin:\n{}",
            out.stderr
        );
    }
    // The same document as with `baseline --format toml`'s policy, and a fixed point.
    let toml = Cmd::new(&[
        "baseline",
        "--migratable",
        "--format",
        "toml",
        "--cpu-map",
        &map,
    ])
    .args(&hosts)
    .run();
    toml.status(0);
    let from_toml = rewrite(&t.write("toml.toml", &toml.stdout), &[]);
    from_toml.status(0);
    assert_eq!(from_toml.stdout, out.stdout);
    let rewritten = t.write("out.xml", &out.stdout);
    // Nothing more to change; the judged host's own CPU is not given (the recorded cpu_map is
    // not this machine's libvirt's), so libvirt's start check is not compared: exit 4.
    not_compared(&judge("check", &map, &policy, &[], &rewritten));
    // A directory of the same files gives the same answer.
    std::fs::create_dir_all(t.path("cluster")).unwrap();
    for h in &hosts {
        let name = std::path::Path::new(h).file_name().unwrap();
        std::fs::copy(h, t.path("cluster").join(name)).unwrap();
    }
    let by_dir = t.write("dir.toml", baseline_policy(&[s(&t.path("cluster"))], ""));
    let out2 = rewrite(&by_dir, &[]);
    out2.status(0);
    assert_eq!(out2.stdout, out.stdout);
}

/// Hosts known only by their physical CPU (libvirt's test CPUs are `virsh capabilities` CPUs):
/// the cluster's CPU a guest gets holds none of the features KVM never gives a guest, the
/// explanation says once which were left out and for which hosts, and a `ds` the domain itself
/// requires goes too (libvirt would refuse to start it under KVM: "Host CPU does not provide
/// required features: ds").
#[test]
#[cfg_attr(
    not(vcp_shared_corpus),
    ignore = "needs ../shared/corpus beside the checkout"
)]
fn baseline_policy_leaves_out_what_kvm_never_gives() {
    use virt_cpu_policy::cpu::KVM_NEVER_GIVES;
    let (hosts, map) = three_hosts();
    let t = Scratch::new("policy-baseline-kvm");
    let policy = t.write("p.toml", baseline_policy(&hosts, ""));
    let with_ds = KVM_GUEST.replace(
        "<cpu>\n",
        "<cpu mode='custom'>\n    <model>Nehalem</model>\n    <feature policy='require' name='ds'/>\n",
    );
    for (label, xml) in [("no CPU", KVM_GUEST.to_string()), ("ds required", with_ds)] {
        let out = judge(
            "rewrite",
            &map,
            &policy,
            &["--explain"],
            &t.write("g.xml", &xml),
        );
        out.status(0);
        let (model, require, disable) = cpu_of(&out.stdout);
        for f in KVM_NEVER_GIVES {
            assert!(
                !require.iter().any(|r| r == f),
                "{label}: {f}\n{}",
                out.stdout
            );
        }
        assert_eq!(model, "Nehalem", "{label}");
        assert!(disable.is_empty(), "{label}: {disable:?}");
        assert_eq!(
            require,
            ["vme", "ss", "vmx", "pdcm", "rdtscp"],
            "{label}: {}",
            out.stdout
        );
        let said = "left out of the baseline: ds, acpi, ht, tm, pbe, dtes64, monitor, ds_cpl, est, tm2, xtpr: KVM never gives a guest these";
        let hosts_said = "host(s) x86_64-cpuid-Xeon-E5-2650-v4-host, x86_64-cpuid-Core-i7-3770-host, x86_64-cpuid-Xeon-W3520-host are known only by their physical CPU";
        // Said with the model the baseline gives; the guest that has it already is told why its
        // ds goes.
        if label == "no CPU" {
            assert_eq!(out.stderr.matches(said).count(), 1, "{}", out.stderr);
            assert!(out.stderr.contains(hosts_said), "{}", out.stderr);
        } else {
            assert!(
                out.stderr.contains("'ds'")
                    && out.stderr.contains("the cluster's baseline CPU lacks it"),
                "{}",
                out.stderr
            );
        }
    }
}

#[test]
#[cfg_attr(
    not(vcp_shared_corpus),
    ignore = "needs ../shared/corpus beside the checkout"
)]
fn baseline_policy_refuses_what_not_every_host_has() {
    let (hosts, map) = three_hosts();
    let t = Scratch::new("policy-baseline-more");
    let guest = t.write("g.xml", KVM_GUEST);
    for (extra, code, needles) in [
        (
            "cpu.min_level = \"x86-64-v3\"",
            "cluster-level",
            vec![
                "cpu.min_level x86-64-v3 of rule 'cluster cpu' is above what every host of the cluster reaches (x86-64-v2)",
                "x86_64-cpuid-Core-i7-3770-host (missing avx2, bmi1, bmi2, fma, abm, movbe)",
            ],
        ),
        (
            "cpu.require = [\"avx2\"]",
            "cluster-feature",
            vec![
                "feature 'avx2' is required by rule 'cluster cpu', but not every host of the cluster",
            ],
        ),
    ] {
        let policy = t.write("p.toml", baseline_policy(&hosts, extra));
        let out = judge("rewrite", &map, &policy, &[], &guest);
        out.status(1);
        assert!(out.stdout.is_empty(), "{}", out.stdout);
        assert!(
            out.stderr.contains(&format!("error[{code}]")),
            "{}",
            out.stderr
        );
        assert!(!out.stderr.contains("error[cpu-level]"), "{}", out.stderr);
        for n in needles {
            assert!(out.stderr.contains(n), "{n}\nin:\n{}", out.stderr);
        }
    }
    // A level the cluster reaches is kept and adds nothing.
    let policy = t.write(
        "p.toml",
        baseline_policy(&hosts, "cpu.min_level = \"x86-64-v2\""),
    );
    let out = judge("rewrite", &map, &policy, &[], &guest);
    out.status(0);
    assert!(!out.stdout.contains("avx2"), "{}", out.stdout);
}

/// What the domain itself adds on top of its model must not keep it from the cluster's hosts
/// (review: an `avx512f` the guest required stayed under the baseline, and so did an AMD
/// `<vendor>` and `match='strict'`; `compare` then refused the rewritten guest on every host).
#[test]
#[cfg_attr(
    not(vcp_shared_corpus),
    ignore = "needs ../shared/corpus beside the checkout"
)]
fn baseline_policy_drops_what_the_domain_adds_that_not_every_host_runs() {
    let (hosts, map) = three_hosts();
    let t = Scratch::new("policy-baseline-fit");
    let policy = t.write("p.toml", baseline_policy(&hosts, ""));
    let model =
        cpu_of(&judge("rewrite", &map, &policy, &[], &t.write("g.xml", KVM_GUEST)).stdout).0;
    let guest = |model: &str| {
        format!(
            "<domain type='kvm'>\n  <name>g</name>\n  <vcpu>2</vcpu>\n  <os>\n    <type arch='x86_64' machine='q35'>hvm</type>\n  </os>\n  <cpu mode='custom' match='strict'>\n    <model fallback='allow'>{model}</model>\n    <vendor>AMD</vendor>\n    <feature policy='require' name='avx512f'/>\n    <feature policy='force' name='avx2'/>\n    <feature policy='disable' name='vmx'/>\n  </cpu>\n</domain>\n"
        )
    };
    // One guest whose model the baseline replaces, one that already has the baseline's model.
    for (name, with_model, needles) in [
        (
            "other-model",
            "Haswell-noTSX",
            vec![
                "<vendor> removed: it described the old model Haswell-noTSX".to_string(),
                "<feature policy='require' name='avx512f'/> removed: it described the old model Haswell-noTSX".into(),
                "<cpu match='strict'> -> 'exact': it described the old model Haswell-noTSX".into(),
            ],
        ),
        (
            "same-model",
            model.as_str(),
            vec![
                "<feature policy='require' name='avx512f'/> removed: the cluster's baseline CPU lacks it".to_string(),
                "<feature policy='force' name='avx2'/> removed: the cluster's baseline CPU lacks it".into(),
                "<vendor> removed: the cluster's hosts (3 host(s): x86_64-cpuid-Xeon-E5-2650-v4-host".into(),
                "<cpu match='strict'> -> 'exact': a guest of the cluster".into(),
            ],
        ),
    ] {
        let input = t.write(&format!("{name}.xml"), guest(with_model));
        let out = judge("rewrite", &map, &policy, &["--explain"], &input);
        out.status(0);
        for n in &needles {
            assert!(out.stderr.contains(n.as_str()), "{name}: {n}\nin:\n{}", out.stderr);
        }
        for gone in ["avx512f", "avx2", "<vendor>", "strict"] {
            assert!(!out.stdout.contains(gone), "{name}: {gone} left:\n{}", out.stdout);
        }
        let rewritten = t.write(&format!("{name}-out.xml"), &out.stdout);
        not_compared(&judge("check", &map, &policy, &[], &rewritten));
        // libvirt's rule, as `compare` applies it: the guest runs on every host of the cluster.
        for h in &hosts {
            let c = Cmd::new(&["compare", "--cpu-map", &map, "--host", h])
                .arg(s(&rewritten))
                .run();
            assert_eq!(c.code, 0, "{name} on {h}: {}{}", c.stdout, c.stderr);
        }
    }
}

#[test]
#[cfg_attr(
    not(vcp_shared_corpus),
    ignore = "needs ../shared/corpus beside the checkout"
)]
fn baseline_policy_without_an_answer_exits_2_with_one_line() {
    let (hosts, map) = three_hosts();
    let t = Scratch::new("policy-baseline-bad");
    let guest = t.write("g.xml", KVM_GUEST);
    let missing = s(&t.path("gone/node-9.xml"));
    std::fs::create_dir_all(t.path("empty")).unwrap();
    let not_facts = s(&t.write("not-facts.xml", "<domain type='kvm'/>"));
    // A directory whose one host is a dangling link (its target moved away): the host is missing,
    // not skipped (review: the baseline silently rose to what the other hosts share).
    std::fs::create_dir_all(t.path("dangling")).unwrap();
    std::fs::copy(&hosts[0], t.path("dangling/node-a.xml")).unwrap();
    let link = t.path("dangling/node-old.xml");
    std::os::unix::fs::symlink(t.path("moved-away.xml"), &link).unwrap();
    let c = shared_corpus();
    let arm = vec![
        s(&c.join("virt-manager/capabilities/kvm-aarch64.xml")),
        s(&c.join("libvirt-domaincapsdata/qemu_11.0.0-virt.aarch64.xml")),
    ];
    let cases: Vec<(Vec<String>, Vec<String>)> = vec![
        (
            vec![hosts[0].clone(), missing.clone()],
            vec![format!("cannot read {missing}")],
        ),
        (
            vec![s(&t.path("empty"))],
            vec!["the directory holds no *.xml facts files".into()],
        ),
        (
            vec![s(&t.path("dangling"))],
            vec![format!(
                "cannot read {}: No such file or directory",
                s(&link)
            )],
        ),
        (
            vec![not_facts.clone()],
            vec![not_facts.clone(), "is not <domainCapabilities>".into()],
        ),
        (
            arm,
            vec!["the hosts are aarch64: no custom CPU model is migration-safe there".into()],
        ),
    ];
    for (cluster, needles) in cases {
        let policy = t.write("p.toml", baseline_policy(&cluster, ""));
        let head = format!(
            "virt-cpu-policy: cpu.model = \"baseline\": [host] cluster of policy {}: ",
            s(&policy)
        );
        for cmd in ["rewrite", "check", "audit"] {
            let out = judge(cmd, &map, &policy, &[], &guest);
            out.status(2);
            assert!(out.stdout.is_empty(), "{cmd}: {}", out.stdout);
            assert_eq!(out.stderr.lines().count(), 1, "{cmd}: {}", out.stderr);
            assert!(out.stderr.starts_with(&head), "{cmd}: {}", out.stderr);
            for n in &needles {
                assert!(
                    out.stderr.contains(n.as_str()),
                    "{cmd}: {n}\nin: {}",
                    out.stderr
                );
            }
        }
    }
    // The cluster is read only for a guest whose rule asks for it.
    let policy = t.write("p.toml", baseline_policy(&[missing], ""));
    let arm_guest = t.write(
        "arm.xml",
        "<domain type='kvm'><name>a</name><os><type arch='aarch64' machine='virt'>hvm</type></os><cpu mode='host-passthrough'/></domain>",
    );
    judge("check", &map, &policy, &[], &arm_guest).status(0);
}

#[test]
fn baseline_without_a_cluster_is_a_policy_error() {
    let t = Scratch::new("policy-baseline-nocluster");
    let policy = t.write(
        "p.toml",
        "version = 1\n[[rule]]\nname = \"c\"\ncpu.model = \"baseline\"\n",
    );
    let guest = t.write("g.xml", KVM_GUEST);
    let out = Cmd::new(&["rewrite", "--policy"])
        .arg(s(&policy))
        .arg(s(&guest))
        .run();
    out.status(2);
    assert!(out.stdout.is_empty());
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!(
            "policy {}: line 4, column 13: key `rule.cpu.model`: \"baseline\" is the CPU every host of `[host] cluster` can run",
            s(&policy)
        )),
        "{}",
        out.stderr
    );
}

/// A published directory holds each host's guest facts (`HOST.guests.xml`) beside its host facts:
/// `baseline` and `traits` over it read the hosts and pass over the guests, where a `<guestFacts>`
/// was "not a facts file" (exit 2) and `[host] cluster` on such a directory could not compute.
#[test]
fn a_published_directory_with_guest_facts_is_read_as_its_hosts() {
    let dir = Scratch::new("baseline-published");
    let published = dir.path("published");
    std::fs::create_dir_all(&published).unwrap();
    // libvirt 9.0's cpu_map (bookworm's, recorded: a fresh machine has no libvirt) reads both
    // hosts' CPU models.
    let map = crate::harness::generation_facts("bookworm").join("cpu_map");
    let caps = std::fs::read_to_string(
        crate::harness::generation_facts("bookworm").join("capabilities.xml"),
    )
    .unwrap();
    for g in ["node-a", "node-b"] {
        std::fs::write(
            published.join(format!("{g}.xml")),
            format!(
                "<hostFacts name='{g}'>{}</hostFacts>",
                caps.trim_start_matches(|c| c != '<')
            ),
        )
        .unwrap();
        std::fs::write(
            published.join(format!("{g}.guests.xml")),
            format!("<guestFacts host='{g}'>\n</guestFacts>\n"),
        )
        .unwrap();
    }
    for cmd in ["baseline", "traits"] {
        let out = Cmd::new(&[cmd, "--cpu-map", &s(&map), &s(&published)]).run();
        assert_eq!(out.code, 0, "{cmd}: {}", out.stderr);
        assert!(!out.stdout.is_empty(), "{cmd}: no report");
    }
    // A guest facts file named on the command line is still no host.
    let out = Cmd::new(&[
        "baseline",
        "--cpu-map",
        &s(&map),
        &s(&published.join("node-b.guests.xml")),
    ])
    .run();
    assert_eq!(out.code, 2, "{}", out.stdout);
}

/// `baseline --guests`: each guest whose OS needs more than the cluster's CPU gives is named,
/// exit 1, the report still on stdout; guests whose OS the baseline meets, and guests that name
/// no OS, are not. The cluster of a Broadwell, an Ivy Bridge and a Nehalem reaches x86-64-v2: a
/// RHEL 10 guest (x86-64-v3) is below it, a Rocky Linux 9 guest (CloudStack's name, x86-64-v2)
/// and a Windows 11 guest (sse4.2 + popcnt) are not.
#[test]
#[cfg_attr(
    not(vcp_shared_corpus),
    ignore = "needs ../shared/corpus beside the checkout"
)]
fn baseline_names_the_guests_whose_os_floor_the_clusters_cpu_misses() {
    let (hosts, map) = three_hosts();
    let t = Scratch::new("baseline-guests");
    let rhel10 = std::fs::read_to_string(
        crate::harness::root().join("tests/cases/os-floor-rhel10-libosinfo-raised-to-v3/input.xml"),
    )
    .unwrap();
    std::fs::create_dir_all(t.path("guests")).unwrap();
    t.write("guests/rhel10.xml", &rhel10);
    let plain = |name: &str, extra: &str| {
        format!(
            "<domain type='kvm'><name>{name}</name>{extra}<memory unit='MiB'>64</memory><vcpu>1</vcpu><os><type arch='x86_64' machine='pc'>hvm</type></os></domain>"
        )
    };
    t.write(
        "guests/rocky9.xml",
        plain(
            "rocky9",
            "<description>Rocky Linux 9 (64-bit)</description>",
        ),
    );
    t.write(
        "guests/win11.xml",
        plain(
            "win11",
            "<metadata><libosinfo:libosinfo xmlns:libosinfo='http://libosinfo.org/xmlns/libvirt/domain/1.0'><libosinfo:os id='http://microsoft.com/win/11'/></libosinfo:libosinfo></metadata>",
        ),
    );
    t.write("guests/untagged.xml", plain("untagged", ""));
    let run = |guests: bool| {
        let mut c = Cmd::new(&["baseline", "--cpu-map", &map]).args(&hosts);
        if guests {
            c = c.args(&["--guests", &s(&t.path("guests"))]);
        }
        c.run()
    };
    let without = run(false);
    without.status(0);
    let with = run(true);
    with.status(1);
    assert_eq!(with.stdout, without.stdout, "the report is the same");
    assert_eq!(with.stderr.lines().count(), 1, "{}", with.stderr);
    assert!(
        with.stderr.contains("is below the OS floor of 1 guest(s): rhel10 (rhel10.0 needs x86-64-v3; missing avx, avx2"),
        "{}",
        with.stderr
    );
    for other in ["rocky9", "win11", "untagged"] {
        assert!(!with.stderr.contains(other), "{other}: {}", with.stderr);
    }
}
