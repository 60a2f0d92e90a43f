//! Can a guest's CPU run on a host: libvirt's answer to `virsh hypervisor-cpu-compare`
//! (`x86Compute` in libvirt's `src/cpu/cpu_x86.c`), from the host's facts file.
//!
//! The host's CPU is its facts' CPU (the domcapabilities `host-model` CPU, which is what libvirt's
//! QEMU driver compares with). The guest's `require`d features (its model's plus those it
//! requires, minus those it forces, makes optional or disables) must all be on the host; none of
//! its `forbid`den features may be; a `<vendor>` must be the host's. Then the host is `identical`
//! when it has nothing beyond what the guest names, else a `superset`, which is incompatible
//! for `match='strict'`.

use super::CpuError;
use super::baseline::{Select, cpu_data};
use crate::libvirt::cpu_def::{CpuDef, CpuMatch, FeaturePolicy};
use crate::libvirt::cpu_map::x86::{CpuData, X86Map};
use std::path::Path;

/// Whether a guest CPU runs on a host, as libvirt's `virCPUCompareResult` says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compatibility {
    /// The host's CPU is exactly the guest's.
    Identical,
    /// The host has everything the guest needs, and more: the guest runs.
    Superset,
    /// The guest cannot run there.
    Incompatible,
}

impl Compatibility {
    /// `identical`, `superset` or `incompatible`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Compatibility::Identical => "identical",
            Compatibility::Superset => "superset",
            Compatibility::Incompatible => "incompatible",
        }
    }
}

/// A guest CPU to judge: the first `<cpu>` of a domain, or a bare `<cpu>`.
#[derive(Debug, Clone)]
pub struct GuestCpu {
    /// The domain's `<name>` ("" for a bare `<cpu>`).
    pub name: String,
    /// `<cpu match=...>`: `exact` (the default), `minimum` or `strict`.
    pub matching: CpuMatch,
    /// Model, vendor and features, read as libvirt reads a guest CPU
    /// ([`CpuDef::read_as`]).
    pub cpu: CpuDef,
}

/// The comparison's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comparison {
    /// The verdict.
    pub verdict: Compatibility,
    /// libvirt's reason for `incompatible` (its exact words, e.g. "Host CPU does not provide
    /// required features: pni, popcnt"), else None.
    pub message: Option<String>,
    /// Required features the host lacks, in map order.
    pub missing: Vec<String>,
    /// Forbidden features the host has.
    pub forbidden: Vec<String>,
    /// Host features the guest does not name (what makes the host a superset).
    pub extra: Vec<String>,
    /// What the reader must know about this answer (a versioned model).
    pub notes: Vec<String>,
}

/// Compares `guest` (read from `guest_path`) with the host CPU `host_cpu` (read from
/// `host_path`): libvirt's `x86Compute`.
///
/// # Errors
/// Unknown models, features (in either CPU): [`CpuError::UnknownModel`],
/// [`CpuError::UnknownFeature`].
pub fn compare_cpus(
    map: &X86Map,
    host_cpu: &CpuDef,
    host_path: &Path,
    guest: &GuestCpu,
    guest_path: &Path,
) -> Result<Comparison, CpuError> {
    let mut answer = Comparison {
        verdict: Compatibility::Incompatible,
        message: None,
        missing: Vec::new(),
        forbidden: Vec::new(),
        extra: Vec::new(),
        notes: versioned_model_note(map, guest).into_iter().collect(),
    };
    if let Some(v) = &guest.cpu.vendor {
        if host_cpu.vendor.as_ref() != Some(v) {
            answer.message = Some(format!(
                "host CPU vendor does not match required CPU vendor {v}"
            ));
            return Ok(answer);
        }
    }
    let host_data = cpu_data(map, host_cpu, Select::All, host_path)?;
    compare_features(map, host_data, guest, guest_path, answer)
}

/// What the reader must know when the guest's model is a versioned alias: libvirt 11 judges it
/// through QEMU's definition, which this answer does not have.
fn versioned_model_note(map: &X86Map, guest: &GuestCpu) -> Option<String> {
    let versioned = guest.cpu.model.as_deref().and_then(|m| map.model(m));
    versioned.filter(|m| !m.decode_guest).map(|m| {
        format!(
            "{} is a versioned alias (<decode guest='off'/> in the cpu_map): libvirt 11 judges it through QEMU's own definition of that version, which may have more features and ignores the vendor; this answer uses the cpu_map's definition",
            m.name
        )
    })
}

/// `x86Compute` on the features, once the vendors agree: a forbidden feature the host has, then
/// a required one it lacks, make the guest incompatible; else the host's features beyond the
/// guest's decide between `identical` and `superset` (incompatible under `match='strict'`).
fn compare_features(
    map: &X86Map,
    host_data: CpuData,
    guest: &GuestCpu,
    guest_path: &Path,
    mut answer: Comparison,
) -> Result<Comparison, CpuError> {
    let part = |p| cpu_data(map, &guest.cpu, Select::Policy(p), guest_path);
    let force = part(FeaturePolicy::Force)?;
    let mut require = part(FeaturePolicy::Require)?;
    let optional = part(FeaturePolicy::Optional)?;
    let disable = part(FeaturePolicy::Disable)?;
    let mut forbid = part(FeaturePolicy::Forbid)?;
    let names = |d| -> Vec<String> {
        map.feature_names(d)
            .into_iter()
            .map(str::to_owned)
            .collect()
    };

    forbid.intersect(&host_data);
    if !forbid.is_empty() {
        answer.forbidden = names(&forbid);
        answer.message = Some(format!(
            "Host CPU provides forbidden features: {}",
            answer.forbidden.join(", ")
        ));
        return Ok(answer);
    }
    for d in [&force, &optional, &disable] {
        require.subtract(d);
    }
    if !host_data.contains(&require) {
        answer.missing = names(&require.minus(&host_data));
        answer.message = Some(format!(
            "Host CPU does not provide required features: {}",
            answer.missing.join(", ")
        ));
        return Ok(answer);
    }
    let mut diff = host_data;
    for d in [&optional, &require, &disable, &force] {
        diff.subtract(d);
    }
    answer.extra = names(&diff);
    if diff.is_empty() {
        answer.verdict = Compatibility::Identical;
    } else if guest.matching == CpuMatch::Strict {
        answer.message = Some(format!(
            "Host CPU does not strictly match guest CPU: Extra features: {}",
            answer.extra.join(", ")
        ));
    } else {
        answer.verdict = Compatibility::Superset;
    }
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::hosts::{ClusterHost, compare};
    use crate::guest_cpu::guest_cpu;
    use std::collections::BTreeSet;
    use std::path::PathBuf;

    fn map() -> X86Map {
        X86Map::load(&crate::testdata::cpu_map()).unwrap()
    }

    fn host(model: &str, vendor: &str, features: &[(&str, FeaturePolicy)]) -> ClusterHost {
        ClusterHost {
            name: "h".into(),
            path: PathBuf::from("h.xml"),
            arch: "x86_64".into(),
            cpu: Some(CpuDef {
                model: Some(model.into()),
                vendor: Some(vendor.into()),
                features: features.iter().map(|(n, p)| ((*n).into(), *p)).collect(),
                ..CpuDef::default()
            }),
            origin: None,
            usable_models: None,
            known_models: None,
            machines: BTreeSet::default(),
            libvirt: None,
        }
    }

    fn run(map: &X86Map, h: &ClusterHost, xml: &str) -> Comparison {
        let g = guest_cpu(xml, Path::new("g.xml")).unwrap();
        compare(map, h, &g, Path::new("g.xml")).unwrap()
    }

    #[test]
    fn verdicts_and_messages() {
        let map = map();
        let h = host(
            "Nehalem",
            "Intel",
            &[
                ("vme", FeaturePolicy::Require),
                ("pni", FeaturePolicy::Disable),
            ],
        );
        let same = run(
            &map,
            &h,
            "<cpu><model>Nehalem</model><feature name='vme'/><feature policy='disable' name='pni'/></cpu>",
        );
        assert_eq!(same.verdict, Compatibility::Identical, "{same:?}");
        let sub = run(
            &map,
            &h,
            "<domain><name>g</name><cpu mode='custom'><model>Penryn</model></cpu></domain>",
        );
        assert_eq!(sub.verdict, Compatibility::Incompatible);
        assert_eq!(sub.missing, ["pni"]);
        let small = run(&map, &h, "<cpu><model>pentium</model></cpu>");
        assert_eq!(small.verdict, Compatibility::Superset);
        assert!(small.extra.contains(&"sse2".to_string()));
        let strict = run(&map, &h, "<cpu match='strict'><model>pentium</model></cpu>");
        assert_eq!(strict.verdict, Compatibility::Incompatible);
        assert!(
            strict
                .message
                .unwrap()
                .starts_with("Host CPU does not strictly match guest CPU: Extra features: ")
        );
        let forbid = run(
            &map,
            &h,
            "<cpu><model>pentium</model><feature policy='forbid' name='vme'/></cpu>",
        );
        assert_eq!(
            forbid.message.as_deref(),
            Some("Host CPU provides forbidden features: vme")
        );
        let vendor = run(
            &map,
            &h,
            "<cpu><model>pentium</model><vendor>AMD</vendor></cpu>",
        );
        assert_eq!(
            vendor.message.as_deref(),
            Some("host CPU vendor does not match required CPU vendor AMD")
        );
        let missing = run(
            &map,
            &h,
            "<cpu><model>Nehalem</model><feature name='avx'/><feature policy='optional' name='aes'/></cpu>",
        );
        assert_eq!(
            missing.missing,
            ["pni", "avx"],
            "map order, optional ignored"
        );
    }

    #[test]
    fn guest_refusals() {
        for (xml, needle) in [
            ("<domain><name>g</name></domain>", "has no <cpu>"),
            (
                "<domain><cpu mode='host-passthrough'/></domain>",
                "mode='host-passthrough'",
            ),
            ("<cpu><feature name='avx'/></cpu>", "without CPU model"),
            ("<cpu match='loose'><model>Nehalem</model></cpu>", "'loose'"),
            (
                "<cpu><model>Nehalem</model><feature policy='maybe' name='avx'/></cpu>",
                "'maybe'",
            ),
            ("<network/>", "not a libvirt domain"),
        ] {
            let e = guest_cpu(xml, Path::new("g.xml")).unwrap_err().to_string();
            assert!(e.contains(needle), "{xml}: {e}");
        }
    }
}
