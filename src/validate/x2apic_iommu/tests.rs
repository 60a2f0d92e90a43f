//! Tests of what more than 255 vCPUs need of the IOMMU, each case as libvirt 7.0, 11.3 and
//! 12.8 defined or refused it on the rig (`virsh define`; 12.1 from its source:
//! `qemuValidateDomainDefCpu` before "conf: support more than 255 vCPUs with amd-iommu").

use crate::domain::Domain;
use crate::finding::{Code, Finding, Severity};
use crate::host::{Host, HostOptions, Sourced};
use crate::libvirt::version::QemuVersion;
use crate::pipeline::Pipeline;
use crate::policy::Policy;

fn host(libvirt: &str, qemu: Option<&str>) -> Host {
    let mut o = HostOptions::of_facts(
        Vec::new(),
        None,
        Some(Sourced {
            value: libvirt.parse().unwrap(),
            source: "test".into(),
        }),
    );
    o.kvm_max_vcpus = Some(Sourced {
        value: 1024,
        source: "test".into(),
    });
    o.qemu_version = qemu.map(|q| Sourced {
        value: QemuVersion(q.parse().unwrap()),
        source: "test".into(),
    });
    Host::discover(&o).unwrap()
}

/// A q35 guest of `vcpus` vCPUs with `features` and `devices`.
fn guest(vcpus: u32, features: &str, devices: &str) -> String {
    format!(
        "<domain type='kvm'><name>g</name><memory>65536</memory><vcpu>{vcpus}</vcpu><os><type arch='x86_64' machine='pc-q35-7.2'>hvm</type></os><features><acpi/><apic/>{features}</features><cpu mode='host-passthrough'/><devices>{devices}</devices></domain>"
    )
}

fn errors(h: &Host, text: &str) -> Vec<Finding> {
    let dom = Domain::parse(text, "test").unwrap();
    let policy = Policy::parse("version = 1\n", "test").unwrap();
    let p = Pipeline::new(&dom, &policy, h).unwrap();
    crate::validate::validate(p.dom, &p.plan, &p.facts)
        .into_iter()
        .filter(|f| f.severity == Severity::Error)
        .collect()
}

/// (code, message) of each error.
fn said(h: &Host, text: &str) -> Vec<(Code, String)> {
    errors(h, text)
        .into_iter()
        .map(|f| (f.code, f.message))
        .collect()
}

const AMD: &str = "<iommu model='amd'/>";

#[test]
fn libvirt_12_2_completes_an_amd_iommu_above_255_vcpus() {
    // 12.8 defined each: intremap and xtsup switched on, the split I/O APIC added.
    let h = host("12.8.0", None);
    for devices in [
        AMD,
        "<iommu model='amd'><driver intremap='on' xtsup='on'/></iommu>",
        // Kept off and defined: the split I/O APIC libvirt adds is enough for its check.
        "<iommu model='amd'><driver xtsup='off'/></iommu>",
        "<iommu model='amd'><driver intremap='off' xtsup='off'/></iommu>",
    ] {
        assert_eq!(said(&h, &guest(256, "", devices)), [], "{devices}");
    }
    // intremap off, xtsup switched on: no split I/O APIC needed (defined by 12.8).
    let kvm_ioapic = "<ioapic driver='kvm'/>";
    let off = "<iommu model='amd'><driver intremap='off'/></iommu>";
    assert_eq!(said(&h, &guest(256, kvm_ioapic, off)), []);
}

#[test]
fn libvirt_12_2_refuses_what_it_refused_on_the_rig() {
    let h = host("12.8.0", None);
    let kvm_ioapic = "<ioapic driver='kvm'/>";
    // Both off and the kernel's I/O APIC: "more than 255 vCPUs require either IOAPIC in QEMU
    // or an iommu device with EIM or XTSup mode enabled" (12.8).
    let both_off = "<iommu model='amd'><driver intremap='off' xtsup='off'/></iommu>";
    let e = said(&h, &guest(256, kvm_ioapic, both_off));
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(e[0].0, Code::IommuEim);
    assert_eq!(e[0].1, crate::amd_iommu::X2APIC_REFUSAL);
    let intel_off = "<iommu model='intel'><driver intremap='off' eim='off'/></iommu>";
    let e = said(&h, &guest(256, kvm_ioapic, intel_off));
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(e[0].1, crate::amd_iommu::X2APIC_REFUSAL);
    // intremap switched on needs the split I/O APIC (12.8: "IOMMU interrupt remapping
    // requires split I/O APIC (ioapic driver='qemu')").
    let e = said(&h, &guest(256, kvm_ioapic, AMD));
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(e[0].0, Code::IoapicSplit);
    // Intel's attributes on an AMD IOMMU (12.8: "iommu model 'amd' doesn't support some
    // additional attributes"), and an AMD IOMMU off q35 (12.8: "IOMMU device: 'amd' is only
    // supported with Q35 machines").
    let eim = "<iommu model='amd'><driver intremap='on' eim='on'/></iommu>";
    let e = said(&h, &guest(4, "", eim));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].1
            .starts_with("iommu model 'amd' doesn't support some additional attributes"),
        "{e:?}"
    );
    let pc = guest(4, "", AMD).replace("pc-q35-7.2", "pc-i440fx-7.2");
    let e = said(&h, &pc);
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(
        e[0].1,
        "IOMMU device: 'amd' is only supported with Q35 machines"
    );
}

#[test]
fn libvirt_before_12_2_refuses_an_amd_iommu_above_255_vcpus() {
    // 11.5 … 12.1 parse the model and ask eim of it (their source).
    let e = said(&host("12.1.0", None), &guest(256, "", AMD));
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(e[0].0, Code::IommuEim);
    assert!(
        e[0].1.starts_with(crate::amd_iommu::EIM_REFUSAL) && e[0].1.contains("12.2.0"),
        "{e:?}"
    );
    // 11.3 and 7.0 refuse the model in their parser, whatever the vCPUs (seen).
    let e = said(&host("11.3.0", None), &guest(256, "", AMD));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].1
            .starts_with("Invalid value for attribute 'model' in element 'iommu': 'amd'."),
        "{e:?}"
    );
    let e = said(&host("7.0.0", None), &guest(4, "", AMD));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].1.starts_with("unknown IOMMU model: amd"), "{e:?}");
    // Below 256 vCPUs 11.5 and later take it.
    assert_eq!(said(&host("12.1.0", None), &guest(255, "", AMD)), []);
}

/// The rewrite of `text` under a `vcpu.max = 288` rule: its output, or the error findings.
fn rewrite(h: &Host, text: &str) -> Result<String, Vec<String>> {
    let policy = Policy::parse(
        "version = 1\n\n[[rule]]\nname = \"scalable\"\nvcpu.max = 288\n",
        "test",
    )
    .unwrap();
    let o = crate::rewrite::rewrite(text, "test", &policy, h).unwrap();
    let errors: Vec<String> = o
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .map(|f| f.message.clone())
        .collect();
    if errors.is_empty() {
        Ok(o.output)
    } else {
        Err(errors)
    }
}

#[test]
fn the_rewrite_completes_an_amd_iommu_where_libvirt_12_2_takes_it() {
    let h = host("12.8.0", Some("11.1.0"));
    let out = rewrite(&h, &guest(8, "", AMD)).unwrap();
    assert!(
        out.contains("<iommu model='amd'>\n  <driver intremap='on' xtsup='on'/>\n</iommu>"),
        "{out}"
    );
    assert!(out.contains(">288</vcpu>"), "{out}");
    // A written off is switched on, the kernel's I/O APIC made split.
    let off = "<iommu model='amd'><driver intremap='off' xtsup='off'/></iommu>";
    let out = rewrite(&h, &guest(8, "<ioapic driver='kvm'/>", off)).unwrap();
    assert!(out.contains("<driver intremap='on' xtsup='on'/>"), "{out}");
    assert!(out.contains("<ioapic driver='qemu'/>"), "{out}");
    // A fixed point, which the validator takes.
    assert_eq!(rewrite(&h, &out).unwrap(), out);
    assert_eq!(said(&h, &out), []);
}

#[test]
fn the_rewrite_refuses_an_amd_iommu_naming_the_release_that_takes_it() {
    let text = guest(8, "", AMD);
    for (libvirt, qemu, needs) in [
        ("11.3.0", None, "need libvirt 12.2.0 or later"),
        ("12.1.0", None, "need libvirt 12.2.0 or later"),
        ("12.8.0", Some("8.2.0"), "need QEMU 9.0.0 or later"),
    ] {
        let e = rewrite(&host(libvirt, qemu), &text).unwrap_err();
        assert!(e.iter().any(|m| m.contains(needs)), "{libvirt}: {e:?}");
    }
    // 12.1's words are libvirt's own.
    let e = rewrite(&host("12.1.0", None), &text).unwrap_err();
    assert!(
        e.iter().any(|m| m.contains(crate::amd_iommu::EIM_REFUSAL)),
        "{e:?}"
    );
}
