//! The libvirt generations of the test rig (`tests/libvirt/generations`): bullseye's libvirt 7.0
//! / QEMU 5.2, the machine's bookworm 9.0 / 7.2, trixie's 11.3 / 10.0 and forky's 12.8 / 11.1,
//! each with its own daemon. These tests check the rig itself and the facts captured from it
//! (`tests/data/generations`, written by `tests/libvirt/capture-facts`), which other tests
//! judge the tool with: that each generation is a host of its own, and that the captured facts
//! are still what its libvirt and QEMU say.

use crate::harness::{Absent, Generation, Oracle, generations, select_generations};
use crate::oracles::query_machines;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// A generation that is not asked (for the selection test): only its name matters there.
fn fake(name: &str) -> Generation {
    Generation {
        name: name.to_string(),
        debian: "12".to_string(),
        oracle: Oracle {
            label: format!("libvirt 9.0.0 ({name})"),
            uri: "qemu:///system".to_string(),
            version: "9.0.0".to_string(),
            root: PathBuf::from("/"),
        },
    }
}

fn absent(name: &str) -> Absent {
    Absent {
        name: name.to_string(),
        uri: format!("qemu+unix:///system?socket=/var/tmp/{name}/run/libvirt/libvirt-sock"),
        reason: "its libvirtd does not answer: no such file".to_string(),
    }
}

#[test]
fn a_required_generation_that_does_not_answer_is_an_error_and_others_are_skipped() {
    let survey = || vec![Ok(fake("bookworm")), Err(absent("forky"))];
    let names = |v: &[Generation]| v.iter().map(|g| g.name.clone()).collect::<Vec<_>>();

    let (answering, left_out) = select_generations(survey(), "").expect("nothing required");
    assert_eq!(names(&answering), ["bookworm"]);
    assert_eq!(left_out.len(), 1);
    assert_eq!(left_out[0].name, "forky");

    let (answering, _) = select_generations(survey(), " bookworm ,").expect("bookworm answers");
    assert_eq!(names(&answering), ["bookworm"]);

    let e = select_generations(survey(), "bookworm,forky")
        .err()
        .expect("forky is required and absent");
    assert!(
        e.contains("forky") && e.contains("does not answer") && e.contains("no such file"),
        "{e}"
    );

    let e = select_generations(survey(), "sid")
        .err()
        .expect("sid is no generation");
    assert!(e.contains("'sid', not a generation"), "{e}");
}

/// `<host><uuid>` of `virsh capabilities`.
fn host_uuid(g: &Generation) -> String {
    let caps = g.virsh(&["capabilities"]);
    assert!(caps.ok, "{}: capabilities: {}", g.label, caps.stderr);
    let doc = roxmltree::Document::parse(&caps.stdout).expect("capabilities XML");
    doc.root_element()
        .children()
        .find(|n| n.has_tag_name("host"))
        .and_then(|h| h.children().find(|n| n.has_tag_name("uuid")))
        .and_then(|u| u.text())
        .unwrap_or_else(|| panic!("{}: no <host><uuid>", g.label))
        .to_string()
}

/// `MAJOR.MINOR.MICRO` as numbers, for ordering.
fn version_key(v: &str) -> Vec<u32> {
    v.split('.').map(|p| p.parse().unwrap_or(0)).collect()
}

#[test]
#[ignore = "needs the libvirt generations: .ci/run builds and starts them (tests/libvirt/generations)"]
fn every_generation_is_a_host_of_its_own() {
    let gens = generations();
    assert!(!gens.is_empty(), "no libvirt generation answers");
    let mut uuids = BTreeSet::new();
    for g in &gens {
        let uuid = host_uuid(g);
        assert!(
            uuids.insert(uuid.clone()),
            "{}: host UUID {uuid} is another generation's too (libvirt refuses a migration between them: \"Attempt to migrate guest to the same host\")",
            g.label
        );
        if !g.is_host() {
            let conf = std::fs::read_to_string(g.path("/etc/libvirt/libvirtd.conf")).unwrap();
            assert!(
                conf.lines().any(|l| l == format!("host_uuid = \"{uuid}\"")),
                "{}: the daemon's UUID {uuid} is not the host_uuid of its libvirtd.conf (tests/libvirt/root stop, then start)",
                g.label
            );
            let qemu = std::fs::read_to_string(g.path("/etc/libvirt/qemu.conf")).unwrap();
            assert!(
                qemu.lines().any(|l| l == "namespaces = [ ]"),
                "{}: no `namespaces = [ ]` in its qemu.conf",
                g.label
            );
        }
        eprintln!(
            "generations: {} (Debian {}, libvirt {}) at {}: host UUID {uuid}",
            g.name, g.debian, g.version, g.uri
        );
    }
    let versions: Vec<Vec<u32>> = gens.iter().map(|g| version_key(&g.version)).collect();
    assert!(
        versions.windows(2).all(|w| w[0] < w[1]),
        "generations not oldest first with distinct libvirt versions: {:?}",
        gens.iter().map(|g| &g.label).collect::<Vec<_>>()
    );
}

/// The value of the `KEY value` line of a facts `version` file.
fn version_line<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
}

/// The file names of a directory, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// (name, cpu-max, alias) of a captured `query-machines-ARCH.json`, one machine per line.
fn captured_machines(path: &Path) -> Vec<(String, u32, Option<String>)> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .map(|l| {
            let m: serde_json::Value = serde_json::from_str(l).expect("one JSON object a line");
            (
                m["name"].as_str().expect("name").to_string(),
                u32::try_from(m["cpu-max"].as_u64().expect("cpu-max")).expect("cpu-max fits"),
                m["alias"].as_str().map(str::to_string),
            )
        })
        .collect()
}

#[test]
#[ignore = "needs the libvirt generations: .ci/run builds and starts them (tests/libvirt/generations)"]
fn captured_facts_are_what_each_generation_says() {
    let regenerate = "regenerate them as root: tests/libvirt/capture-facts";
    for g in generations() {
        let facts = g.facts();
        assert!(
            facts.is_dir(),
            "{}: no captured facts at {} ({regenerate})",
            g.label,
            facts.display()
        );
        let version = std::fs::read_to_string(facts.join("version")).unwrap();
        let live = g.virsh(&["version"]);
        let qemu = live
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("Running hypervisor: QEMU "))
            .unwrap_or_else(|| panic!("{}: no QEMU version: {}", g.label, live.stdout));
        assert_eq!(
            (
                version_line(&version, "libvirt"),
                version_line(&version, "qemu")
            ),
            (Some(g.version.as_str()), Some(qemu.trim())),
            "{}: {}/version is stale ({regenerate})",
            g.label,
            facts.display()
        );

        let live_map = listing(&g.cpu_map());
        let list = std::fs::read_to_string(facts.join("cpu_map.list")).unwrap();
        assert_eq!(
            list.lines().collect::<Vec<_>>(),
            live_map,
            "{}: cpu_map.list is stale ({regenerate})",
            g.label
        );
        let copied = listing(&facts.join("cpu_map"));
        for name in &copied {
            assert_eq!(
                std::fs::read(facts.join("cpu_map").join(name)).unwrap(),
                std::fs::read(g.cpu_map().join(name)).unwrap(),
                "{}: cpu_map/{name} differs from its libvirt's ({regenerate})",
                g.label
            );
        }

        for arch in ["x86_64", "aarch64"] {
            let live = query_machines(&g, arch);
            let file = facts.join(format!("query-machines-{arch}.json"));
            if live.is_empty() {
                assert!(arch != "x86_64", "{}: no qemu-system-x86_64", g.label);
                continue;
            }
            let mut live = live;
            live.sort();
            let mut captured = captured_machines(&file);
            captured.sort();
            assert_eq!(
                captured,
                live,
                "{}: {} is stale ({regenerate})",
                g.label,
                file.display()
            );
        }
        eprintln!(
            "generations: {}: version, {} cpu_map files ({} copied) and query-machines as captured",
            g.label,
            live_map.len(),
            copied.len()
        );
    }
}
