//! `fleet --guest NAME`: one guest on every host, host by host what `fleet --pairs` says of it,
//! with the CPU it would have there (read from each generation's captured facts).

use super::{
    GENERATIONS, custom, guest, guest_facts, hosts_dir, json, kvm_guest, pair_reasons, reasons_of,
    run_fleet,
};
use crate::harness::{Scratch, generation_facts, s};
use serde_json::Value;

/// The model of the host-model CPU in generation `g`'s q35 domcapabilities of `virt` (`kvm` or
/// `qemu`), read from the captured file.
fn host_model_of(g: &str, virt: &str) -> String {
    let file = generation_facts(g).join(format!("domcapabilities-x86_64-q35-{virt}.xml"));
    let text = std::fs::read_to_string(&file).unwrap();
    let mode = text.find("<mode name='host-model'").unwrap();
    let model = &text[mode..];
    let start = model.find('>').unwrap();
    let model = &model[start..];
    let open = model.find("<model").unwrap();
    let from = open + model[open..].find('>').unwrap() + 1;
    let to = from + model[from..].find("</model>").unwrap();
    model[from..to].to_string()
}

/// `fleet --guest NAME --format json` over `facts`, its exit status checked.
#[track_caller]
fn guest_json(name: &str, facts: &[String], status: i32) -> Value {
    let mut args = vec![
        "--guest".to_string(),
        name.to_string(),
        "--format".into(),
        "json".into(),
    ];
    args.extend(facts.iter().cloned());
    let out = run_fleet(&args);
    out.status(status);
    json(&out)
}

/// Every guest of bookworm — TCG and KVM, custom, host-model, host-passthrough, maximum, one
/// running that can go nowhere — on the four generations: each host's verdict and reasons are
/// its pair's in `fleet --pairs`, the CPU is the one libvirt gives there (the host-model CPU of
/// the host's domcapabilities of the guest's virt type, the host's own for host-passthrough,
/// QEMU's `max` for TCG `maximum`), the exit is 1 only for the guest no other host runs, and a
/// guest is found by its UUID too.
#[test]
fn one_guest_on_every_host_is_its_pairs_with_the_cpu_it_would_have() {
    let t = Scratch::new("fleet-guest");
    let hosts = hosts_dir(&t, "hosts", &GENERATIONS);
    let live = "<cpu mode='custom' match='exact' check='partial'><model fallback='forbid'>EPYC</model><vendor>AMD</vendor>\
                <feature policy='require' name='pcommit'/><feature policy='require' name='avx2'/></cpu>";
    let web = guest("web-1", "pc-q35-5.2", &custom("qemu64", "")).replace(
        "<vcpu>",
        "<uuid>5A1D3B7C-0E4F-4E5A-9B1C-2D3E4F5A6B7C</uuid><vcpu>",
    );
    let guests = [
        ("web-1", "shutoff", web),
        (
            "db-1",
            "shutoff",
            guest("db-1", "pc-q35-5.2", &custom("Haswell-v2", "")),
        ),
        (
            "tcg-hm",
            "shutoff",
            guest("tcg-hm", "pc-q35-5.2", "<cpu mode='host-model'/>"),
        ),
        (
            "kvm-hm",
            "shutoff",
            kvm_guest("kvm-hm", "x86_64", "pc-q35-5.2", "<cpu mode='host-model'/>"),
        ),
        (
            "kvm-pt",
            "shutoff",
            kvm_guest(
                "kvm-pt",
                "x86_64",
                "pc-q35-5.2",
                "<cpu mode='host-passthrough'/>",
            ),
        ),
        (
            "build",
            "shutoff",
            guest("build", "pc-q35-5.2", "<cpu mode='maximum'/>"),
        ),
        ("live", "running", guest("live", "pc-q35-5.2", live)),
    ];
    t.write("bookworm.guests.xml", guest_facts("bookworm", &guests));
    let facts = [s(&hosts), s(&t.path("bookworm.guests.xml"))];
    let mut args = vec!["--pairs".to_string(), "--format".into(), "json".into()];
    args.extend(facts.iter().cloned());
    let pairs = pair_reasons(&json(&run_fleet(&args)));
    for (name, _, _) in &guests {
        let status = if *name == "live" { 1 } else { 0 };
        let v = guest_json(name, &facts, status);
        let [one] = v["guests"].as_array().unwrap().as_slice() else {
            panic!("one guest named {name}: {v:#}");
        };
        assert_eq!(one["guest"], *name);
        assert_eq!(one["host"], "bookworm");
        let answers = one["hosts"].as_array().unwrap();
        assert_eq!(answers.len(), GENERATIONS.len(), "{v:#}");
        for a in answers {
            let host = a["host"].as_str().unwrap().to_string();
            let reasons = reasons_of(&a["reasons"]);
            assert_eq!(
                reasons,
                pairs[&(name.to_string(), host.clone())],
                "{name} on {host}"
            );
            let verdict = if reasons.is_empty() {
                "runs"
            } else {
                a["verdict"].as_str().unwrap()
            };
            assert_eq!(a["verdict"], verdict);
            let cpu = &a["cpu"];
            let model = cpu["model"].as_str();
            let want = match *name {
                "web-1" => Some("qemu64".to_string()),
                "db-1" => Some("Haswell-v2".to_string()),
                "live" => Some("EPYC".to_string()),
                "tcg-hm" => Some(host_model_of(&host, "qemu")),
                "kvm-hm" => Some(host_model_of(&host, "kvm")),
                "build" => Some("max".to_string()),
                _ => None,
            };
            if let Some(want) = want {
                assert_eq!(model, Some(want.as_str()), "{name} on {host}: {cpu}");
            } else {
                // host-passthrough: the host's own CPU, named by its capabilities.
                let caps =
                    std::fs::read_to_string(generation_facts(&host).join("capabilities.xml"))
                        .unwrap();
                let m = model.unwrap_or_else(|| panic!("{name} on {host}: {cpu}"));
                assert!(
                    caps.contains(&format!("<model>{m}</model>")),
                    "{name} on {host}: {m}"
                );
            }
        }
        if *name == "web-1" {
            for a in answers {
                assert_eq!(a["cpu"]["level"], "x86-64-v1", "{a:#}");
                assert_eq!(a["cpu"]["level_basis"], "model", "{a:#}");
            }
            let by_uuid = guest_json("5a1d3b7c-0e4f-4e5a-9b1c-2d3e4f5a6b7c", &facts, 0);
            assert_eq!(by_uuid, v);
        }
    }
    let mut args = vec!["--guest".to_string(), "live".into()];
    args.extend(facts.iter().cloned());
    let out = run_fleet(&args);
    out.status(1);
    assert_eq!(
        out.stderr,
        "virt-cpu-policy: no other host runs live (on bookworm)\n"
    );
    assert!(out.stdout.starts_with("guest live on bookworm (running: a host takes it by live migration, with the CPU it has)\n"), "{}", out.stdout);
    assert!(
        out.stdout
            .contains("  forky: cannot; CPU EPYC (custom), level x86-64-v3\n"),
        "{}",
        out.stdout
    );
    let mut args = vec!["--guest".to_string(), "web-1".into()];
    args.extend(facts.iter().cloned());
    let out = run_fleet(&args);
    out.status(0);
    for g in GENERATIONS {
        let own = if g == "bookworm" { " (its host)" } else { "" };
        let line = format!("  {g}{own}: runs; CPU qemu64 (custom), level x86-64-v1\n");
        assert!(out.stdout.contains(&line), "{line}\n{}", out.stdout);
    }
}

/// A guest no facts hold is bad input: exit 2, one line on stderr, nothing on stdout.
#[test]
fn an_unknown_guest_is_exit_2_with_one_line() {
    let t = Scratch::new("fleet-guest-unknown");
    let hosts = hosts_dir(&t, "hosts", &GENERATIONS);
    let out = run_fleet(&["--guest".to_string(), "web-l".into(), s(&hosts)]);
    out.status(2);
    assert_eq!(out.stdout, "");
    assert_eq!(
        out.stderr,
        "virt-cpu-policy: no guest named 'web-l' (nor of that UUID) among the guest facts given\n"
    );
}

/// A guest not found while a facts file could not be read is not known, not absent: exit 4
/// (the answer is incomplete), the file not read named in the report; and a paused
/// guest (`<guest state='paused'>`) is read as running, the file's other guests with it.
#[test]
fn a_guest_not_found_among_facts_not_all_read_is_not_known() {
    let t = Scratch::new("fleet-guest-incomplete");
    let hosts = hosts_dir(&t, "hosts", &GENERATIONS);
    let broken = t.write(
        "broken.guests.xml",
        "<guestFacts host='bookworm'><guest name='x' id='1' id='2'/>",
    );
    let out = run_fleet(&["--guest".to_string(), "db-9".into(), s(&hosts), s(&broken)]);
    out.status(4);
    assert!(
        out.stderr.contains("no guest named 'db-9'") && out.stderr.contains("incomplete"),
        "{}",
        out.stderr
    );
    assert!(out.stdout.contains("broken.guests.xml"), "{}", out.stdout);

    let domain = guest("db-9", "pc-q35-5.2", &custom("qemu64", ""));
    let paused = t.write(
        "paused.guests.xml",
        guest_facts(
            "bookworm",
            &[
                ("db-9", "paused", domain.clone()),
                ("web-9", "shutoff", domain),
            ],
        ),
    );
    let v = guest_json("db-9", &[s(&hosts), s(&paused)], 0);
    assert_eq!(v["guests"][0]["state"], "running", "{v:#}");
    let w = guest_json("web-9", &[s(&hosts), s(&paused)], 0);
    assert_eq!(w["guests"][0]["state"], "shutoff", "{w:#}");
}
