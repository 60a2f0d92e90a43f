//! The table's entries against their documented combinations, and the table's own rules.

use super::*;

fn r(libvirt: &str, qemu: &str) -> Releases {
    Releases {
        libvirt: Some(libvirt.parse().unwrap()),
        qemu: Some(qemu.parse().unwrap()),
    }
}

fn kvm_threads(threads: u32) -> GuestShape {
    GuestShape {
        virt_type: "kvm".into(),
        threads,
        running: true,
        ..GuestShape::default()
    }
}

#[test]
fn every_entry_has_its_words_and_source_and_a_unique_id() {
    let t = table();
    assert!(t.len() >= 4, "{}", t.len());
    let mut ids = std::collections::BTreeSet::new();
    for h in t {
        assert!(ids.insert(h.id.clone()), "{}: id twice", h.id);
        for (field, text) in [
            ("what", &h.what),
            ("symptom", &h.symptom),
            ("fix", &h.fix),
            ("source", &h.source),
            ("reproduced", &h.reproduced),
        ] {
            assert!(!text.trim().is_empty(), "{}: no {field}", h.id);
        }
    }
}

/// The rig's pairs (tests/fleet/migrate): started on 9.0/7.2, to 11.3/10.0 it fails, to
/// 12.8/11.1 it migrates; one thread per core, or TCG, or a stopped guest, meets nothing.
#[test]
fn the_ht_hazard_holds_for_the_failing_pair_only() {
    let bookworm = r("9.0.0", "7.2.22");
    let ids = |shape: &GuestShape, src: Option<Releases>, dst: Releases| -> Vec<&str> {
        matching(shape, src, dst, Some("AMD"))
            .into_iter()
            .map(|h| h.id.as_str())
            .collect()
    };
    let trixie = r("11.3.0", "10.0.7");
    let forky = r("12.8.0", "11.1.0");
    assert_eq!(
        ids(&kvm_threads(2), Some(bookworm), trixie),
        ["ht-extra-after-qemu-10"]
    );
    assert!(ids(&kvm_threads(2), Some(bookworm), forky).is_empty());
    assert!(ids(&kvm_threads(1), Some(bookworm), trixie).is_empty());
    let tcg = GuestShape {
        virt_type: "qemu".into(),
        ..kvm_threads(2)
    };
    assert!(ids(&tcg, Some(bookworm), trixie).is_empty());
    let stopped = GuestShape {
        running: false,
        ..kvm_threads(2)
    };
    assert!(ids(&stopped, Some(bookworm), trixie).is_empty());
    // A release not given is not taken as one: the pair is not compared for it.
    let unknown = Releases {
        qemu: None,
        ..trixie
    };
    assert!(ids(&kvm_threads(2), Some(bookworm), unknown).is_empty());
    let told: Vec<_> = at_destination(unknown, Some("AMD"))
        .into_iter()
        .filter_map(|(h, lacks)| for_guest(h, &lacks, &kvm_threads(2), Some(bookworm)))
        .collect();
    assert_eq!(
        told,
        [Outcome::Unknown(vec!["the destination's QEMU release"])]
    );
    // libvirt 12.4 with a QEMU before 7.2: every guest, running or not.
    let odd = r("12.4.0", "7.1.0");
    assert_eq!(ids(&stopped, None, odd), ["libvirt-12.4-qemu-7.2"]);
}

/// The ids the table names for a guest of `shape` from `src` to `dst` (vendor not given).
fn ids(shape: &GuestShape, src: Option<Releases>, dst: Releases) -> Vec<&'static str> {
    matching(shape, src, dst, None)
        .into_iter()
        .map(|h| h.id.as_str())
        .collect()
}

fn stopped_on(machine: &str) -> GuestShape {
    GuestShape {
        virt_type: "kvm".into(),
        threads: 1,
        machine: machine_version(machine),
        ..GuestShape::default()
    }
}

#[test]
fn machine_versions_are_read_from_versioned_names_only() {
    let v = |m: &str| machine_version(m).map(|v| v.to_string());
    assert_eq!(v("pc-i440fx-2.3").as_deref(), Some("2.3.0"));
    assert_eq!(v("pc-q35-4.0.1").as_deref(), Some("4.0.1"));
    assert_eq!(v("pc-1.3").as_deref(), Some("1.3.0"));
    assert_eq!(v("pc"), None);
    assert_eq!(v("q35"), None);
    assert_eq!(v("pc-q35-rhel9.2.0"), None);
    assert_eq!(v("virt-9.0"), None);
}

/// Each removed machine type: the guest (stopped, or arriving) on the first QEMU without it
/// meets its entry alone; on the QEMU before, or with the next machine type, nothing. The
/// rig's generations: bookworm (9.0/7.2), trixie (11.3/10.0), forky (12.8/11.1).
#[test]
fn a_removed_machine_type_holds_from_the_qemu_that_removed_it() {
    // (id, machine, the first QEMU without it, the QEMU before, the next machine type)
    let cases = [
        (
            "machine-pc-1.x-gone-qemu-6.0",
            "pc-1.3",
            "6.0.0",
            "5.2.0",
            "pc-i440fx-1.4",
        ),
        (
            "machine-1.4-gone-qemu-8.2",
            "pc-i440fx-1.7",
            "8.2.0",
            "8.1.0",
            "pc-i440fx-2.0",
        ),
        (
            "machine-2.0-gone-qemu-9.1",
            "pc-i440fx-2.3",
            "9.1.0",
            "9.0.0",
            "pc-i440fx-2.4",
        ),
        (
            "machine-2.4-gone-qemu-10.1",
            "pc-q35-4.0.1",
            "10.1.0",
            "10.0.0",
            "pc-q35-4.2",
        ),
        (
            "machine-4.2-gone-qemu-10.2",
            "pc-q35-4.2",
            "10.2.0",
            "10.1.0",
            "pc-q35-5.0",
        ),
        (
            "machine-5.0-gone-qemu-11.0",
            "pc-i440fx-5.0",
            "11.0.0",
            "10.2.0",
            "pc-i440fx-5.1",
        ),
        (
            "machine-5.1-gone-qemu-11.1",
            "pc-q35-5.1",
            "11.1.0",
            "11.0.0",
            "pc-q35-5.2",
        ),
    ];
    for (id, machine, gone, before, next) in cases {
        // libvirt 11.0 drives every QEMU here (its floor, 5.2, is below all of them).
        let at = |q: &str| r("11.0.0", q);
        assert_eq!(ids(&stopped_on(machine), None, at(gone)), [id], "{machine}");
        let arriving = GuestShape {
            running: true,
            ..stopped_on(machine)
        };
        assert_eq!(
            ids(&arriving, Some(at(before)), at(gone)),
            [id],
            "{machine}"
        );
        assert!(
            ids(&stopped_on(machine), None, at(before)).is_empty(),
            "{machine}"
        );
        assert!(ids(&stopped_on(next), None, at(gone)).is_empty(), "{next}");
    }
    // Far past its removal, a machine type meets its own entry only.
    assert_eq!(
        ids(&stopped_on("pc-i440fx-2.3"), None, r("12.8.0", "11.1.2")),
        ["machine-2.0-gone-qemu-9.1"]
    );
    // An alias or a distribution's machine type is never taken for a version.
    let forky = r("12.8.0", "11.1.2");
    assert!(ids(&stopped_on("pc"), None, forky).is_empty());
    assert!(ids(&stopped_on("pc-q35-rhel9.2.0"), None, forky).is_empty());
    // The destination's QEMU not given: not claimed, and not said as not compared either
    // (the destination's machine types judge the guest: machine-unsupported).
    let unknown = Releases {
        qemu: None,
        ..forky
    };
    assert!(
        at_destination(unknown, None)
            .into_iter()
            .find_map(|(h, lacks)| for_guest(h, &lacks, &stopped_on("pc-i440fx-5.1"), None))
            .is_none()
    );
}

/// The rig's generations, as seen there (virsh define of a guest with the machine type:
/// refused with "does not support machine type", or defined).
#[test]
fn the_rigs_generations_meet_the_machine_types_they_refused() {
    let bookworm = r("9.0.0", "7.2.22");
    let trixie = r("11.3.0", "10.0.13");
    let forky = r("12.8.0", "11.1.2");
    assert_eq!(
        ids(&stopped_on("pc-1.3"), None, bookworm),
        ["machine-pc-1.x-gone-qemu-6.0"]
    );
    assert!(ids(&stopped_on("pc-i440fx-1.7"), None, bookworm).is_empty());
    assert_eq!(
        ids(&stopped_on("pc-i440fx-1.7"), None, trixie),
        ["machine-1.4-gone-qemu-8.2"]
    );
    assert!(ids(&stopped_on("pc-i440fx-2.4"), None, trixie).is_empty());
    assert_eq!(
        ids(&stopped_on("pc-i440fx-5.1"), None, forky),
        ["machine-5.1-gone-qemu-11.1"]
    );
    assert!(ids(&stopped_on("pc-i440fx-5.2"), None, forky).is_empty());
}

fn with_model(model: &str) -> GuestShape {
    GuestShape {
        virt_type: "qemu".into(),
        threads: 1,
        cpu_model: Some(model.into()),
        ..GuestShape::default()
    }
}

/// Icelake-Client: gone from QEMU 7.1 (the rig: starts on 7.0/5.2, refused on 9.0/7.2
/// under fallback='forbid'). A versioned model: unknown to libvirt before 10.10 (refused on
/// 9.0, starts on 11.3). Both are judged per guest by `cpu-model-unknown` (the
/// domcapabilities' models, the cpu_map): listed, never matched; their conditions hold for
/// their releases only.
#[test]
fn cpu_models_removed_or_unknown_hold_for_their_releases() {
    let bullseye = r("7.0.0", "5.2.0");
    let bookworm = r("9.0.0", "7.2.22");
    let trixie = r("11.3.0", "10.0.13");
    let entry = |id: &str| table().iter().find(|h| h.id == id).unwrap();
    let holds = |h: &Hazard, shape: &GuestShape, dst: Releases| {
        destination_lacks(h, dst, None)
            .is_some_and(|lacks| for_guest(h, &lacks, shape, None) == Some(Outcome::Holds))
    };
    let ice = with_model("Icelake-Client");
    assert!(ids(&ice, None, bookworm).is_empty());
    let gone = entry("icelake-client-gone-qemu-7.1");
    assert!(holds(gone, &ice, bookworm));
    assert!(holds(gone, &ice, r("9.0.0", "7.1.0")));
    assert!(!holds(gone, &ice, r("9.0.0", "7.0.0")));
    assert!(!holds(gone, &ice, bullseye));
    assert!(!holds(gone, &with_model("Icelake-Server"), bookworm));
    let v1 = with_model("Skylake-Client-v1");
    assert!(ids(&v1, None, bookworm).is_empty());
    let versioned = entry("versioned-cpu-model-before-libvirt-10.10");
    let conditions = |shape: &GuestShape, dst: Releases| holds(versioned, shape, dst);
    assert!(conditions(&v1, bookworm));
    assert!(conditions(&v1, r("10.9.0", "9.1.0")));
    assert!(!conditions(&v1, r("10.10.0", "9.1.0")));
    assert!(!conditions(&v1, trixie));
    assert!(!conditions(&with_model("Skylake-Client"), bookworm));
    assert!(is_versioned_model("Skylake-Client-v4"));
    assert!(is_versioned_model("EPYC-v10"));
    for m in ["qemu64", "EPYC-v", "-v1", "Skylake-Client-vx"] {
        assert!(!is_versioned_model(m), "{m}");
    }
}

fn running_with(enabled: &[&str], disabled: &[&str]) -> GuestShape {
    GuestShape {
        virt_type: "kvm".into(),
        threads: 1,
        running: true,
        cpu_model: Some("Skylake-Client".into()),
        features_enabled: enabled.iter().map(|f| (*f).to_string()).collect(),
        features_disabled: disabled.iter().map(|f| (*f).to_string()).collect(),
        ..GuestShape::default()
    }
}

/// libvirt 10.2.0 NEWS: a guest with vmx between before 9.10 and 9.10 to 10.1 fails either
/// way; 10.2 to 9.10-10.1 too; 10.2 with before 9.10 works. libvirt 10.5.0 NEWS: disabled
/// vmx-* features fail before 10.5.
#[test]
fn the_vmx_hazards_hold_for_the_pairs_libvirts_news_names() {
    // QEMU 8.2 everywhere: no QEMU-based entry takes part.
    let lv = |l: &str| r(l, "8.2.0");
    let vmx = running_with(&["vmx", "ssbd"], &[]);
    let pair = |s: &str, d: &str| ids(&vmx, Some(lv(s)), lv(d));
    assert_eq!(pair("9.9.0", "10.0.0"), ["vmx-features-to-libvirt-9.10"]);
    assert_eq!(pair("9.0.0", "9.10.0"), ["vmx-features-to-libvirt-9.10"]);
    assert!(pair("9.9.0", "10.2.0").is_empty());
    assert_eq!(pair("10.1.0", "9.9.0"), ["vmx-features-from-libvirt-9.10"]);
    assert!(pair("10.2.0", "9.9.0").is_empty());
    assert_eq!(
        pair("10.2.0", "10.1.0"),
        ["vmx-features-from-libvirt-10.2-to-9.10"]
    );
    assert_eq!(
        pair("11.3.0", "9.10.0"),
        ["vmx-features-from-libvirt-10.2-to-9.10"]
    );
    assert!(pair("10.0.0", "10.1.0").is_empty());
    assert!(pair("9.0.0", "9.9.0").is_empty());
    // No vmx, or a stopped guest: nothing.
    let plain = running_with(&["ssbd"], &[]);
    assert!(ids(&plain, Some(lv("9.9.0")), lv("10.0.0")).is_empty());
    let stopped = GuestShape {
        running: false,
        ..vmx.clone()
    };
    assert!(ids(&stopped, Some(lv("9.9.0")), lv("10.0.0")).is_empty());
    // The source host not known: not compared, naming its libvirt.
    let told: Vec<_> = at_destination(lv("10.0.0"), None)
        .into_iter()
        .filter_map(|(h, lacks)| for_guest(h, &lacks, &vmx, None).map(|o| (h.id.as_str(), o)))
        .collect();
    let source = || Outcome::Unknown(vec!["the libvirt release of the guest's source host"]);
    assert_eq!(
        told,
        [
            ("vmx-features-to-libvirt-9.10", source()),
            ("vmx-features-from-libvirt-10.2-to-9.10", source())
        ]
    );
    // Disabled vmx-* features: before 10.5 only, and only vmx-* ones.
    let off = running_with(&["vmx"], &["vmx-apicv-xapic"]);
    assert_eq!(
        ids(&off, Some(lv("10.4.0")), lv("10.4.0")),
        ["disabled-vmx-features-before-libvirt-10.5"]
    );
    assert!(ids(&off, Some(lv("10.5.0")), lv("10.5.0")).is_empty());
    let other_off = running_with(&["vmx"], &["ssbd"]);
    assert!(ids(&other_off, Some(lv("10.4.0")), lv("10.4.0")).is_empty());
}

/// libvirt 10.6.0 and 11.2.0 NEWS: the QEMU floor of each libvirt, for any guest; each
/// range of libvirt releases names its own floor only.
#[test]
fn each_libvirt_has_its_qemu_floor() {
    let any = GuestShape::default();
    let at = |l: &str, q: &str| ids(&any, None, r(l, q));
    assert_eq!(at("10.6.0", "5.1.0"), ["libvirt-10.6-qemu-5.2"]);
    assert_eq!(at("11.1.0", "5.1.0"), ["libvirt-10.6-qemu-5.2"]);
    assert!(at("10.5.0", "5.1.0").is_empty());
    assert!(at("10.6.0", "5.2.0").is_empty());
    assert_eq!(at("11.2.0", "6.1.0"), ["libvirt-11.2-qemu-6.2"]);
    assert_eq!(at("12.3.0", "5.0.0"), ["libvirt-11.2-qemu-6.2"]);
    assert!(at("11.2.0", "6.2.0").is_empty());
    assert_eq!(at("12.4.0", "6.1.0"), ["libvirt-12.4-qemu-7.2"]);
}

/// An entry that needs facts the tool has not is listed and never matched, whatever the
/// releases: libvirt 10.10's -v1 names, 10.2.0's custom migration XML, 8.9's baseline.
#[test]
fn entries_that_need_other_facts_are_never_matched() {
    let needing = [
        "v1-cpu-model-libvirt-10.10",
        "custom-xml-libvirt-10.2",
        "baseline-blockers-check-full-before-libvirt-8.9",
    ];
    for id in needing {
        let h = table().iter().find(|h| h.id == id).expect(id);
        assert!(!h.when.needs.is_empty(), "{id}");
    }
    for dst in [
        r("10.10.0", "9.1.0"),
        r("8.8.0", "7.1.0"),
        r("10.2.0", "8.2.0"),
    ] {
        let kept: Vec<_> = at_destination(dst, Some("Intel"))
            .into_iter()
            .map(|(h, _)| h.id.as_str())
            .collect();
        assert!(!kept.iter().any(|k| needing.contains(k)), "{kept:?}");
    }
}

/// docs/hazards.md documents the table: every entry's id, with the reason it is named
/// under (`stack-hazard`).
#[test]
fn every_entry_is_documented() {
    let docs = include_str!("../../docs/hazards.md");
    assert!(docs.contains("`stack-hazard`"));
    for h in table() {
        assert!(
            docs.contains(&format!("| `{}` |", h.id)),
            "{} not in docs/hazards.md",
            h.id
        );
    }
}
