//! What more than 255 x86 vCPUs need on q35 besides the count: an Intel IOMMU with interrupt
//! remapping in extended interrupt mode, and a split I/O APIC (or, from libvirt 10.10, only what
//! is written against libvirt's own additions).

use super::VcpuResult;
use super::iommu_driver::switch_on;
use crate::change::{Action, Change};
use crate::domain::Domain;
use crate::domain_facts::{DomainFacts, VersionRule};
use crate::edit::{Edits, append_child, child_indent, line_indent, newline, with_attrs};
use crate::finding::{Code, Finding};
use crate::xml::child;
use roxmltree::Node;

/// Make the domain able to run more than 255 x86 vCPUs: an Intel IOMMU with interrupt remapping
/// and extended interrupt mode (or an existing AMD one in XTSup mode where the host takes it,
/// [`super::amd_iommu`]), and a split I/O APIC. Where libvirt fills in what is missing
/// itself (`auto`: [`VersionRule::AutoIommu`], 10.10.0 and later) only what is written against it
/// is changed (`eim='off'`, an I/O APIC of another driver). Returns false (with an error finding)
/// when an IOMMU of another model is already there (or an AMD one the host cannot take), or
/// there is no `<devices>` to add it to.
pub(super) fn add_iommu(
    dom: &Domain<'_>,
    q: char,
    rule: &str,
    facts: &DomainFacts<'_>,
    r: &mut VcpuResult,
) -> bool {
    let auto = facts.applies(VersionRule::AutoIommu);
    let devices = child(dom.root(), "devices");
    let done = match (devices.and_then(|d| child(d, "iommu")), devices) {
        (Some(i), _) => existing_iommu(dom.text, i, q, rule, facts, r),
        (None, _) if auto => true,
        (None, Some(devs)) => {
            add_intel_iommu(dom.text, devs, q, rule, r);
            true
        }
        (None, None) => {
            r.notes.finding(
                Finding::error(
                    Code::IommuNoDevices,
                    "more than 255 vCPUs need an IOMMU, but the domain has no <devices>",
                    "add <devices>",
                )
                .rule(rule),
            );
            false
        }
    };
    if done {
        split_ioapic(dom, q, rule, auto, r);
    }
    done
}

/// An existing IOMMU must be Intel's with `intremap` and `eim` on (under `auto`, libvirt switches
/// on what is not written) or, where the host's libvirt and QEMU take it, AMD's with `intremap`
/// and `xtsup` on ([`super::amd_iommu`]); another model cannot do x2APIC interrupt remapping.
fn existing_iommu(
    text: &str,
    i: Node<'_, '_>,
    q: char,
    rule: &str,
    facts: &DomainFacts<'_>,
    r: &mut VcpuResult,
) -> bool {
    let model = i.attribute("model").unwrap_or("");
    if model == "amd" {
        return super::amd_iommu::complete(text, i, q, rule, facts, r);
    }
    if model != "intel" {
        r.notes.finding(Finding::error(
            Code::IommuModel,
            format!("more than 255 vCPUs need an Intel IOMMU in extended interrupt mode (or an AMD one in XTSup mode, libvirt 12.2 and later), but the domain has <iommu model='{model}'>, which cannot do eim"),
            "replace the IOMMU with <iommu model='intel'>, or set vcpu.iommu = \"never\"",
        ).rule(rule));
        return false;
    }
    let auto = facts.applies(VersionRule::AutoIommu);
    switch_on(text, i, ("intel", ["intremap", "eim"], auto), q, rule, r);
    true
}

fn add_intel_iommu(text: &str, devs: Node<'_, '_>, q: char, rule: &str, r: &mut VcpuResult) {
    let nl = newline(text);
    let cind = child_indent(text, devs);
    let step = cind
        .strip_prefix(line_indent(text, devs.range().start))
        .filter(|s| !s.is_empty())
        .unwrap_or("  ");
    let markup = format!(
        "<iommu model={q}intel{q}>{nl}{cind}{step}<driver intremap={q}on{q} eim={q}on{q}/>{nl}{cind}</iommu>"
    );
    append_child(&mut r.edits, text, devs, &markup);
    r.notes.change(Change::new(rule, Action::Add, "iommu", "<iommu model='intel'> with <driver intremap='on' eim='on'/> added (libvirt: \"more than 255 vCPUs require extended interrupt mode enabled on the iommu device\")").new_value("intel"));
}

/// `<features><ioapic driver='qemu'/>`: interrupt remapping needs the split I/O APIC (under
/// `auto` libvirt adds it where none is written).
fn split_ioapic(dom: &Domain<'_>, q: char, rule: &str, auto: bool, r: &mut VcpuResult) {
    let (text, root) = (dom.text, dom.root());
    let features = child(root, "features");
    let ioapic = features.and_then(|f| child(f, "ioapic"));
    let change = |action, what: &str, old: Option<&str>| {
        Change::new(rule, action, "ioapic", what)
            .attribute("driver")
            .old(old)
            .new_value("qemu")
    };
    match ioapic {
        Some(io) if io.attribute("driver") == Some("qemu") => {}
        Some(io) => {
            r.edits
                .replace(io.range(), with_attrs(text, io, &[("driver", "qemu")], q));
            r.notes.change(change(Action::Set, "<ioapic driver='qemu'/> set (libvirt: \"IOMMU interrupt remapping requires split I/O APIC\")", io.attribute("driver")));
        }
        None if auto => {}
        None => {
            let markup = format!("<ioapic driver={q}qemu{q}/>");
            match features {
                Some(f) => append_child(&mut r.edits, text, f, &markup),
                None => add_features_element(dom, &markup, &mut r.edits),
            }
            r.notes.change(change(Action::Add, "<features><ioapic driver='qemu'/> added (libvirt: \"IOMMU interrupt remapping requires split I/O APIC\")", None));
        }
    }
}

/// A new `<features>` holding `markup`, after `<os>` where libvirt writes it.
fn add_features_element(dom: &Domain<'_>, markup: &str, edits: &mut Edits) {
    let (text, root) = (dom.text, dom.root());
    let nl = newline(text);
    let ind = child_indent(text, root);
    let cind = format!(
        "{ind}{}",
        ind.strip_prefix(line_indent(text, root.range().start))
            .filter(|s| !s.is_empty())
            .unwrap_or("  ")
    );
    let el = format!("<features>{nl}{cind}{markup}{nl}{ind}</features>");
    match child(root, "os") {
        Some(os) => edits.insert(os.range().end, format!("{nl}{ind}{el}")),
        None => append_child(edits, text, root, &el),
    }
}
