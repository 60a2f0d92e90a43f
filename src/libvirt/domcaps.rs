//! `virsh domcapabilities` (`virConnectGetDomainCapabilities`): what libvirt offers a guest of
//! one emulator, arch, machine type and virt type: the vCPU limit, the CPU modes, the host-model
//! CPU and the custom models.

use super::cpu_def::{CpuDef, CpuMode, CpuType};
use super::positive_count;
use crate::xml::{child, is_libvirt_element, text_of};
use roxmltree::Node;
use std::collections::{BTreeMap, BTreeSet};

/// One `virsh domcapabilities` document.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DomCaps {
    /// `<arch>`.
    pub arch: String,
    /// `<domain>`: `kvm` or `qemu`.
    pub virt_type: String,
    /// `<machine>` (versioned).
    pub machine: String,
    /// `<path>` of the emulator.
    pub emulator: Option<String>,
    /// `<vcpu max>` (the smaller of the machine type's and KVM's limits).
    pub vcpu_max: Option<u32>,
    /// CPU modes with `supported='yes'` (a mode a newer libvirt adds and this tool does not
    /// know is left out).
    pub modes: BTreeSet<CpuMode>,
    /// The `host-model` CPU, when that mode is supported: read as a guest CPU
    /// ([`CpuType::Guest`], as `virsh hypervisor-cpu-compare` reads it), so a policy libvirt does
    /// not know refuses the document.
    pub host_model: Option<CpuDef>,
    /// Custom models and their `usable` attribute, in document order; empty when the `custom`
    /// mode is not supported.
    pub models: Vec<(String, Usable)>,
    /// Per custom model, the features that block it (`<blockers model='M'><feature
    /// name='F'/>...`, libvirt 11.x; libvirt 9.0 writes none): the features of QEMU's model the
    /// accelerator lacks, libvirt's spellings.
    pub blockers: BTreeMap<String, Vec<String>>,
    /// The file it was read from.
    pub source: String,
}

/// A custom model's `usable` attribute in domcapabilities (libvirt's `virDomainCapsCPUUsable`:
/// `unknown`, `yes`, `no`). libvirt says `unknown` where it cannot ask (every Arm model, QEMU
/// without `query-cpu-definitions` usability); a missing or misspelt attribute reads as unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Usable {
    /// `usable='yes'`: the accelerator gives every feature of the model.
    Yes,
    /// `usable='no'`: it lacks some (the `<blockers>`, where libvirt lists them).
    No,
    /// `usable='unknown'`.
    Unknown,
}

impl Usable {
    /// The attribute's value as libvirt writes it.
    #[must_use]
    pub fn parse(v: Option<&str>) -> Usable {
        match v {
            Some("yes") => Usable::Yes,
            Some("no") => Usable::No,
            _ => Usable::Unknown,
        }
    }
}

impl DomCaps {
    /// Reads the `<domainCapabilities>` element `root`; `source` names the file.
    ///
    /// # Errors
    /// A host-model CPU libvirt refuses ([`CpuDef::read_as`]), the reason prefixed with
    /// `<mode name='host-model'>`.
    pub fn read(root: Node<'_, '_>, source: &str) -> Result<DomCaps, String> {
        let txt = |name: &str| child(root, name).and_then(text_of);
        let mut dc = DomCaps {
            arch: txt("arch").unwrap_or_default(),
            virt_type: txt("domain").unwrap_or_default(),
            machine: txt("machine").unwrap_or_default(),
            emulator: txt("path"),
            vcpu_max: positive_count(child(root, "vcpu").and_then(|v| v.attribute("max"))),
            source: source.to_string(),
            ..DomCaps::default()
        };
        let modes = child(root, "cpu")
            .into_iter()
            .flat_map(|c| c.children())
            .filter(|n| is_libvirt_element(*n, "mode") && n.attribute("supported") == Some("yes"));
        for mode in modes {
            let Some(name) = mode.attribute("name").and_then(CpuMode::parse) else {
                continue;
            };
            dc.modes.insert(name);
            match name {
                CpuMode::HostModel => {
                    let cpu = CpuDef::read_as(mode, CpuType::Guest)
                        .map_err(|e| format!("<mode name='host-model'>: {e}"))?;
                    dc.host_model = Some(cpu);
                }
                CpuMode::Custom => {
                    for m in mode.children().filter(|n| is_libvirt_element(*n, "model")) {
                        if let Some(name) = text_of(m) {
                            dc.models.push((name, Usable::parse(m.attribute("usable"))));
                        }
                    }
                    let blockers = mode
                        .children()
                        .filter(|n| is_libvirt_element(*n, "blockers"));
                    for b in blockers {
                        let Some(blocked) = b.attribute("model") else {
                            continue;
                        };
                        let features = b
                            .children()
                            .filter(|f| is_libvirt_element(*f, "feature"))
                            .filter_map(|f| f.attribute("name").map(str::to_string));
                        dc.blockers
                            .entry(blocked.to_string())
                            .or_default()
                            .extend(features);
                    }
                }
                CpuMode::HostPassthrough | CpuMode::Maximum => {}
            }
        }
        Ok(dc)
    }

    /// `Some(usable)` when the custom model is listed `usable='yes'` or `'no'`; None when it is
    /// not listed or libvirt does not know (`usable='unknown'`, every Arm model).
    #[must_use]
    pub fn model_usable(&self, model: &str) -> Option<bool> {
        match self.models.iter().find(|(m, _)| m == model)?.1 {
            Usable::Yes => Some(true),
            Usable::No => Some(false),
            Usable::Unknown => None,
        }
    }

    /// Whether the custom model is listed at all, whatever its `usable`: a model QEMU offers
    /// for this arch and virt type.
    #[must_use]
    pub fn lists_model(&self, model: &str) -> bool {
        self.models.iter().any(|(m, _)| m == model)
    }

    /// The custom models `usable='yes'`, when the `custom` mode is supported (None: libvirt said
    /// nothing about them).
    #[must_use]
    pub fn usable_models(&self) -> Option<BTreeSet<String>> {
        self.modes.contains(&CpuMode::Custom).then(|| {
            self.models
                .iter()
                .filter(|(_, usable)| *usable == Usable::Yes)
                .map(|(m, _)| m.clone())
                .collect()
        })
    }

    /// Whether libvirt offers `mode` to the guests this document describes.
    #[must_use]
    pub fn supports(&self, mode: CpuMode) -> bool {
        self.modes.contains(&mode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(xml: &str) -> Result<DomCaps, String> {
        let doc = roxmltree::Document::parse(xml).unwrap();
        DomCaps::read(doc.root_element(), "dc.xml")
    }

    #[test]
    fn reads_modes_host_model_and_models() {
        let d = read("<domainCapabilities><path>/usr/bin/qemu-system-x86_64</path><domain>kvm</domain>\
            <machine>pc-q35-7.2</machine><arch>x86_64</arch><vcpu max='288'/><cpu>\
            <mode name='host-passthrough' supported='yes'/><mode name='maximum' supported='no'/>\
            <mode name='host-model' supported='yes'><model fallback='forbid'>Nehalem</model><vendor>Intel</vendor>\
            <feature policy='require' name='vme'/><feature policy='disable' name='pni'/></mode>\
            <mode name='custom' supported='yes'><model usable='yes'>qemu64</model><model usable='no'>Haswell</model>\
            <blockers model='Haswell'><feature name='fma'/><feature name='avx2'/></blockers></mode>\
            </cpu></domainCapabilities>").unwrap();
        assert_eq!(d.vcpu_max, Some(288));
        let modes: Vec<&str> = d.modes.iter().map(|m| m.as_str()).collect();
        assert_eq!(modes, ["custom", "host-model", "host-passthrough"]);
        let hm = d.host_model.clone().unwrap();
        assert_eq!(
            (hm.model.as_deref(), hm.vendor.as_deref()),
            (Some("Nehalem"), Some("Intel"))
        );
        assert_eq!(
            hm.features_where(crate::libvirt::cpu_def::FeaturePolicy::takes_away)
                .collect::<Vec<_>>(),
            ["pni"]
        );
        assert_eq!(d.model_usable("Haswell"), Some(false));
        assert_eq!(d.blockers["Haswell"], ["fma", "avx2"]);
        assert_eq!(d.usable_models(), Some(["qemu64".to_string()].into()));
    }

    /// The one reader refuses a host-model CPU libvirt would refuse: before, `virt-cpu-policy
    /// host` counted an unknown policy as `require` and `baseline` dropped the host's CPU.
    #[test]
    fn an_unknown_host_model_policy_refuses_the_document() {
        let e = read("<domainCapabilities><arch>x86_64</arch><cpu><mode name='host-model' supported='yes'>\
            <model>Nehalem</model><feature policy='mandatory' name='vme'/></mode></cpu></domainCapabilities>")
        .unwrap_err();
        assert_eq!(
            e,
            "<mode name='host-model'>: Invalid CPU feature policy 'mandatory' for feature 'vme'"
        );
    }
}
