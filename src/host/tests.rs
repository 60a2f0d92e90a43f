use super::*;
use crate::libvirt::cpu_def::FeaturePolicy;
use crate::libvirt::host_facts::document as host_facts_document;
use crate::testdata::corpus;

#[test]
#[cfg_attr(
    not(vcp_shared_corpus),
    ignore = "needs ../shared/corpus beside the checkout"
)]
fn reads_this_hosts_files() {
    let caps = corpus("host-libvirt-9.0-qemu-7.2/capabilities.xml");
    let dc = corpus("host-libvirt-9.0-qemu-7.2/domcapabilities-x86_64-q35-kvm.xml");
    let qc = corpus("host-libvirt-9.0-qemu-7.2/qemucaps-x86_64.xml");
    let h = Host::discover(&HostOptions {
        caps: vec![caps, dc, qc],
        ..HostOptions::default()
    })
    .unwrap();
    assert_eq!(
        h.canonical_machine("x86_64", "q35").as_deref(),
        Some("pc-q35-7.2")
    );
    let d = h.domcaps_for("x86_64", "kvm", "q35").unwrap();
    assert_eq!(d.vcpu_max, Some(288));
    assert_eq!(d.model_usable("qemu64"), Some(false));
    let hm = d.host_model.as_ref().unwrap();
    assert!(
        hm.features
            .contains(&("pni".into(), FeaturePolicy::Disable))
    );
    assert!(h.machines.iter().any(|m| m.name == "pc-q35-7.2"
        && m.virt_type.as_deref() == Some("qemu")
        && m.max_cpus == Some(288)));
}

const CAPS: &str = "<capabilities><host><cpu><arch>x86_64</arch><model>Skylake-Client-IBRS</model><vendor>Intel</vendor></cpu></host>\
    <guest><os_type>hvm</os_type><arch name='x86_64'><machine maxCpus='288'>pc-q35-7.2</machine>\
    <machine canonical='pc-q35-7.2' maxCpus='288'>q35</machine><domain type='kvm'/></arch></guest></capabilities>";
const DOMCAPS: &str = "<?xml version='1.0'?>\n<domainCapabilities><path>/usr/bin/qemu-system-x86_64</path><domain>kvm</domain>\
    <machine>pc-i440fx-7.2</machine><arch>x86_64</arch><vcpu max='255'/><cpu>\
    <mode name='host-model' supported='yes'><model fallback='forbid'>kvm64</model><vendor>Intel</vendor>\
    <feature policy='require' name='vme'/><feature policy='disable' name='pni'/></mode></cpu></domainCapabilities>";

/// A scratch directory for one test.
fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vcp-host-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn v(s: &str) -> LibvirtVersion {
    s.parse().unwrap()
}

#[test]
fn host_facts_file_gives_machines_domcaps_and_the_libvirt_version() {
    let dir = scratch("facts");
    let doc = host_facts_document("node-1 'a&b'", v("11.3.0"), None, CAPS, &[DOMCAPS]);
    assert!(
        doc.starts_with(
            "<hostFacts name='node-1 &apos;a&amp;b&apos;' libvirt='11.3.0'>\n<capabilities>"
        ),
        "{doc}"
    );
    assert!(!doc.contains("<?xml"), "{doc}");
    let f = dir.join("node-1.xml");
    std::fs::write(&f, &doc).unwrap();
    let h = Host::discover(&HostOptions {
        caps: vec![f.clone()],
        qemu_cache: Some(PathBuf::new()),
        ..HostOptions::default()
    })
    .unwrap();
    assert_eq!(
        h.canonical_machine("x86_64", "q35").as_deref(),
        Some("pc-q35-7.2")
    );
    let limit = h.machine_limit("x86_64", "kvm", "q35", None).unwrap();
    assert_eq!(
        (limit.max_cpus, limit.source.as_str()),
        (288, f.to_str().unwrap())
    );
    let d = h.domcaps_for("x86_64", "kvm", "pc").unwrap();
    let hm = d.host_model.as_ref().unwrap();
    assert_eq!(
        (hm.model.as_deref(), hm.vendor.as_deref()),
        (Some("kvm64"), Some("Intel"))
    );
    assert_eq!(
        hm.features,
        [
            ("vme".into(), FeaturePolicy::Require),
            ("pni".into(), FeaturePolicy::Disable)
        ]
    );
    let lv = h.libvirt_version().unwrap();
    assert_eq!(lv.value, v("11.3.0"));
    assert_eq!(
        lv.source,
        format!("<hostFacts libvirt='11.3.0'> in {}", f.display())
    );
    assert_eq!(h.files, vec![f.display().to_string()]);
    // Either document alone is a host-facts file too.
    let caps_only = dir.join("caps-only.xml");
    std::fs::write(
        &caps_only,
        host_facts_document("n", v("9.0.0"), None, CAPS, &[]),
    )
    .unwrap();
    let mut h = Host::discover(&HostOptions::default()).unwrap();
    h.read_caps_file(&caps_only).unwrap();
    assert!(h.domcaps.is_empty() && !h.machines.is_empty());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn libvirt_version_order_override_then_host_facts_then_selfvers() {
    let dir = scratch("order");
    let cache = dir.join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    std::fs::write(
        cache.join("x86_64.xml"),
        "<qemuCaps>\n<emulator>/usr/bin/qemu-system-x86_64</emulator>\n<selfvers>9000000</selfvers>\n</qemuCaps>\n",
    )
    .unwrap();
    let facts = dir.join("facts.xml");
    std::fs::write(
        &facts,
        host_facts_document("n", v("11.3.0"), None, CAPS, &[]),
    )
    .unwrap();
    let other = dir.join("other.xml");
    std::fs::write(
        &other,
        host_facts_document("m", v("10.0.0"), None, CAPS, &[]),
    )
    .unwrap();
    let no_version = dir.join("no-version.xml");
    std::fs::write(
        &no_version,
        format!("<hostFacts name='x'>{CAPS}</hostFacts>"),
    )
    .unwrap();
    let version = |caps: Vec<PathBuf>, over: Option<&str>| {
        let h = Host::discover(&HostOptions {
            caps,
            qemu_cache: Some(cache.clone()),
            libvirt_version: over.map(|o| Sourced {
                value: v(o),
                source: "--libvirt-version".into(),
            }),
            ..HostOptions::default()
        })
        .unwrap();
        h.libvirt_version()
            .map(|f| (f.value.to_string(), f.source.clone()))
            .unwrap()
    };
    assert_eq!(
        version(vec![facts.clone()], Some("10.10.0")),
        ("10.10.0".into(), "--libvirt-version".into())
    );
    let (value, source) = version(vec![no_version.clone(), facts.clone(), other], None);
    assert_eq!(value, "11.3.0", "the first file with a version wins");
    assert!(source.ends_with("facts.xml"), "{source}");
    // A capabilities file is the judged host's: this machine's cache is left out, so its
    // <selfvers> is not that host's version.
    let h = Host::discover(&HostOptions {
        caps: vec![no_version],
        qemu_cache: Some(cache.clone()),
        ..HostOptions::default()
    })
    .unwrap();
    assert!(h.libvirt_version().is_none());
    assert!(
        h.left_out()[0].contains("the judged host's capabilities"),
        "{:?}",
        h.left_out()
    );
    let (value, source) = version(vec![], None);
    assert_eq!(value, "9.0.0");
    assert!(source.starts_with("<selfvers> in "), "{source}");
    // A version that is not this machine's libvirt's leaves the cache out too.
    let h = Host::discover(&HostOptions {
        qemu_cache: Some(cache.clone()),
        libvirt_version: Some(Sourced {
            value: v("7.0.0"),
            source: "--libvirt-version".into(),
        }),
        ..HostOptions::default()
    })
    .unwrap();
    assert_eq!(h.qemu_cache().dir(), None);
    assert!(
        h.left_out()[0].contains("it is libvirt 9.0.0's (this machine's)"),
        "{:?}",
        h.left_out()
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Machine support and deprecation are judged from the judged host's own capabilities, as
/// each generation's libvirt lists them (the rig's captures): QEMU 11.1 (libvirt 12.8) has
/// no machine type before 5.2 and marks 5.2 … 8.1 deprecated; QEMU 5.2 (libvirt 7.0) has
/// pc-i440fx-2.11, and libvirt 7.0 marks nothing.
#[test]
fn machine_support_and_deprecation_come_from_the_judged_hosts_capabilities() {
    use crate::testdata::generation;
    let host = |g: &str| {
        Host::discover(&HostOptions {
            caps: vec![generation(g, "capabilities.xml")],
            ..HostOptions::default()
        })
        .unwrap()
    };
    let forky = host("forky");
    assert_eq!(forky.qemu_cache().dir(), None, "{:?}", forky.left_out());
    let emulator = Some("/usr/bin/qemu-system-x86_64".to_string());
    for m in ["pc-i440fx-2.11", "pc-q35-5.1", "pc-1.0", "pc-q35-99.0"] {
        assert_eq!(
            forky.machine_unsupported("x86_64", "qemu", m, None),
            emulator,
            "{m}"
        );
    }
    for m in ["pc-i440fx-5.2", "pc-q35-11.1", "q35", "pc", "microvm"] {
        assert_eq!(
            forky.machine_unsupported("x86_64", "kvm", m, None),
            None,
            "{m}"
        );
    }
    assert_eq!(
        forky.machine_unsupported("aarch64", "qemu", "virt-5.1", None),
        Some("/usr/bin/qemu-system-aarch64".into())
    );
    let d = forky
        .machine_deprecated("x86_64", "qemu", "pc-q35-5.2", None)
        .unwrap();
    assert_eq!(
        (d.machine.as_str(), d.qemu.as_deref(), d.newest.as_str()),
        ("pc-q35-5.2", Some("11.1"), "pc-q35-11.1")
    );
    let d = forky
        .machine_deprecated("x86_64", "kvm", "pc-i440fx-8.1", None)
        .unwrap();
    assert_eq!(d.newest, "pc-i440fx-11.1");
    assert_eq!(
        forky.machine_deprecated("x86_64", "qemu", "pc-q35-8.2", None),
        None
    );
    assert_eq!(
        forky.machine_deprecated("x86_64", "qemu", "q35", None),
        None
    );
    let bullseye = host("bullseye");
    assert_eq!(
        bullseye.machine_unsupported("x86_64", "qemu", "pc-i440fx-2.11", None),
        None
    );
    assert_eq!(
        bullseye.machine_unsupported("x86_64", "qemu", "pc-q35-7.2", None),
        emulator
    );
    assert_eq!(
        bullseye.machine_deprecated("x86_64", "qemu", "pc-i440fx-1.4", None),
        None,
        "libvirt 7.0 writes no deprecated mark"
    );
    // The hook leaves machine support to libvirt.
    let hook = Host::discover(&HostOptions {
        caps: vec![generation("forky", "capabilities.xml")],
        skip_machine_support: true,
        ..HostOptions::default()
    })
    .unwrap();
    assert_eq!(
        hook.machine_unsupported("x86_64", "qemu", "pc-i440fx-2.11", None),
        None
    );
}

/// The per-host API: a host made only from its facts reads nothing of this machine.
#[test]
fn a_host_of_facts_only_reads_nothing_of_this_machine() {
    use crate::testdata::generation;
    let version = Sourced {
        value: v("12.8.0"),
        source: "the fleet's inventory".into(),
    };
    let h = Host::discover(&HostOptions::of_facts(
        vec![
            generation("forky", "capabilities.xml"),
            generation("forky", "domcapabilities-x86_64-q35-qemu.xml"),
        ],
        Some(generation("forky", "cpu_map")),
        Some(version.clone()),
    ))
    .unwrap();
    assert_eq!(h.qemu_cache().dir(), None);
    assert!(h.left_out().is_empty(), "{:?}", h.left_out());
    assert_eq!(h.kvm_limit(), None);
    assert_eq!(h.cpus(), None);
    assert_eq!(h.libvirt_version(), Some(&version));
    assert!(h.model_features("EPYC-Turin").is_some());
    assert_eq!(
        h.machine_unsupported("x86_64", "kvm", "pc-q35-5.1", None),
        Some("/usr/bin/qemu-system-x86_64".into())
    );
    let bare = Host::discover(&HostOptions::of_facts(vec![], None, None)).unwrap();
    assert_eq!(bare.cpu_map_source(), "built-in");
}

#[test]
fn bad_host_facts_files_are_refused_naming_the_file() {
    let dir = scratch("bad");
    for (text, needle) in [
        (
            format!("<hostFacts libvirt='nine'>{CAPS}</hostFacts>"),
            "<hostFacts libvirt='nine'>: 'nine' is not a libvirt version",
        ),
        (
            "<hostFacts name='x' libvirt='9.0.0'/>".to_string(),
            "holds neither <capabilities> nor <domainCapabilities>",
        ),
    ] {
        let f = dir.join("bad.xml");
        std::fs::write(&f, text).unwrap();
        let mut h = Host::discover(&HostOptions::default()).unwrap();
        let e = h.read_caps_file(&f).unwrap_err().to_string();
        assert!(e.contains(needle) && e.contains("bad.xml"), "{e}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn refuses_unknown_document() {
    let dir = std::env::temp_dir().join(format!("vcp-host-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("x.xml");
    std::fs::write(&f, "<domain/>").unwrap();
    let mut h = Host::discover(&HostOptions::default()).unwrap();
    let e = h.read_caps_file(&f).unwrap_err().to_string();
    assert!(e.contains("<domain>"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}
