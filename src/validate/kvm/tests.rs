//! Tests of the KVM start checks on the rig's recorded facts (`tests/data/generations`).

use crate::domain::Domain;
use crate::finding::{Code, Finding, Severity};
use crate::host::{Host, HostOptions};
use crate::pipeline::Pipeline;
use crate::policy::Policy;
use crate::testdata::{cpu_map, generation};

/// This machine's facts as the rig captured them (libvirt 9.0 / QEMU 7.2 on an Intel host
/// whose KVM lacks `pni` and `popcnt`): its capabilities, KVM's domcapabilities, cpu_map.
fn bookworm(with_caps: bool) -> Host {
    let mut caps = vec![generation("bookworm", "domcapabilities-x86_64-pc-kvm.xml")];
    if with_caps {
        caps.push(generation("bookworm", "capabilities.xml"));
    }
    Host::discover(&HostOptions::of_facts(caps, Some(cpu_map()), None)).unwrap()
}

/// The same host known by its capabilities alone (its CPU, not what KVM gives), with its
/// cpu_map.
fn caps_only() -> Host {
    let caps = vec![generation("bookworm", "capabilities.xml")];
    Host::discover(&HostOptions::of_facts(caps, Some(cpu_map()), None)).unwrap()
}

fn findings(host: &Host, vt: &str, cpu: &str) -> Vec<Finding> {
    let text = format!(
        "<domain type='{vt}'><name>g</name><memory>65536</memory><vcpu>1</vcpu><os><type arch='x86_64' machine='pc'>hvm</type></os>{cpu}</domain>"
    );
    let dom = Domain::parse(&text, "test").unwrap();
    let policy = Policy::parse("version = 1\n", "test").unwrap();
    let p = Pipeline::new(&dom, &policy, host).unwrap();
    crate::validate::validate(p.dom, &p.plan, &p.facts)
}

/// With the built-in table (no cpu_map directory) a feature it lacks may be one the guest's
/// libvirt knows: the comparison libvirt makes at start is not made, and said so, however
/// the CPU names it (an unknown name never makes the answer better).
#[test]
fn an_unknown_name_with_the_built_in_table_is_not_compared() {
    let caps = vec![generation("bookworm", "capabilities.xml")];
    let host = Host::discover(&HostOptions::of_facts(caps, None, None)).unwrap();
    for cpu in [
        "<cpu mode='custom'><model>Nehalem</model></cpu>",
        "<cpu mode='custom'><model>Nehalem</model><feature policy='require' name='f0'/></cpu>",
    ] {
        let f = findings(&host, "kvm", cpu);
        assert!(
            f.iter().any(|f| f.code == Code::NotCompared),
            "{cpu}: {f:?}"
        );
        assert!(
            f.iter().all(|f| f.severity != Severity::Error),
            "{cpu}: {f:?}"
        );
    }
}

fn incompatible(host: &Host, vt: &str, cpu: &str) -> Option<String> {
    findings(host, vt, cpu)
        .into_iter()
        .find(|f| f.code == Code::CpuIncompatible)
        .map(|f| {
            assert_eq!(f.severity, Severity::Error);
            f.message
        })
}

/// A `host-model` CPU's required and forbidden features are compared at start with the
/// host's own CPU as a custom CPU's are (seen with libvirt 9.0 on an AMD host: "Host CPU
/// does not provide required features: vmx", "Host CPU provides forbidden feature
/// 'avx512f'"); a feature QEMU's KVM adds passes; without the host's CPU, not compared.
#[test]
fn host_model_features_are_compared_at_start() {
    let host = bookworm(true);
    let hm = |f: &str| format!("<cpu mode='host-model'>{f}</cpu>");
    let m = incompatible(&host, "kvm", &hm("<feature policy='require' name='svm'/>"))
        .expect("svm refused");
    assert!(
        m.starts_with("the CPU is incompatible with host CPU: Host CPU does not provide required features: svm (host-model, check='partial' under KVM"),
        "{m}"
    );
    let m = incompatible(&host, "kvm", &hm("<feature policy='forbid' name='sse2'/>"))
        .expect("sse2 refused");
    assert!(
        m.contains("Host CPU provides forbidden feature 'sse2'"),
        "{m}"
    );
    for passes in [
        hm("<feature policy='require' name='x2apic'/>"),
        hm("<feature policy='disable' name='sse2'/>"),
        hm("<feature policy='forbid' name='svm'/>"),
        hm(""),
        // libvirt compares nothing under check='none'.
        "<cpu mode='host-model' check='none'><feature policy='require' name='svm'/></cpu>"
            .to_string(),
    ] {
        assert_eq!(incompatible(&host, "kvm", &passes), None, "{passes}");
    }
    let f = findings(
        &bookworm(false),
        "kvm",
        &hm("<feature policy='require' name='svm'/>"),
    );
    assert!(f.iter().any(|f| f.code == Code::NotCompared), "{f:?}");
    assert!(f.iter().all(|f| f.severity != Severity::Error), "{f:?}");
}

/// Under `check='full'` what KVM gives decides what QEMU drops: with the host's CPU but no
/// KVM host-model CPU known, the check is not compared (was: conforms).
#[test]
fn check_full_without_what_kvm_gives_is_not_compared() {
    let host = caps_only();
    let cpu = "<cpu mode='custom' match='exact' check='full'><model>Nehalem</model><feature policy='require' name='hypervisor'/><feature policy='require' name='x2apic'/></cpu>";
    let f = findings(&host, "kvm", cpu);
    let nc = f
        .iter()
        .find(|f| f.code == Code::NotCompared)
        .unwrap_or_else(|| panic!("{f:?}"));
    assert!(
        nc.message.contains("what KVM gives is not known"),
        "{}",
        nc.message
    );
    assert!(f.iter().all(|f| f.severity != Severity::Error), "{f:?}");
    // With it, libvirt's words: KVM on this host lacks pni and popcnt.
    let f = findings(&bookworm(true), "kvm", cpu);
    assert!(
        f.iter()
            .any(|f| f.code == Code::KvmCheckFull && f.message.contains("missing features: pni")),
        "{f:?}"
    );
}

/// Under TCG with `check='partial'`, what TCG gives decides: without the `type='qemu'`
/// domcapabilities or the QEMU capability cache, not compared (was: conforms).
#[test]
fn tcg_partial_without_what_tcg_gives_is_not_compared() {
    let host = caps_only();
    for cpu in [
        "<cpu mode='custom' match='exact' check='partial'><model>Skylake-Server</model></cpu>",
        "<cpu mode='host-model' check='partial'><feature policy='require' name='avx512f'/></cpu>",
    ] {
        let f = findings(&host, "qemu", cpu);
        assert!(
            f.iter()
                .any(|f| f.code == Code::NotCompared && f.message.contains("under TCG")),
            "{cpu}: {f:?}"
        );
        assert!(
            f.iter().all(|f| f.severity != Severity::Error),
            "{cpu}: {f:?}"
        );
    }
    // check='none', libvirt's default for a custom CPU under TCG: nothing compared.
    let f = findings(
        &host,
        "qemu",
        "<cpu mode='custom'><model>Skylake-Server</model></cpu>",
    );
    assert!(f.iter().all(|f| f.code != Code::NotCompared), "{f:?}");
}

/// A custom KVM CPU with the floor of its OS as written is judged as KVM gives it: on this
/// host (KVM lacks `pni`, `popcnt`, AVX...) QEMU drops them at start, so RHEL 10 cannot
/// boot: `os-floor`; without what KVM gives, not compared.
#[test]
fn the_os_floor_is_judged_as_kvm_gives_a_custom_cpu() {
    let v3 = [
        "avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave", "sse4.2", "popcnt",
        "sse4.1", "ssse3", "pni", "cx16", "lahf_lm",
    ]
    .iter()
    .map(|f| format!("<feature policy='require' name='{f}'/>"))
    .collect::<Vec<_>>()
    .concat();
    let text = format!(
        "<domain type='kvm'><name>g</name><metadata><libosinfo:libosinfo xmlns:libosinfo='http://libosinfo.org/xmlns/libvirt/domain/1.0'><libosinfo:os id='http://redhat.com/rhel/10.0'/></libosinfo:libosinfo></metadata><memory>65536</memory><vcpu>1</vcpu><os><type arch='x86_64' machine='pc'>hvm</type></os><cpu mode='custom' match='exact'><model>qemu64</model><feature policy='disable' name='svm'/>{v3}</cpu></domain>"
    );
    let judge = |host: &Host| {
        let dom = Domain::parse(&text, "test").unwrap();
        let policy = Policy::parse("version = 1\n", "test").unwrap();
        let p = Pipeline::new(&dom, &policy, host).unwrap();
        crate::validate::validate(p.dom, &p.plan, &p.facts)
    };
    let f = judge(&bookworm(true));
    let floor = f
        .iter()
        .find(|f| f.code == Code::OsFloor)
        .unwrap_or_else(|| panic!("{f:?}"));
    assert!(
        floor.message.contains("as KVM gives it"),
        "{}",
        floor.message
    );
    assert!(floor.message.contains("avx2"), "{}", floor.message);
    let f = judge(&caps_only());
    assert!(f.iter().all(|f| f.code != Code::OsFloor), "{f:?}");
    assert!(f.iter().any(|f| f.code == Code::NotCompared), "{f:?}");
}

/// What libvirt 9.0, 11.3 and 12.8 refused and started on this machine (module docs).
#[test]
fn refused_as_libvirt_refuses_at_start() {
    let host = bookworm(true);
    let svm = "<feature policy='require' name='svm'/>";
    for cpu in [
        format!("<cpu mode='custom' match='exact'><model>kvm64</model>{svm}</cpu>"),
        format!(
            "<cpu mode='custom' match='minimum' check='partial'><model>kvm64</model>{svm}</cpu>"
        ),
        // libvirt's qemu64 lists svm: the model alone is refused on an Intel host.
        "<cpu mode='custom' match='exact'><model>qemu64</model></cpu>".to_string(),
    ] {
        let m = incompatible(&host, "kvm", &cpu).unwrap_or_else(|| panic!("{cpu}"));
        assert!(
            m.starts_with("the CPU is incompatible with host CPU: Host CPU does not provide required features: svm ("),
            "{m}"
        );
        assert!(m.contains("capabilities.xml"), "{m}");
    }
    let lm = "<cpu mode='custom'><model>kvm64</model><feature policy='forbid' name='lm'/></cpu>";
    let m = incompatible(&host, "kvm", lm).unwrap();
    assert!(
        m.starts_with(
            "the CPU is incompatible with host CPU: Host CPU provides forbidden feature 'lm' ("
        ),
        "{m}"
    );
}

/// This machine's facts under libvirt 11.3 (trixie, as the rig captured them: its own CPU
/// `Icelake-Server-v2`, KVM's host-model CPU `kvm64` plus features, without `pni`), with
/// that libvirt's cpu_map, whose older models are marked `<check partial='compat'/>`.
fn trixie() -> Host {
    let caps = ["domcapabilities-x86_64-pc-kvm.xml", "capabilities.xml"]
        .map(|f| generation("trixie", f))
        .to_vec();
    let map = generation("trixie", "cpu_map");
    Host::discover(&HostOptions::of_facts(caps, Some(map), None)).unwrap()
}

/// What libvirt 11.3 and 12.8 did on this machine (`producers_kvm_against_virsh_create`
/// found the first as a false accept): a model the cpu_map does not mark `compat` is
/// compared with what KVM gives, a `compat` one with the host's own CPU.
#[test]
fn uncompat_models_are_compared_with_what_kvm_gives() {
    let host = trixie();
    let cpu = |m: &str| format!("<cpu mode='custom' match='exact'><model>{m}</model></cpu>");
    for m in [
        "Icelake-Server-v2",
        "Icelake-Server-v1",
        "Denverton",
        "KnightsMill",
    ] {
        let msg = incompatible(&host, "kvm", &cpu(m)).unwrap_or_else(|| panic!("{m}"));
        assert!(
            msg.starts_with("the CPU is incompatible with host CPU: Host CPU does not provide required features: pni, pclmuldq, ssse3, "),
            "{msg}"
        );
        assert!(msg.contains("what KVM gives"), "{msg}");
    }
    // The host's own model under a compat name starts (the same features as -v2).
    for m in [
        "Icelake-Server-noTSX",
        "Nehalem",
        "Westmere",
        "Broadwell-noTSX-IBRS",
    ] {
        assert_eq!(incompatible(&host, "kvm", &cpu(m)), None, "{m}");
    }
    let m = incompatible(&host, "kvm", &cpu("Icelake-Server")).unwrap();
    assert!(
        m.starts_with(
            "the CPU is incompatible with host CPU: Host CPU does not provide required features: hle, rtm ("
        ),
        "{m}"
    );
    assert!(m.contains("this host's own CPU"), "{m}");
}

/// `check='full'`, `match` exact: what libvirt 9.0 said on this machine ("guest CPU doesn't
/// match specification: extra features: vme,x2apic,hypervisor, missing features:
/// pni,ssse3,sse4.1,sse4.2,popcnt" for Nehalem): hypervisor unless required, and what KVM's
/// host-model CPU lacks, from domcapabilities alone (no capabilities needed).
#[test]
fn check_full_refused_as_libvirt_refuses() {
    for host in [bookworm(true), bookworm(false)] {
        let full = |cpu: &str| {
            findings(&host, "kvm", cpu)
                .into_iter()
                .find(|f| f.code == Code::KvmCheckFull)
                .map(|f| f.message)
        };
        let m = full("<cpu mode='custom' match='exact' check='full'><model>Nehalem</model></cpu>")
            .unwrap();
        assert!(
            m.starts_with("guest CPU doesn't match specification: extra features: x2apic,hypervisor, missing features: pni,ssse3,sse4.1,sse4.2,popcnt ("),
            "{m}"
        );
        // libvirt 9.0: "extra features: apic,x2apic,hypervisor" (apic not predicted).
        let m = full("<cpu check='full'><model>pentium</model></cpu>").unwrap();
        assert!(
            m.starts_with(
                "guest CPU doesn't match specification: extra features: x2apic,hypervisor ("
            ),
            "{m}"
        );
        // libvirt 9.0: "extra features: vme,x2apic, missing features: pni".
        let m = full("<cpu check='full'><model>kvm64</model><feature policy='require' name='hypervisor'/></cpu>").unwrap();
        assert!(
            m.starts_with(
                "guest CPU doesn't match specification: extra features: x2apic, missing features: pni ("
            ),
            "{m}"
        );
        let m = full(
            "<cpu check='full'><model>pentium</model><feature policy='require' name='hypervisor'/></cpu>",
        )
        .unwrap();
        assert!(
            m.starts_with("guest CPU doesn't match specification: extra features: x2apic ("),
            "{m}"
        );
        // Named, x2apic is no extra.
        assert_eq!(
            full(
                "<cpu check='full'><model>pentium</model><feature policy='require' name='hypervisor'/><feature policy='require' name='x2apic'/></cpu>"
            ),
            None
        );
        // Seen started by libvirt 9.0: a disabled hypervisor bit (QEMU leaves it off) and
        // an optional one (libvirt makes it `require`), with x2apic disabled.
        for policy in ["disable", "optional"] {
            assert_eq!(
                full(&format!(
                    "<cpu match='exact' check='full'><model>486</model><feature policy='{policy}' name='hypervisor'/><feature policy='disable' name='x2apic'/></cpu>"
                )),
                None,
                "{policy}"
            );
        }
        // A feature or model libvirt does not know is refused at define, for that alone.
        for cpu in [
            "<cpu match='exact' check='full'><model>Nehalem</model><feature policy='require' name='nosuchfeat'/></cpu>",
            "<cpu match='exact' check='full'><model>NoSuchModel</model></cpu>",
        ] {
            assert_eq!(full(cpu), None, "{cpu}");
        }
        let tcg = findings(
            &host,
            "qemu",
            "<cpu check='full'><model>pentium</model></cpu>",
        );
        assert!(tcg.iter().all(|f| f.code != Code::KvmCheckFull), "{tcg:?}");
    }
}

/// A model KVM cannot give in full (its CPUID has pni and popcnt), check='none', TCG, a CPU
/// without a model, and a host whose CPU is unknown: libvirt starts them, or nothing is
/// known to say otherwise.
#[test]
fn started_as_libvirt_starts() {
    let host = bookworm(true);
    for cpu in [
        "<cpu mode='custom' match='exact' check='partial'><model>Nehalem</model></cpu>",
        "<cpu mode='custom' match='minimum'><model fallback='forbid'>Nehalem</model></cpu>",
        "<cpu mode='custom'><model>kvm64</model><feature policy='require' name='popcnt'/></cpu>",
        "<cpu mode='custom' check='none'><model>kvm64</model><feature policy='require' name='svm'/></cpu>",
        "<cpu mode='custom' check='none'><model>qemu64</model></cpu>",
        "<cpu mode='host-model'/>",
        "<cpu><topology sockets='1' cores='1' threads='1'/></cpu>",
    ] {
        assert_eq!(incompatible(&host, "kvm", cpu), None, "{cpu}");
    }
    let unusable = findings(
        &host,
        "kvm",
        "<cpu mode='custom'><model>Nehalem</model></cpu>",
    );
    let f = unusable
        .iter()
        .find(|f| f.code == Code::CpuModelUnusable)
        .unwrap();
    assert_eq!(f.severity, Severity::Warning);
    assert!(
        f.message.contains("QEMU silently drops at start"),
        "{}",
        f.message
    );
    // check='full' with match='minimum': libvirt updates the CPU to the host's and starts.
    let minimum = findings(
        &host,
        "kvm",
        "<cpu mode='custom' match='minimum' check='full'><model>Nehalem</model></cpu>",
    );
    assert!(
        minimum.iter().all(|f| f.code != Code::KvmCheckFull),
        "{minimum:?}"
    );
    // ... but the comparison with the host's CPU still runs under check='full', minimum or
    // not (libvirt 9.0 refuses both: "guest CPU doesn't match specification: missing
    // features: svm", "the CPU is incompatible with host CPU: Host CPU provides forbidden
    // feature 'lm'").
    let svm = findings(
        &host,
        "kvm",
        "<cpu mode='custom' match='minimum' check='full'><model>486</model><feature policy='require' name='svm'/></cpu>",
    );
    let f = svm.iter().find(|f| f.code == Code::KvmCheckFull).unwrap();
    assert!(
        f.message
            .starts_with("guest CPU doesn't match specification: missing features: svm ("),
        "{}",
        f.message
    );
    for cpu in [
        "<cpu mode='custom' match='minimum' check='full'><model>486</model><feature policy='forbid' name='lm'/></cpu>",
        "<cpu mode='custom' match='exact' check='full'><model>486</model><feature policy='forbid' name='hypervisor'/></cpu>",
    ] {
        let m = incompatible(&host, "kvm", cpu).unwrap_or_else(|| panic!("{cpu}"));
        assert!(m.contains("(model 486, check='full' under KVM"), "{m}");
    }
    let q = "<cpu mode='custom' check='partial'><model>qemu64</model></cpu>";
    // Under TCG the comparison is against what TCG emulates (tcg-cpu-missing), not this.
    assert_eq!(incompatible(&host, "qemu", q), None);
    assert_eq!(incompatible(&bookworm(false), "kvm", q), None);
}

/// A feature spelled another way than libvirt's (`sse3`, `sse4_2`, `SSE4.2`) is refused as
/// libvirt refuses it ("unknown CPU feature: sse3", seen with libvirt 9.0), naming libvirt's
/// spelling, and nothing is compared.
#[test]
fn another_spelling_of_a_feature_is_unknown_to_libvirt() {
    let host = bookworm(true);
    for (name, libvirt) in [("sse3", "pni"), ("sse4_2", "sse4.2"), ("SSE4.2", "sse4.2")] {
        for cpu in [
            format!("<cpu mode='host-model'><feature policy='require' name='{name}'/></cpu>"),
            format!(
                "<cpu mode='custom'><model>Nehalem</model><feature policy='require' name='{name}'/></cpu>"
            ),
        ] {
            let f = findings(&host, "kvm", &cpu);
            assert!(
                f.iter().any(|f| f.code == Code::CpuFeatureUnknown
                    && f.severity == Severity::Error
                    && f.message.contains(&format!("'{libvirt}'"))),
                "{cpu}: {f:?}"
            );
            assert!(
                f.iter()
                    .all(|f| f.code != Code::NotCompared && f.code != Code::CpuIncompatible),
                "{cpu}: {f:?}"
            );
        }
    }
    // libvirt's own spelling is no error.
    let f = findings(
        &host,
        "kvm",
        "<cpu mode='host-model'><feature policy='require' name='pni'/></cpu>",
    );
    assert!(f.iter().all(|f| f.code != Code::CpuFeatureUnknown), "{f:?}");
}
