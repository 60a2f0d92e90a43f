//! The operator's questions, on the paths a CloudStack operator takes: is my policy right (`policy
//! check`, and a broken policy as the hook's error, never the guests' violation), what do my
//! running and transient guests get (`audit` of libvirt's status files), and what can I safely
//! do with the fleet (an answer built on missing evidence is never "safe").

use crate::harness::{
    Cmd, Scratch, Sweep, is_root, recorded_host_without_kvm_domcaps, require_libvirtd, root, s,
    virsh,
};
use std::path::PathBuf;

/// libvirt 9.0's recorded cpu_map: the names `policy check` judges, on any machine.
fn recorded_map() -> String {
    s(&root().join("tests/data/generations/bookworm/cpu_map"))
}

fn policy_check(file: &str) -> crate::harness::Output {
    Cmd::new(&["policy", "check", "--no-qemu-caps-cache", "--cpu-map"])
        .arg(recorded_map())
        .arg(file)
        .run()
}

/// The policies the project ships and documents: the package's, every ```toml block of docs/
/// and README.md, and every golden case's policy but those whose case is a policy's mistake
/// (`policy-unknown-*`, `policy-misspelled-key`, `policy-rule-conflict`).
fn shipped_policies() -> Vec<(String, String)> {
    let mut out = vec![(
        "packaging/policy.toml".to_string(),
        std::fs::read_to_string(root().join("packaging/policy.toml")).unwrap(),
    )];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .chain([root().join("README.md")])
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    for d in docs {
        let text = std::fs::read_to_string(&d).unwrap();
        for (i, block) in text.split("```toml\n").skip(1).enumerate() {
            let body = block.split("```").next().unwrap_or_default();
            // A block that is a policy (not a fragment of `[host]` settings alone).
            if body.contains("[[rule]]") {
                out.push((format!("{} block {}", d.display(), i + 1), body.to_string()));
            }
        }
    }
    let mut cases: Vec<PathBuf> = std::fs::read_dir(root().join("tests/cases"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("policy.toml").is_file())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            !(n.starts_with("policy-unknown-") || n == "policy-misspelled-key")
                && n != "policy-rule-conflict"
        })
        .collect();
    cases.sort();
    for c in cases {
        out.push((
            s(&c.join("policy.toml")),
            std::fs::read_to_string(c.join("policy.toml")).unwrap(),
        ));
    }
    out
}

/// Every CPU model and feature name `text`'s rules give (`cpu.model` but `baseline`,
/// `cpu.require`, `cpu.disable`).
fn names_in(text: &str) -> (Vec<String>, Vec<String>) {
    let v: toml::Value = toml::from_str(text).expect("a policy parses as TOML");
    let (mut models, mut features) = (Vec::new(), Vec::new());
    for rule in v
        .get("rule")
        .and_then(|r| r.as_array())
        .into_iter()
        .flatten()
    {
        let Some(cpu) = rule.get("cpu") else { continue };
        if let Some(m) = cpu.get("model").and_then(|m| m.as_str()) {
            if m != "baseline" {
                models.push(m.to_string());
            }
        }
        for key in ["require", "disable"] {
            for f in cpu
                .get(key)
                .and_then(|l| l.as_array())
                .into_iter()
                .flatten()
            {
                features.extend(f.as_str().map(str::to_string));
            }
        }
    }
    (models, features)
}

#[test]
fn every_shipped_and_documented_policy_passes_policy_check() {
    let t = Scratch::new("policy-check-shipped");
    let policies = shipped_policies();
    assert!(policies.len() >= 10, "{} policies", policies.len());
    for (i, (what, text)) in policies.iter().enumerate() {
        let f = t.write(&format!("p{i}.toml"), text);
        let out = policy_check(&s(&f));
        assert_eq!(
            out.code, 0,
            "{what}: policy check refused it:\n{}{}",
            out.stdout, out.stderr
        );
        assert!(
            out.stdout.contains("usable on this host"),
            "{what}: {}",
            out.stdout
        );
    }
}

#[test]
fn a_typo_of_every_model_and_feature_name_is_refused_with_the_name_meant() {
    let t = Scratch::new("policy-check-typos");
    let (mut models, mut features) = (Vec::new(), Vec::new());
    for (_, text) in shipped_policies() {
        let (m, f) = names_in(&text);
        models.extend(m);
        features.extend(f);
    }
    models.sort();
    models.dedup();
    features.sort();
    features.dedup();
    assert!(
        models.len() >= 3 && features.len() >= 5,
        "{models:?} {features:?}"
    );
    let mut tried = 0;
    for (key, names) in [("cpu.model", &models), ("cpu.require", &features)] {
        for name in names {
            // The operator's typo: the last letter twice (`Nehalemm`, `popcntt`).
            let typo = format!("{name}{}", name.chars().last().unwrap());
            let value = if key == "cpu.model" {
                format!("\"{typo}\"")
            } else {
                format!("[\"{typo}\"]")
            };
            let f = t.write(
                "typo.toml",
                format!("version = 1\n[[rule]]\nname = \"typo\"\n{key} = {value}\n"),
            );
            let out = policy_check(&s(&f));
            assert_eq!(out.code, 1, "{key} {typo}: {}{}", out.stdout, out.stderr);
            // The name meant, in libvirt's spelling (a policy may spell `lahf_lm` `lahf-lm`).
            let bare = |n: &str| n.replace(['-', '_', '.'], "").to_ascii_lowercase();
            let meant = out
                .stdout
                .split("(did you mean ")
                .nth(1)
                .and_then(|r| r.split("?)").next())
                .unwrap_or_default();
            assert!(
                out.stdout.contains(&format!("'{typo}'")) && bare(meant) == bare(name),
                "{key} {typo} names the typo and {name}:\n{}",
                out.stdout
            );
            tried += 1;
        }
    }
    eprintln!(
        "policy check: {tried} typos ({} models, {} features of the shipped policies) refused with the name meant",
        models.len(),
        features.len()
    );
}

/// The issue's typo, `cpu.model = "Nehalm"`, on every path that reads a policy.
#[test]
fn a_broken_policy_is_the_tools_error_never_the_guests_violation() {
    let t = Scratch::new("policy-broken");
    let typo = "[[rule]]\nname = \"v2\"\ncpu.model = \"Nehalm\"\n";
    let allow = t.write(
        "allow.toml",
        format!("version = 1\n[hook]\non_violation = \"deny\"\non_error = \"allow\"\n{typo}"),
    );
    let deny = t.write(
        "deny.toml",
        format!("version = 1\n[hook]\non_violation = \"warn\"\non_error = \"deny\"\n{typo}"),
    );
    // A selector that can match no guest anywhere is an error; one that matches nothing this
    // host runs (recorded libvirt 9.0's machine types) a warning.
    let arch = t.write(
        "arch.toml",
        "version = 1\n[[rule]]\nname = \"a\"\nmatch = { arch = \"x86-64\" }\ncpu.min_level = \"x86-64-v2\"\n",
    );
    let out = policy_check(&s(&arch));
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(
        out.stdout
            .contains("match.arch: 'x86-64' matches no arch libvirt knows")
            && out.stdout.contains("(did you mean x86_64?)"),
        "{}",
        out.stdout
    );
    let machine = t.write(
        "machine.toml",
        "version = 1\n[[rule]]\nname = \"m\"\nmatch = { machine = \"pc-q53*\" }\ncpu.min_level = \"x86-64-v2\"\n",
    );
    let out = Cmd::new(&["policy", "check"])
        .args(&recorded_host_without_kvm_domcaps())
        .arg(s(&machine))
        .run();
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert!(
        out.stdout
            .contains("warning: rule 'm': match.machine: 'pc-q53*' matches no machine type"),
        "{}",
        out.stdout
    );
    let out = policy_check(&s(&allow));
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(
        out.stdout
            .contains("'Nehalm' is not a CPU model of libvirt's cpu_map")
            && out.stdout.contains("(did you mean Nehalem?)")
            && out.stdout.contains("NOT usable on this host"),
        "{}",
        out.stdout
    );
    // `host --policy`: refused in one line, nothing on stdout.
    let host = Cmd::new(&["host", "--no-qemu-caps-cache", "--cpu-map"])
        .arg(recorded_map())
        .args(&["--policy", &s(&allow)])
        .run();
    assert_eq!(host.code, 2, "{}{}", host.stdout, host.stderr);
    assert!(host.stdout.is_empty(), "{}", host.stdout);
    assert!(
        host.stderr.contains("did you mean Nehalem?"),
        "{}",
        host.stderr
    );
    // The hook: the policy's mistake follows on_error, logged and counted as the hook's error.
    let guest = std::fs::read(root().join("examples/cloudstack-default-cpu.xml")).unwrap();
    let hook = |policy: &PathBuf, tag: &str| {
        let state = t.path(&format!("state-{tag}"));
        let log = t.path(&format!("hook-{tag}.log"));
        let out = Cmd::new(&["hook", "--no-qemu-caps-cache", "--policy"])
            .arg(s(policy))
            .args(&["--log-file", &s(&log), "--snapshot-dir", &s(&state)])
            .args(&["i-2-14-VM", "prepare", "begin", "-"])
            .stdin(guest.clone())
            .run();
        let log = std::fs::read_to_string(&log).unwrap_or_default();
        let counts = std::fs::read_to_string(state.join("hook-decisions")).unwrap_or_default();
        (out, log, counts)
    };
    let (out, log, counts) = hook(&allow, "allow");
    assert_eq!(
        out.code, 0,
        "on_error = allow lets it start: {}",
        out.stderr
    );
    assert!(
        log.contains("rule=\"[hook] on_error\"") && log.contains("code=\"policy\""),
        "logged as the hook's error:\n{log}"
    );
    assert!(log.contains("'Nehalm'"), "{log}");
    assert!(counts.contains("hook-error-allowed 1"), "{counts}");
    assert!(counts.contains("hook-violation-refused 0"), "{counts}");
    let (out, log, counts) = hook(&deny, "deny");
    assert_eq!(out.code, 1, "on_error = deny refuses: {}", out.stderr);
    assert!(
        out.stderr.contains("the hook cannot check this guest") && out.stderr.contains("Nehalm"),
        "{}",
        out.stderr
    );
    assert!(
        log.contains("decision=\"refuse (on_error = deny)\""),
        "{log}"
    );
    assert!(counts.contains("hook-error-refused 1"), "{counts}");
}

/// libvirt's status files of running transient guests, written by libvirt 7.0, 9.0, 11.3 and 12.8
/// (`tests/data/status`, `tests/libvirt/capture-status`): `audit` judges each on its live XML, as
/// `check` judges that `<domain>`, and `fleet` reads them as running guests.
#[test]
fn status_files_of_four_libvirts_are_audited_and_read_by_fleet() {
    let dir = root().join("tests/data/status");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert_eq!(files.len(), 4, "{files:?}");
    let out = Cmd::new(&["audit", "--format", "json"])
        .args(&recorded_host_without_kvm_domcaps())
        .arg(s(&dir))
        .run();
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect(&out.stderr);
    assert_eq!(v["unreadable"], serde_json::json!([]), "{}", out.stdout);
    let guests = v["guests"].as_array().unwrap();
    assert_eq!(guests.len(), 4);
    for g in guests {
        assert_eq!(g["running"], true, "{g}");
        // The verdict is check's on the <domain> inside the status file.
        let file = g["file"].as_str().unwrap();
        let text = std::fs::read_to_string(file).unwrap();
        let start = text.find("<domain ").expect("a <domain> inside");
        let end = text.rfind("</domain>").unwrap() + "</domain>".len();
        let c = Cmd::new(&["check", "--format", "json"])
            .args(&recorded_host_without_kvm_domcaps())
            .stdin(text[start..end].to_string())
            .run();
        let cv: serde_json::Value = serde_json::from_str(&c.stdout).unwrap();
        assert_eq!(g["verdict"], cv["verdict"], "{file}");
        assert_eq!(g["findings"], cv["findings"], "{file}");
    }
    let text = Cmd::new(&["audit"])
        .args(&recorded_host_without_kvm_domcaps())
        .arg(s(&dir))
        .run();
    assert_eq!(
        text.stdout.matches(" (running) ").count(),
        4,
        "{}",
        text.stdout
    );
    // fleet: each a running guest (its arrival on another host is a live migration).
    let fleet = Cmd::new(&["fleet", "--pairs", "--format", "json"])
        .arg(s(&root().join("tests/data/facts/bookworm.xml")))
        .arg(s(&dir))
        .run();
    let fv: serde_json::Value = serde_json::from_str(&fleet.stdout).expect(&fleet.stderr);
    assert_eq!(fv["pairs"].as_array().unwrap().len(), 4, "{}", fleet.stdout);
    assert_eq!(fv["incomplete"]["complete"], true, "{}", fleet.stdout);
}

/// A transient guest started here (CloudStack's way: `virsh create`, nothing defined) is in
/// `audit`'s default answer, judged on its live XML.
#[test]
#[ignore = "needs a running libvirtd and root (tests/libvirt/start; .ci/run)"]
fn audit_as_found_judges_a_running_transient_guest() {
    require_libvirtd();
    assert!(is_root(), "the status files are root's");
    let name = format!("vcp-operator-{}-i-2-55-VM", std::process::id());
    let _sweep = Sweep {
        uri: crate::harness::URI.to_string(),
        prefix: name.clone(),
    };
    let t = Scratch::new("operator-transient");
    let xml = t.write(
        "g.xml",
        format!("<domain type='qemu'><name>{name}</name><description>Debian GNU/Linux 12 (64-bit)</description><memory unit='MiB'>64</memory><vcpu>1</vcpu><os><type arch='x86_64' machine='pc'>hvm</type></os><devices><memballoon model='none'/></devices></domain>"),
    );
    let created = virsh(&["create", "--paused", &s(&xml)]);
    assert!(created.ok, "{}", created.stderr);
    for args in [
        vec!["audit"],
        vec!["audit", "--running", "/nonexistent-dir"],
    ] {
        let out = Cmd::new(&args).arg("--format").arg("json").run();
        let v: serde_json::Value = serde_json::from_str(&out.stdout).expect(&out.stderr);
        let g = v["guests"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["guest"] == name.as_str())
            .unwrap_or_else(|| panic!("{args:?}: {name} not audited:\n{}", out.stdout));
        assert_eq!(g["running"], true);
        assert_eq!(
            g["file"].as_str().unwrap(),
            format!("/run/libvirt/qemu/{name}.xml")
        );
        assert_ne!(g["verdict"], "out-of-scope", "{g}");
    }
}

/// An answer built on missing evidence is never "safe": a file that is not facts, guests naming
/// a host not in the fleet, a host named by its FQDN where its facts give the short name, a host
/// whose guests are not known.
#[test]
fn a_fleet_answer_says_what_it_could_not_take_into_account() {
    let t = Scratch::new("fleet-gaps");
    let facts = |g: &str| root().join(format!("tests/data/facts/{g}.xml"));
    std::fs::create_dir_all(t.path("f")).unwrap();
    std::fs::copy(facts("bookworm"), t.path("f/bookworm.xml")).unwrap();
    std::fs::copy(facts("trixie"), t.path("f/trixie.xml")).unwrap();
    let guest = |name: &str| {
        format!(
            "<guest name='{name}' state='shutoff'><domain type='qemu'><name>{name}</name><vcpu>1</vcpu><os><type arch='x86_64' machine='pc'>hvm</type></os><cpu mode='custom'><model>qemu64</model></cpu></domain></guest>"
        )
    };
    // bookworm's guests, published under its FQDN (EL's node name); guests of a host gone.
    t.write(
        "f/bookworm.example.org.guests.xml",
        format!(
            "<guestFacts host='Bookworm.example.org'>{}{}</guestFacts>",
            guest("web-1"),
            guest("web-2")
        ),
    );
    t.write(
        "f/gone.guests.xml",
        format!("<guestFacts host='gone'>{}</guestFacts>", guest("db-1")),
    );
    let fleet = |args: &[&str]| Cmd::new(&["fleet"]).args(args).arg(s(&t.path("f"))).run();
    // Complete: the FQDN matched and said; drain of bookworm by either name.
    let out = fleet(&["--drain", "bookworm"]);
    assert!(
        out.stdout.contains(
            "note: host 'Bookworm.example.org' (as guest facts or the command name it) taken as host 'bookworm'"
        ),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.starts_with("drain bookworm: 2 guests"),
        "{}",
        out.stdout
    );
    // ... but guests of `gone` are not known to any drain: incomplete, exit 4.
    assert_eq!(out.code, 4, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("host 'gone' of 1 guest(s)"),
        "{}",
        out.stdout
    );
    assert!(
        out.stderr.contains("the answer is incomplete"),
        "{}",
        out.stderr
    );
    let by_fqdn = fleet(&["--drain", "bookworm.example.org"]);
    assert!(
        by_fqdn.stdout.starts_with("drain bookworm: 2 guests"),
        "{}",
        by_fqdn.stdout
    );
    // trixie published no guest facts: its guests are not known, never "0 guests".
    let out = fleet(&["--drain", "trixie"]);
    assert_eq!(out.code, 4, "{}", out.stdout);
    assert!(
        out.stdout
            .starts_with("drain trixie: its guests are not known: no guest facts name trixie"),
        "{}",
        out.stdout
    );
    let json = fleet(&["--drain", "trixie", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(v["guests_known"], false);
    assert_eq!(
        v["incomplete"]["guests_not_known"],
        serde_json::json!(["trixie"])
    );
    // A file that is not facts: named, the rest still judged, exit 4 (not 2).
    t.write("f/notes.xml", "this is not XML");
    let out = fleet(&[]);
    assert_eq!(out.code, 4, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("not read: "), "{}", out.stdout);
    assert!(out.stdout.contains("notes.xml"), "{}", out.stdout);
    assert!(
        out.stdout.contains("bookworm"),
        "the hosts are still judged: {}",
        out.stdout
    );
    let prom = fleet(&["--format", "prometheus"]);
    assert!(
        prom.stdout.contains("virt_cpu_policy_fleet_unread_files 1"),
        "{}",
        prom.stdout
    );
    assert!(
        prom.stdout
            .contains("virt_cpu_policy_fleet_unknown_host_guests 1"),
        "{}",
        prom.stdout
    );
    // Once every input is known: exit 0.
    std::fs::remove_file(t.path("f/notes.xml")).unwrap();
    std::fs::remove_file(t.path("f/gone.guests.xml")).unwrap();
    t.write("f/trixie.guests.xml", "<guestFacts host='trixie'/>");
    let out = fleet(&["--drain", "trixie"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.starts_with("drain trixie: 0 guests"),
        "{}",
        out.stdout
    );
    // An old guest-facts file under the host's other name, left beside the new one: its guests
    // would count twice, refused as two host-facts files of one host are.
    t.write(
        "f/Trixie.example.org.guests.xml",
        "<guestFacts host='Trixie.example.org'/>",
    );
    let out = fleet(&["--drain", "trixie"]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    assert!(
        out.stderr.contains("gives the guests of host 'trixie' as"),
        "{}",
        out.stderr
    );
}

/// CloudStack's own guest, rewritten by the default policy to x86-64-v2, judged against each
/// recorded host's facts (`../shared/corpus/kvm-truth/`, an AMD EPYC with nested KVM and an Intel
/// Xeon with paravirtual KVM, four libvirts each): libvirt starts it there and QEMU drops popcnt,
/// pni, sse4.1, sse4.2 and ssse3 (the recorded live CPU), so `check` refuses it naming them.
#[test]
#[cfg_attr(
    not(vcp_shared_corpus),
    ignore = "needs ../shared/corpus beside the checkout"
)]
fn the_cloudstack_example_is_refused_where_kvm_drops_its_level() {
    let policy = s(&root().join("packaging/policy.toml"));
    let rewritten = Cmd::new(&["rewrite", "--policy", &policy])
        .args(&recorded_host_without_kvm_domcaps())
        .arg(s(&root().join("examples/cloudstack-default-cpu.xml")))
        .run();
    assert_eq!(rewritten.code, 0, "{}", rewritten.stderr);
    let mut judged = 0;
    let hosts = crate::kvm_truth::recorded_hosts();
    let mut expected = 0;
    for host in &hosts {
        let generations = crate::kvm_truth::recorded_generations(host);
        expected += generations.len();
        for (g, dir) in generations {
            let g = g.as_str();
            let out = Cmd::new(&["check", "--no-qemu-caps-cache", "--policy", &policy])
                .args(&["--caps", &s(&dir.join("capabilities.xml"))])
                .args(&["--caps", &s(&dir.join("domcapabilities-x86_64-pc-kvm.xml"))])
                .args(&[
                    "--cpu-map",
                    &s(&root()
                        .join("tests/data/generations")
                        .join(g)
                        .join("cpu_map")),
                ])
                .stdin(rewritten.stdout.clone())
                .run();
            let what = format!("{} {g}", host.display());
            assert_eq!(out.code, 1, "{what}: {}", out.stdout);
            assert!(
                out.stdout.contains(
                    "error[cpu-level]: the guest CPU (its model and the features it requires) reaches x86-64-v2, but KVM on this host does not give popcnt, pni, sse4.1, sse4.2, ssse3"
                ),
                "{what}: {}",
                out.stdout
            );
            judged += 1;
        }
    }
    assert_eq!(judged, expected);
}

/// The issue's report, on the project's own recorded facts (libvirt 9.0's, `tests/data/generations
/// /bookworm`, whose KVM domcapabilities mark `qemu64` usable='no' and give a `kvm64` host-model
/// CPU): CloudStack's example rewritten to x86-64-v2 was "conforms"; it is refused, the features
/// QEMU would drop named, and the rewrite itself refuses rather than write a guest that would run
/// at x86-64-v1.
#[test]
fn the_rewritten_cloudstack_example_is_refused_on_the_recorded_host() {
    let policy = s(&root().join("packaging/policy.toml"));
    let example = s(&root().join("examples/cloudstack-default-cpu.xml"));
    let rewritten = Cmd::new(&["rewrite", "--policy", &policy])
        .args(&recorded_host_without_kvm_domcaps())
        .arg(&example)
        .run();
    assert_eq!(rewritten.code, 0, "{}", rewritten.stderr);
    let out = Cmd::new(&["check", "--policy", &policy])
        .args(&crate::harness::recorded_host())
        .stdin(rewritten.stdout.clone())
        .run();
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(
        out.stdout.contains("error[cpu-level]: the guest CPU (its model and the features it requires) reaches x86-64-v2, but KVM on this host does not give popcnt, pni, sse4.1, sse4.2, ssse3")
            && out.stdout.contains("so the guest runs at x86-64-v1"),
        "{}",
        out.stdout
    );
    let refused = Cmd::new(&["rewrite", "--policy", &policy])
        .args(&crate::harness::recorded_host())
        .arg(&example)
        .run();
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    assert!(refused.stdout.is_empty(), "{}", refused.stdout);
    assert!(
        refused.stderr.contains("error[cpu-level]"),
        "{}",
        refused.stderr
    );
}

/// The same inputs give the same answers on any machine: without a host's own cpu_map, a model
/// name this machine's libvirt does not know (`Haswell-v2`, libvirt 11's, on a libvirt 9.0
/// machine) is not compared, never refused; with each host's cpu_map, the hosts whose libvirt
/// knows it run the guest and the others refuse it.
#[test]
fn a_model_name_is_judged_with_the_hosts_own_cpu_map_or_not_compared() {
    let data = root().join("tests/data");
    let pairs = |maps: &[String]| {
        let out = Cmd::new(&["fleet", "--pairs", "--format", "json"])
            .args(maps)
            .arg(s(&data.join("facts")))
            .arg(s(&data.join("fleet")))
            .run();
        let v: serde_json::Value = serde_json::from_str(&out.stdout).expect(&out.stderr);
        v["pairs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["guest"] == "db-1")
            .map(|p| {
                (
                    p["host"].as_str().unwrap().to_string(),
                    p["verdict"].as_str().unwrap().to_string(),
                )
            })
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    // No --cpu-map: this machine's cpu_map (or the built-in copy of libvirt 9.0's where it has
    // none), no host's own.
    let unknown = pairs(&[]);
    assert!(
        unknown.values().all(|v| v == "not-compared"),
        "no host's cpu_map given: {unknown:?}"
    );
    let maps: Vec<String> = ["bullseye", "bookworm", "trixie", "forky"]
        .iter()
        .flat_map(|g| {
            [
                "--cpu-map".to_string(),
                format!(
                    "{g}={}",
                    s(&data.join("generations").join(g).join("cpu_map"))
                ),
            ]
        })
        .collect();
    let own = pairs(&maps);
    assert_eq!(own["trixie"], "runs", "{own:?}");
    assert_eq!(own["forky"], "runs", "{own:?}");
    assert_eq!(own["bookworm"], "cannot", "{own:?}");
    assert_eq!(own["bullseye"], "cannot", "{own:?}");
}
