//! A CPU as libvirt describes one in XML (`virCPUDef`, `src/conf/cpu_conf.c`), and libvirt's
//! words for its attributes, one enum each as libvirt has one (`VIR_ENUM_IMPL`): the mode, the
//! `match`, the `check`, the model's `fallback` and each feature's `policy`.
//!
//! [`CpuDef::read`] reads a `<cpu>` element (or the `<mode name='host-model'>` of
//! domcapabilities, written alike) with libvirt's own strictness (`virCPUDefParseXML`): what
//! libvirt refuses ("Invalid CPU feature policy", "CPU feature 'x' specified more than once",
//! "Invalid mode attribute 'x'"...) is refused here, with libvirt's words. Every host document
//! the tool reads takes its CPUs through it: the capabilities' host CPU, the domcapabilities'
//! host-model CPU, a bare host `<cpu>`, the guest CPU `compare` judges.
//!
//! A domain's own `<cpu>` is not read here: the rewrite keeps it as written, byte for byte, and
//! judges what libvirt would refuse as findings ([`crate::validate`]).

use crate::xml::{child, is_libvirt_element, text_of};
use roxmltree::Node;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// libvirt's `<cpu mode=...>` (`virCPUMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CpuMode {
    /// `custom`: a named model plus features (libvirt's default).
    Custom,
    /// `host-model`: libvirt copies the host's CPU model and features (x86, s390x, ppc64).
    HostModel,
    /// `host-passthrough`: the host CPU as KVM sees it (not under TCG).
    HostPassthrough,
    /// `maximum`: everything the hypervisor can give (libvirt >= 7.1).
    Maximum,
}

impl CpuMode {
    /// The four modes in the order the tool lists them in messages: the host-based ones
    /// first, then `custom`.
    pub const ALL: [CpuMode; 4] = [
        CpuMode::HostModel,
        CpuMode::HostPassthrough,
        CpuMode::Maximum,
        CpuMode::Custom,
    ];

    /// libvirt's spelling.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            CpuMode::HostModel => "host-model",
            CpuMode::HostPassthrough => "host-passthrough",
            CpuMode::Maximum => "maximum",
            CpuMode::Custom => "custom",
        }
    }

    /// libvirt's spelling parsed; None for anything else.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        CpuMode::ALL.into_iter().find(|m| m.as_str() == s)
    }

    /// Whether the guest's CPU is the host's (`host-model`, `host-passthrough`, `maximum`),
    /// not a named model.
    #[must_use]
    pub fn is_host_based(self) -> bool {
        self != CpuMode::Custom
    }

    /// Whether the guest gets the hypervisor's whole CPU as it is (`host-passthrough`,
    /// `maximum`), no model made of it: the modes libvirt allows `migratable` and `<cache
    /// mode='passthrough'>` with, and whose model `fallback` it does not read
    /// (`virCPUDefParseXML`).
    #[must_use]
    pub fn is_passthrough_like(self) -> bool {
        matches!(self, CpuMode::HostPassthrough | CpuMode::Maximum)
    }
}

impl std::fmt::Display for CpuMode {
    /// libvirt's spelling, padded as asked (`{mode:16}`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// libvirt's `<cpu match=...>` (`virCPUMatch`): how strictly a custom CPU must match the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuMatch {
    /// `minimum`: at least the model's features.
    Minimum,
    /// `exact` (libvirt's default): the model and the listed features.
    Exact,
    /// `strict`: and no host feature beyond them.
    Strict,
}

impl CpuMatch {
    /// libvirt's spelling.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            CpuMatch::Minimum => "minimum",
            CpuMatch::Exact => "exact",
            CpuMatch::Strict => "strict",
        }
    }

    /// libvirt's spelling parsed; None for anything else.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        [CpuMatch::Minimum, CpuMatch::Exact, CpuMatch::Strict]
            .into_iter()
            .find(|m| m.as_str() == s)
    }
}

/// libvirt's `<cpu check=...>` (`virCPUCheck`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CpuCheck {
    /// No check: features the host lacks are silently dropped (seen with libvirt 9.0).
    None,
    /// libvirt checks before start (its default for custom).
    Partial,
    /// libvirt also checks the CPU QEMU really created.
    Full,
}

impl CpuCheck {
    /// libvirt's spelling.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            CpuCheck::None => "none",
            CpuCheck::Partial => "partial",
            CpuCheck::Full => "full",
        }
    }

    /// libvirt's spelling parsed; None for anything else.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        [CpuCheck::None, CpuCheck::Partial, CpuCheck::Full]
            .into_iter()
            .find(|c| c.as_str() == s)
    }

    /// The `check` libvirt writes for `mode` in a domain of `virt_type` (`kvm`, `qemu`...) when
    /// none is given (libvirt's `qemuDomainDefCPUPostParse`; seen with libvirt 9.0: `virsh
    /// define` of `<cpu mode='host-model'/>` stores `check='partial'`, host-passthrough and
    /// maximum `check='none'`, a custom CPU `check='partial'` under KVM and `check='none'` under
    /// TCG, `type='qemu'`: "Custom CPUs in TCG mode are not compared to host CPU by default").
    #[must_use]
    pub fn default_for(mode: CpuMode, virt_type: &str) -> CpuCheck {
        match mode {
            CpuMode::HostModel => CpuCheck::Partial,
            CpuMode::Custom if virt_type != "qemu" => CpuCheck::Partial,
            _ => CpuCheck::None,
        }
    }
}

/// libvirt's `<model fallback=...>` (`virCPUFallback`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fallback {
    /// libvirt may pick a close model.
    Allow,
    /// Only the named model.
    Forbid,
}

impl Fallback {
    /// libvirt's spelling.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Fallback::Allow => "allow",
            Fallback::Forbid => "forbid",
        }
    }

    /// libvirt's spelling parsed; None for anything else.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        [Fallback::Allow, Fallback::Forbid]
            .into_iter()
            .find(|f| f.as_str() == s)
    }
}

/// A feature's policy in a guest CPU (`virCPUFeaturePolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FeaturePolicy {
    /// `force`: on even if the host lacks it.
    Force,
    /// `require` (the default): the host must have it.
    Require,
    /// `optional`: on when the host has it.
    Optional,
    /// `disable`: off.
    Disable,
    /// `forbid`: the host must not have it.
    Forbid,
}

impl FeaturePolicy {
    /// The five policies, in libvirt's order.
    pub const ALL: [FeaturePolicy; 5] = [
        FeaturePolicy::Force,
        FeaturePolicy::Require,
        FeaturePolicy::Optional,
        FeaturePolicy::Disable,
        FeaturePolicy::Forbid,
    ];

    /// libvirt's spelling.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            FeaturePolicy::Force => "force",
            FeaturePolicy::Require => "require",
            FeaturePolicy::Optional => "optional",
            FeaturePolicy::Disable => "disable",
            FeaturePolicy::Forbid => "forbid",
        }
    }

    /// libvirt's spelling parsed; None for anything else.
    #[must_use]
    pub fn parse(s: &str) -> Option<FeaturePolicy> {
        FeaturePolicy::ALL.into_iter().find(|p| p.as_str() == s)
    }

    /// Whether the policy puts the feature in the guest whatever else is said: `force`,
    /// `require` (`optional` only when the host has it).
    #[must_use]
    pub fn gives(self) -> bool {
        matches!(self, FeaturePolicy::Force | FeaturePolicy::Require)
    }

    /// Whether the policy keeps the feature out of the guest: `disable`, `forbid`.
    #[must_use]
    pub fn takes_away(self) -> bool {
        matches!(self, FeaturePolicy::Disable | FeaturePolicy::Forbid)
    }
}

/// Whether a policy as written in a `<feature>` (`require` when absent) puts the feature in the
/// guest ([`FeaturePolicy::gives`]); a word libvirt does not know gives nothing.
#[must_use]
pub fn policy_present(written: &str) -> bool {
    FeaturePolicy::parse(written).is_some_and(FeaturePolicy::gives)
}

/// Whether a policy as written keeps the feature out ([`FeaturePolicy::takes_away`]).
#[must_use]
pub fn policy_absent(written: &str) -> bool {
    FeaturePolicy::parse(written).is_some_and(FeaturePolicy::takes_away)
}

/// The features a custom CPU is guaranteed to have: its model's (from cpu_map, `None` when the
/// model is unknown) plus each listed feature whose policy gives it ([`FeaturePolicy::gives`]),
/// minus every other listed one (`disable`, `forbid`; `optional`, which only enables a feature
/// when the host has it; and a policy libvirt does not know, `None`). A later listing of a name
/// overrides an earlier one.
#[must_use]
pub fn guaranteed_features(
    model_features: Option<&BTreeSet<String>>,
    listed: &[(String, Option<FeaturePolicy>)],
) -> BTreeSet<String> {
    let mut set: BTreeSet<String> = model_features.cloned().unwrap_or_default();
    for (name, policy) in listed {
        if policy.is_some_and(FeaturePolicy::gives) {
            set.insert(name.clone());
        } else {
            set.remove(name);
        }
    }
    set
}

/// Whether a `<cpu>` describes a host's CPU or a guest's (`virCPUType`): libvirt reads policies,
/// mode, `match` and `check` only in a guest CPU, and requires an `<arch>` of a host CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuType {
    /// A host CPU (`virsh capabilities`' `<host><cpu>`, libvirt's `tests/cputestdata/*-host.xml`).
    Host,
    /// A guest CPU (a domain's, domcapabilities' host-model CPU).
    Guest,
}

/// A CPU definition, the parts the tool reads (libvirt's `virCPUDef`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuDef {
    /// `mode` of a guest CPU (`custom` when absent); None for a host CPU.
    pub mode: Option<CpuMode>,
    /// `match` as written (libvirt's default, `exact`, when absent).
    pub matching: Option<CpuMatch>,
    /// `check` as written.
    pub check: Option<CpuCheck>,
    /// A host CPU's `<arch>`.
    pub arch: Option<String>,
    /// `<model>`, trimmed; None when absent or empty.
    pub model: Option<String>,
    /// `<model fallback=...>` of a guest CPU.
    pub fallback: Option<Fallback>,
    /// `<vendor>` (`Intel`, `AMD`...).
    pub vendor: Option<String>,
    /// `<feature>` names (exactly as written: libvirt's names) with their policies, in document
    /// order. A host CPU's features have no policy in libvirt (the CPU has them): `require`.
    pub features: Vec<(String, FeaturePolicy)>,
}

impl CpuDef {
    /// Reads a `<cpu>` as libvirt does when it is not told which kind it is
    /// (`VIR_CPU_TYPE_AUTO`): a host CPU when it has an `<arch>`, else a guest CPU.
    ///
    /// # Errors
    /// As [`CpuDef::read_as`], and "'arch' element cannot be used inside 'cpu' element with
    /// 'match' attribute'".
    pub fn read(node: Node<'_, '_>) -> Result<CpuDef, String> {
        if child(node, "arch").is_some() {
            if node.attribute("match").is_some() {
                return Err(
                    "'arch' element cannot be used inside 'cpu' element with 'match' attribute'"
                        .into(),
                );
            }
            Self::read_as(node, CpuType::Host)
        } else {
            Self::read_as(node, CpuType::Guest)
        }
    }

    /// Reads `node` (a `<cpu>`, or a domcapabilities `<mode>` holding a CPU) as a CPU of `kind`,
    /// with libvirt's checks (`virCPUDefParseXML`), each refusal in libvirt's words.
    ///
    /// # Errors
    /// One sentence: a host CPU with a `mode` ("Attribute mode is only allowed for guest CPU"),
    /// without `<arch>` ("Missing CPU architecture") or of an arch libvirt does not know
    /// ("Unknown architecture %s"); a guest CPU's mode, `match`, `check`, `fallback` or feature
    /// policy libvirt does not know; `migratable` outside host-passthrough and maximum; a
    /// vendor without a model; features of a custom CPU without a model; a feature without a
    /// name ("Invalid CPU feature name") or listed twice ("CPU feature '%s' specified more than
    /// once").
    pub fn read_as(node: Node<'_, '_>, kind: CpuType) -> Result<CpuDef, String> {
        let host = kind == CpuType::Host;
        let mut cpu = CpuDef::default();
        match (node.attribute("mode"), host) {
            (Some(_), true) => return Err("Attribute mode is only allowed for guest CPU".into()),
            (Some(m), false) => {
                let mode =
                    CpuMode::parse(m).ok_or_else(|| format!("Invalid mode attribute '{m}'"))?;
                cpu.mode = Some(mode);
            }
            (None, true) => {}
            (None, false) => cpu.mode = Some(CpuMode::Custom),
        }
        let passthrough = cpu.mode.is_some_and(CpuMode::is_passthrough_like);
        if node.attribute("migratable").is_some() && !passthrough {
            return Err(
                "Attribute migratable is only allowed for 'host-passthrough' / 'maximum' CPU mode"
                    .into(),
            );
        }
        if !host {
            cpu.matching = attribute(node, "match", CpuMatch::parse)?;
            cpu.check = attribute(node, "check", CpuCheck::parse)?;
        }
        if host {
            let arch = child(node, "arch")
                .and_then(text_of)
                .ok_or("Missing CPU architecture")?;
            if !crate::libvirt::arch::is_known(&arch) {
                return Err(format!("Unknown architecture {arch}"));
            }
            cpu.arch = Some(arch);
        }
        let model = child(node, "model");
        cpu.model = model.and_then(text_of);
        if !host && !passthrough {
            if let Some(m) = model {
                cpu.fallback = attribute(m, "fallback", Fallback::parse)
                    .map_err(|_| "Invalid fallback attribute".to_string())?;
            }
        }
        cpu.vendor = child(node, "vendor").and_then(text_of);
        if cpu.vendor.is_some() && cpu.model.is_none() {
            return Err("CPU vendor specified without CPU model".into());
        }
        cpu.features = features(node, host)?;
        if !cpu.features.is_empty() && cpu.model.is_none() && cpu.mode == Some(CpuMode::Custom) {
            return Err("Non-empty feature list specified without CPU model".into());
        }
        Ok(cpu)
    }

    /// The features the CPU is guaranteed to have, its model's being `model_features`
    /// ([`guaranteed_features`]; domcapabilities' host-model CPU is written so).
    #[must_use]
    pub fn guaranteed_features(
        &self,
        model_features: Option<&BTreeSet<String>>,
    ) -> BTreeSet<String> {
        let listed: Vec<(String, Option<FeaturePolicy>)> = self
            .features
            .iter()
            .map(|(n, p)| (n.clone(), Some(*p)))
            .collect();
        guaranteed_features(model_features, &listed)
    }

    /// The features listed with a policy `select` says yes to, in document order.
    pub fn features_where(
        &self,
        select: impl Fn(FeaturePolicy) -> bool,
    ) -> impl Iterator<Item = &str> {
        self.features
            .iter()
            .filter(move |(_, p)| select(*p))
            .map(|(n, _)| n.as_str())
    }
}

/// An optional attribute of libvirt's enum `parse`, refused in libvirt's words when it is not
/// one of the enum's (`virXMLPropEnum`).
fn attribute<T>(
    node: Node<'_, '_>,
    name: &str,
    parse: fn(&str) -> Option<T>,
) -> Result<Option<T>, String> {
    node.attribute(name)
        .map(|v| {
            parse(v).ok_or_else(|| {
                format!(
                    "Invalid value for attribute '{name}' in element '{}': '{v}'.",
                    node.tag_name().name()
                )
            })
        })
        .transpose()
}

/// The `<feature>` children: a guest CPU's policies read (`require` when absent), a host CPU's
/// ignored, as libvirt does; every name once.
fn features(node: Node<'_, '_>, host: bool) -> Result<Vec<(String, FeaturePolicy)>, String> {
    let mut out: Vec<(String, FeaturePolicy)> = Vec::new();
    // Names seen: a set, as a hostile `<cpu>` may list tens of thousands.
    let mut seen = std::collections::HashSet::new();
    for f in node
        .children()
        .filter(|n| is_libvirt_element(*n, "feature"))
    {
        let policy = match (host, f.attribute("policy")) {
            (true, _) | (false, None) => FeaturePolicy::Require,
            (false, Some(p)) => FeaturePolicy::parse(p).ok_or_else(|| {
                let name = f.attribute("name").unwrap_or_default();
                format!("Invalid CPU feature policy '{p}' for feature '{name}'")
            })?,
        };
        let name = f
            .attribute("name")
            .filter(|n| !n.is_empty())
            .ok_or("Invalid CPU feature name")?;
        if !seen.insert(name) {
            return Err(format!("CPU feature '{name}' specified more than once"));
        }
        out.push((name.to_string(), policy));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(xml: &str) -> Result<CpuDef, String> {
        let doc = roxmltree::Document::parse(xml).unwrap();
        CpuDef::read(doc.root_element())
    }

    #[test]
    fn enums_round_trip_libvirts_words() {
        for m in CpuMode::ALL {
            assert_eq!(CpuMode::parse(m.as_str()), Some(m));
        }
        for p in FeaturePolicy::ALL {
            assert_eq!(FeaturePolicy::parse(p.as_str()), Some(p));
        }
        assert_eq!(CpuMatch::parse("strict"), Some(CpuMatch::Strict));
        assert_eq!(CpuCheck::parse("full"), Some(CpuCheck::Full));
        assert_eq!(Fallback::parse("forbid"), Some(Fallback::Forbid));
        assert_eq!(CpuMode::parse("host"), None);
        assert!(policy_present("force") && !policy_present("optional") && !policy_present("bar"));
        assert!(policy_absent("forbid") && !policy_absent("bar"));
    }

    #[test]
    fn host_and_guest_cpus() {
        let h = read("<cpu><arch>x86_64</arch><model>Haswell-v2</model><vendor>Intel</vendor><feature policy='disable' name='vmx'/></cpu>").unwrap();
        assert_eq!((h.mode, h.arch.as_deref()), (None, Some("x86_64")));
        // A host CPU's features have no policy in libvirt: the CPU has them.
        assert_eq!(h.features, [("vmx".to_string(), FeaturePolicy::Require)]);
        let g = read("<cpu match='strict'><model fallback='forbid'> Nehalem </model><feature name='aes'/><feature policy='forbid' name='vmx'/></cpu>").unwrap();
        assert_eq!(
            (g.mode, g.matching, g.model.as_deref(), g.fallback),
            (
                Some(CpuMode::Custom),
                Some(CpuMatch::Strict),
                Some("Nehalem"),
                Some(Fallback::Forbid)
            )
        );
        let model: BTreeSet<String> = ["vmx", "sse2"].map(String::from).into();
        let got = g.guaranteed_features(Some(&model));
        assert_eq!(got, ["aes", "sse2"].map(String::from).into());
    }

    #[test]
    fn what_libvirt_refuses_is_refused_in_its_words() {
        for (xml, words) in [
            (
                "<cpu><model>A</model><feature policy='maybe' name='avx'/></cpu>",
                "Invalid CPU feature policy 'maybe' for feature 'avx'",
            ),
            (
                "<cpu><model>A</model><feature name='avx'/><feature policy='disable' name='avx'/></cpu>",
                "CPU feature 'avx' specified more than once",
            ),
            (
                "<cpu><model>A</model><feature policy='require'/></cpu>",
                "Invalid CPU feature name",
            ),
            (
                "<cpu><model>A</model><feature name=''/></cpu>",
                "Invalid CPU feature name",
            ),
            ("<cpu mode='host'/>", "Invalid mode attribute 'host'"),
            (
                "<cpu match='loose'><model>A</model></cpu>",
                "Invalid value for attribute 'match' in element 'cpu': 'loose'.",
            ),
            (
                "<cpu check='some'/>",
                "Invalid value for attribute 'check' in element 'cpu': 'some'.",
            ),
            (
                "<cpu><model fallback='maybe'>A</model></cpu>",
                "Invalid fallback attribute",
            ),
            (
                "<cpu migratable='on'><model>A</model></cpu>",
                "Attribute migratable is only allowed",
            ),
            (
                "<cpu><vendor>Intel</vendor></cpu>",
                "CPU vendor specified without CPU model",
            ),
            (
                "<cpu><feature name='avx'/></cpu>",
                "Non-empty feature list specified without CPU model",
            ),
            (
                "<cpu mode='custom'><arch>x86_64</arch></cpu>",
                "Attribute mode is only allowed for guest CPU",
            ),
            (
                "<cpu match='exact'><arch>x86_64</arch></cpu>",
                "'arch' element cannot be used",
            ),
            (
                "<cpu><arch>x86-64</arch><model>A</model></cpu>",
                "Unknown architecture x86-64",
            ),
        ] {
            let e = read(xml).unwrap_err();
            assert!(e.contains(words), "{xml}: {e}");
        }
        // A host CPU of a guest's shape: its policy is libvirt's to ignore, not to refuse.
        assert!(
            read(
                "<cpu><arch>x86_64</arch><model>A</model><feature policy='maybe' name='avx'/></cpu>"
            )
            .is_ok()
        );
        // host-passthrough keeps features without a model.
        assert!(
            read("<cpu mode='host-passthrough' migratable='on'><feature name='avx'/></cpu>")
                .is_ok()
        );
    }
}
