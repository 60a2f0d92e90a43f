//! An existing IOMMU's `<driver>` switched on for more than 255 x86 vCPUs: Intel's `intremap`
//! and `eim`, AMD's `intremap` and `xtsup` ([`super::iommu`], [`super::amd_iommu`]).

use super::VcpuResult;
use crate::change::{Action, Change};
use crate::edit::{append_child, with_attrs};
use crate::xml::child;
use roxmltree::Node;

/// Switches on the two `<driver>` attributes of `want` (model, attributes, whether libvirt
/// switches on what is not written: then only what is written off is changed) on the IOMMU `i`,
/// both written `on` where one is changed (one edit, and libvirt's value anyway).
pub(super) fn switch_on(
    text: &str,
    i: Node<'_, '_>,
    want: (&str, [&'static str; 2], bool),
    q: char,
    rule: &str,
    r: &mut VcpuResult,
) {
    let (model, attrs, auto) = want;
    let driver = child(i, "driver");
    let written: Vec<(&'static str, Option<&str>)> = attrs
        .into_iter()
        .map(|a| (a, driver.and_then(|d| d.attribute(a))))
        .collect();
    if written
        .iter()
        .all(|(_, v)| *v == Some("on") || (auto && v.is_none()))
    {
        return;
    }
    let wrong = written.into_iter().filter(|(_, v)| *v != Some("on"));
    let [a0, a1] = attrs;
    let mode = if model == "amd" {
        "XTSup mode"
    } else {
        "extended interrupt mode"
    };
    if let Some(d) = driver {
        r.edits
            .replace(d.range(), with_attrs(text, d, &[(a0, "on"), (a1, "on")], q));
        for (a, old) in wrong {
            let what = format!(
                "<iommu model='{model}'><driver {a}='on'> set (more than 255 vCPUs need interrupt remapping in {mode})"
            );
            r.notes.change(
                Change::new(rule, Action::Set, "driver", what)
                    .attribute(a)
                    .old(old)
                    .new_value("on"),
            );
        }
    } else {
        let attrs = format!("{a0}={q}on{q} {a1}={q}on{q}");
        append_child(&mut r.edits, text, i, &format!("<driver {attrs}/>"));
        let shown = format!("{a0}='on' {a1}='on'");
        let what =
            format!("<iommu model='{model}'>: <driver {shown}/> added (more than 255 vCPUs)");
        r.notes
            .change(Change::new(rule, Action::Add, "driver", what).new_value(shown));
    }
}
