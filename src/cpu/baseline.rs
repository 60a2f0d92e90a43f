//! libvirt's x86 CPU baseline, computed the way libvirt computes it for
//! `virsh cpu-baseline` (`virCPUx86Baseline` and `x86Decode` in libvirt's `src/cpu/cpu_x86.c`).
//!
//! The hosts' CPUs are turned into CPUID data (model data plus required features), intersected
//! bit by bit, and the intersection is "decoded": every guest model of the cpu_map is tried,
//! newest first, as "this model, plus the features it lacks (`require`), minus the features the
//! hosts lack (`disable`)", and the candidate with the shortest list wins, disabled features
//! weighing more. A model one of the hosts is named after wins outright when all hosts share it,
//! and is preferred on ties otherwise. The quirks of libvirt's scoring are kept on purpose (see
//! [`score`]): the point is to give the answer libvirt gives.
//!
//! One deliberate difference: libvirt refuses hosts of different vendors ("CPU vendors do not
//! match"). With [`BaselineOptions::vendor_neutral`] the intersection is decoded instead as
//! libvirt decodes CPU data that names no vendor: every vendor's guest models are candidates, no
//! model is preferred, and the result has no `<vendor>` (the guest then sees the chosen model's
//! own vendor string on every host).

use super::CpuError;
use crate::libvirt::cpu_def::{CpuDef, FeaturePolicy};
use crate::libvirt::cpu_map::x86::{CpuData, DecodeFor, FeatureList, X86Map, X86Model};
use std::collections::BTreeSet;
use std::path::Path;

/// Which features of a CPU definition make its data: libvirt's `policy` argument of
/// `x86ModelFromCPU`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Select {
    /// Everything the CPU has (libvirt's `-1`): the model's features, plus `force`/`require`,
    /// minus `disable`/`forbid`, in document order; `optional` ignored.
    All,
    /// Only the features of this policy (plus the model's own for `require`).
    Policy(FeaturePolicy),
}

/// The CPUID data of `cpu` (libvirt's `x86ModelFromCPU`). `path` names the file in errors.
///
/// # Errors
/// [`CpuError::UnknownModel`] / [`CpuError::UnknownFeature`] for names the map lacks
/// (libvirt: "Unknown CPU model %s", "Unknown CPU feature %s").
pub fn cpu_data(
    map: &X86Map,
    cpu: &CpuDef,
    select: Select,
    path: &Path,
) -> Result<CpuData, CpuError> {
    let mut data = map.empty_data();
    let with_model = matches!(select, Select::All | Select::Policy(FeaturePolicy::Require));
    if let (Some(model), true) = (&cpu.model, with_model) {
        let found = map.model(model).ok_or_else(|| CpuError::UnknownModel {
            path: path.to_owned(),
            model: model.clone(),
            map: map.source().to_owned(),
        })?;
        data.add(&found.data);
    }
    for (name, policy) in &cpu.features {
        let take = match select {
            Select::All => *policy != FeaturePolicy::Optional,
            Select::Policy(p) => *policy == p,
        };
        if !take {
            continue;
        }
        let feature = map.feature(name).ok_or_else(|| CpuError::UnknownFeature {
            path: path.to_owned(),
            feature: name.clone(),
            map: map.source().to_owned(),
        })?;
        match (select, policy) {
            (Select::All, FeaturePolicy::Disable | FeaturePolicy::Forbid) => {
                data.subtract(&feature.data);
            }
            _ => data.add(&feature.data),
        }
    }
    Ok(data)
}

/// Features libvirt's QEMU driver never passes to QEMU and drops from every baseline it prints
/// (`virQEMUCapsCPUFilterFeatures` in libvirt's `src/qemu/qemu_capabilities.c`, applied by
/// `qemuConnectBaselineCPU`): QEMU never supported them or dropped them as useless. A host CPU
/// may list them (`virsh capabilities` decodes them from CPUID); a guest CPU never has them.
pub const QEMU_DROPPED_FEATURES: [&str; 5] = ["cmt", "mbm_total", "mbm_local", "osxsave", "ospke"];

/// Features QEMU sets in a guest's CPUID from its vCPU topology, whatever the CPU model says:
/// `ht` (CPUID 1 EDX bit 28) and `cmp_legacy` (0x80000001 ECX bit 1), set only with more than
/// one logical CPU per package (more than one core for `cmp_legacy`, and only for a vendor
/// other than Intel: QEMU's `target/i386/cpu.c`, leaf 0x80000001, "don't set it here for
/// Intel"). From QEMU 10.0.1 on (the
/// series "i386/cpu: Set up CPUID_HT in x86_cpu_expand_features()", QEMU 5979f50fa9fd, in the
/// stable 10.0.1) KVM and TCG alike build them so, and libvirt then finds a one-vCPU guest CPU
/// that required them without them: the hook's `started` check said "the started CPU lacks
/// required features: missing cmp_legacy" for a cluster CPU on QEMU 11.1 of an AMD host, whose
/// host-model CPU requires `cmp_legacy`. A cluster CPU is for every guest of the cluster, of any
/// topology, so [`leave_out_topology`] takes them out of it: leaving them out costs a guest
/// nothing, QEMU sets them where its topology has them.
pub const QEMU_TOPOLOGY_FEATURES: [&str; 2] = ["ht", "cmp_legacy"];

/// `b` without [`QEMU_TOPOLOGY_FEATURES`] among the features it requires (no libvirt model has
/// them, so none is disabled). Returns the ones it had, in the order of the constant.
pub fn leave_out_topology(b: &mut Baseline) -> Vec<String> {
    leave_out_required(b, QEMU_TOPOLOGY_FEATURES)
}

/// `b` without those of `names` it requires; returns them, in the order of `names`.
fn leave_out_required<'n>(
    b: &mut Baseline,
    names: impl IntoIterator<Item = &'n str>,
) -> Vec<String> {
    let had: Vec<String> = names
        .into_iter()
        .filter(|f| b.cpu.require.iter().any(|r| r == f))
        .map(str::to_string)
        .collect();
    b.cpu.require.retain(|f| !had.contains(f));
    had
}

/// `b` without `arch-capabilities` and its bits
/// ([`crate::cpu::ARCH_CAPABILITIES_BITS`]) among the features it requires, when
/// the hosts are AMD's (`vendor`): KVM emulates the MSR on AMD, QEMU before 10.1 aborts a guest
/// whose CPU carries it ("failed to set MSR 0x10a"), and QEMU 10.1 leaves it out of AMD guests
/// by default, so no guest of an AMD cluster keeps it (`src/validate/arch_caps.rs`). Returns the
/// ones it had, in the order of `arch-capabilities` then its bits.
pub fn leave_out_arch_capabilities(b: &mut Baseline, vendor: Option<&str>) -> Vec<String> {
    if vendor != Some("AMD") {
        return Vec::new();
    }
    leave_out_required(
        b,
        std::iter::once("arch-capabilities").chain(crate::cpu::ARCH_CAPABILITIES_BITS),
    )
}

/// `cpu` without [`QEMU_DROPPED_FEATURES`].
fn drop_qemu_unknown(mut cpu: Decoded) -> Decoded {
    for list in [&mut cpu.require, &mut cpu.disable] {
        list.retain(|f| !QEMU_DROPPED_FEATURES.contains(&f.as_str()));
    }
    cpu
}

/// `b` without the features KVM never gives a guest ([`crate::cpu::KVM_NEVER_GIVES`]): taken
/// out of `require`, and those its model has are added to `disable` (map order;
/// [`crate::cpu::NeverDisabled::OfTheModel`]: the baseline is written into guests' XML). The
/// model stays the one libvirt's `cpu-baseline` names. Returns the features the guest loses, in map order:
/// those the baseline had.
///
/// For hosts known only by their physical CPU (`virsh capabilities`): libvirt calls a guest CPU
/// requiring one of them incompatible under KVM ("Host CPU does not provide required features")
/// and refuses to start it (but for `ht`, see [`crate::cpu::KVM_NEVER_GIVES`]), while libvirt's
/// `cpu-baseline` of the physical CPUs keeps them.
pub fn leave_out_kvm_never(map: &X86Map, b: &mut Baseline) -> Vec<String> {
    let had: Vec<String> = b
        .effective_features(map)
        .into_iter()
        .filter(|f| crate::cpu::kvm_never_gives(f))
        .map(str::to_owned)
        .collect();
    let disable = crate::cpu::subtract_kvm_never(
        map,
        Some(&b.cpu.model),
        &mut b.cpu.require,
        String::as_str,
        crate::cpu::NeverDisabled::OfTheModel,
    );
    for f in disable {
        if !b.cpu.disable.iter().any(|d| d == f) {
            b.cpu.disable.push(f.to_owned());
        }
    }
    had
}

/// One CPU going into a baseline: what libvirt reads of each `<cpu>` given to `cpu-baseline`.
#[derive(Debug, Clone)]
pub struct InputCpu<'a> {
    /// `<model>`.
    pub model: Option<&'a str>,
    /// `<vendor>`.
    pub vendor: Option<&'a str>,
    /// Its data ([`cpu_data`] with [`Select::All`]).
    pub data: CpuData,
}

/// How to compute a baseline.
#[derive(Debug, Clone, Default)]
pub struct BaselineOptions<'a> {
    /// Only these models may be chosen (the models every host lists `usable='yes'`); None: any.
    /// libvirt's `hypervisor-cpu-baseline` restricts likewise to the hypervisor's models.
    pub usable: Option<&'a BTreeSet<String>>,
    /// Drop features libvirt marks `migratable='no'` (`invtsc`...) from the result, as
    /// `virsh cpu-baseline --migratable` does.
    pub migratable: bool,
    /// Decode hosts of different vendors vendor-neutrally instead of refusing them (module docs).
    pub vendor_neutral: bool,
}

/// A decoded guest CPU: libvirt's `<cpu mode='custom'>` with a model, `require` and `disable`
/// features.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// `<model>`.
    pub model: String,
    /// `<vendor>` as decoded (the hosts' vendor), None when the data names none.
    pub vendor: Option<String>,
    /// Features the model lacks and the data has, in map order.
    pub require: Vec<String>,
    /// Features the model has and the data lacks (map order), then the model's `removed='yes'`
    /// features not already listed (libvirt's `virCPUx86DisableRemovedFeatures`).
    pub disable: Vec<String>,
}

/// A cluster's baseline CPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Baseline {
    /// The decoded CPU; its `vendor` is what libvirt writes: None when a host names no vendor
    /// or the result is vendor-neutral.
    pub cpu: Decoded,
    /// `<model fallback='forbid'>`: libvirt writes it when every host has this very model.
    pub fallback_forbid: bool,
    /// The hosts' common data (what the decoded CPU describes, before `migratable` pruning and
    /// before [`QEMU_DROPPED_FEATURES`] and [`leave_out_kvm_never`]'s features are dropped).
    pub data: CpuData,
    /// libvirt's refusal that the vendor-neutral result stands in for ("CPU vendors do not
    /// match", "CPU vendor X of model Y differs from vendor Z"); None when libvirt agrees.
    pub vendor_mix: Option<String>,
}

impl Baseline {
    /// The guest's features: the model's, plus `require`, minus `disable` (libvirt names, map
    /// order). This equals the set `virsh cpu-baseline --features` lists as `require`.
    #[must_use]
    pub fn effective_features<'m>(&self, map: &'m X86Map) -> Vec<&'m str> {
        let mut data = map
            .model(&self.cpu.model)
            .map_or_else(|| map.empty_data(), |m| m.data.clone());
        for (names, add) in [(&self.cpu.require, true), (&self.cpu.disable, false)] {
            for f in names.iter().filter_map(|n| map.feature(n)) {
                if add {
                    data.add(&f.data);
                } else {
                    data.subtract(&f.data);
                }
            }
        }
        map.decode_features(&data)
    }
}

/// The baseline of `cpus` (libvirt's `virCPUx86Baseline`, then `x86Decode`), without
/// [`QEMU_DROPPED_FEATURES`] as libvirt's QEMU driver prints it.
///
/// # Errors
/// [`CpuError::Incompatible`] with libvirt's message: "CPUs are incompatible" (nothing in
/// common), "Cannot find suitable CPU model for given data" (no model allowed), and, unless
/// `vendor_neutral`, the vendor refusals. `NoHosts` for an empty list.
pub fn baseline(
    map: &X86Map,
    cpus: &[InputCpu<'_>],
    opts: &BaselineOptions<'_>,
) -> Result<Baseline, CpuError> {
    let Some((first, rest)) = cpus.split_first() else {
        return Err(CpuError::NoHosts);
    };
    let mut output_vendor = first.vendor.is_some();
    let mut vendor = first.vendor;
    let mut names: Vec<&str> = first.model.into_iter().collect();
    let mut data = first.data.clone();
    let mut vendor_mix: Option<String> = None;
    for cpu in rest {
        if let Some(m) = cpu.model.filter(|m| !names.contains(m)) {
            names.push(m);
        }
        let model_vendor = cpu
            .model
            .and_then(|m| map.model(m))
            .and_then(|m| m.vendor.as_deref());
        if let (Some(v), Some(mv), Some(m)) = (cpu.vendor, model_vendor, cpu.model) {
            if v != mv && vendor_mix.is_none() {
                vendor_mix = Some(format!(
                    "CPU vendor {mv} of model {m} differs from vendor {v}"
                ));
            }
        }
        let vn = if cpu.vendor.is_some() {
            cpu.vendor
        } else {
            output_vendor = false;
            model_vendor
        };
        match (vendor, vn) {
            (None, Some(_)) => vendor = vn,
            (Some(v), Some(n)) if v != n && vendor_mix.is_none() => {
                vendor_mix = Some("CPU vendors do not match".into());
            }
            _ => {}
        }
        data.intersect(&cpu.data);
    }
    if data.is_empty() {
        return Err(CpuError::Incompatible("CPUs are incompatible".into()));
    }
    let Some(mix) = vendor_mix else {
        let cpu = drop_qemu_unknown(decode(map, &data, vendor, &names, opts)?);
        let fallback_forbid = names.len() == 1 && cpu.model == names[0];
        let cpu = Decoded {
            vendor: cpu.vendor.filter(|_| output_vendor),
            ..cpu
        };
        return Ok(Baseline {
            cpu,
            fallback_forbid,
            data,
            vendor_mix: None,
        });
    };
    if !opts.vendor_neutral {
        return Err(CpuError::Incompatible(mix));
    }
    let cpu = drop_qemu_unknown(decode(map, &data, None, &[], opts)?);
    Ok(Baseline {
        cpu,
        fallback_forbid: false,
        data,
        vendor_mix: Some(mix),
    })
}

/// Decodes `data` into a guest CPU (libvirt's `x86Decode` for a guest CPU definition, with the
/// vendor `vendor` and the preferred models `preferred`).
///
/// # Errors
/// [`CpuError::Incompatible`] ("Cannot find suitable CPU model for given data") when no model
/// is a candidate.
pub fn decode(
    map: &X86Map,
    data: &CpuData,
    vendor: Option<&str>,
    preferred: &[&str],
    opts: &BaselineOptions<'_>,
) -> Result<Decoded, CpuError> {
    decode_as(map, data, vendor, None, preferred, opts)
}

/// [`decode`] of a CPU whose `signature` (family, model, stepping) is known: libvirt's
/// `x86Decode` of the host's CPUID into a guest CPU (`virCPUGetHost(VIR_CPU_TYPE_GUEST)`, the
/// "full" host CPU of `virQEMUCapsInitHostCPUModel`), where `x86DecodeUseCandidate` keeps a model
/// whose `<signature>` is the CPU's over one whose is not, before it scores their lists.
///
/// # Errors
/// As [`decode`].
pub fn decode_signed(
    map: &X86Map,
    data: &CpuData,
    vendor: Option<&str>,
    signature: Option<(u32, u32, u32)>,
) -> Result<Decoded, CpuError> {
    decode_as(
        map,
        data,
        vendor,
        signature,
        &[],
        &BaselineOptions::default(),
    )
}

fn decode_as(
    map: &X86Map,
    data: &CpuData,
    vendor: Option<&str>,
    signature: Option<(u32, u32, u32)>,
    preferred: &[&str],
    opts: &BaselineOptions<'_>,
) -> Result<Decoded, CpuError> {
    let signed = |m: &X86Model| {
        signature.is_some_and(|(f, mo, st)| m.signatures.iter().any(|x| x.matches(f, mo, st)))
    };
    let mut best: Option<(&X86Model, FeatureList)> = None;
    for model in map.decode_candidates(vendor, DecodeFor::Guest) {
        if opts.usable.is_some_and(|u| !u.contains(&model.name)) {
            continue;
        }
        let list = map.candidate_features(data, model, DecodeFor::Guest);
        let is_preferred = preferred.contains(&model.name.as_str());
        if is_preferred && preferred.len() == 1 {
            best = Some((model, list));
            break;
        }
        let better = match &best {
            None => true,
            Some((current_model, current)) => match (signed(current_model), signed(model)) {
                (true, false) => false,
                (false, true) => true,
                _ => is_better(current, &list, is_preferred),
            },
        };
        if better {
            best = Some((model, list));
        }
    }
    let Some((model, list)) = best else {
        return Err(CpuError::Incompatible(
            "Cannot find suitable CPU model for given data".into(),
        ));
    };
    let kept = list
        .into_iter()
        .filter(|(name, _)| !opts.migratable || map.feature(name).is_none_or(|f| f.migratable));
    let (disable, require): (Vec<_>, Vec<_>) = kept.partition(|(_, disabled)| *disabled);
    Ok(Decoded {
        model: model.name.clone(),
        vendor: vendor.map(str::to_owned),
        require: require.into_iter().map(|(n, _)| n).collect(),
        disable: disable.into_iter().map(|(n, _)| n).collect(),
    })
}

/// libvirt's score of a guest candidate (`virCPUx86CompareCandidateFeatureList`): (total,
/// disabled), where each disabled feature costs 2, 3, 4... instead of 1.
///
/// libvirt counts disabled features in a loop whose bound is the enabled count, which it lowers
/// as it meets disabled features; since disabled features come last, the last few are never
/// counted. That is kept, or the model choice would differ from libvirt's.
#[must_use]
pub fn score(list: &[(String, bool)]) -> (usize, usize) {
    let mut enabled = list.len();
    let mut disabled = 0;
    let mut penalty = 2;
    let mut i = 0;
    while i < enabled {
        if list[i].1 {
            enabled -= 1;
            disabled += penalty;
            penalty += 1;
        }
        i += 1;
    }
    (enabled + disabled, disabled)
}

/// Whether `candidate` beats `current` (the rest of `x86DecodeUseCandidate`).
fn is_better(current: &[(String, bool)], candidate: &[(String, bool)], preferred: bool) -> bool {
    let (cur_total, cur_disabled) = score(current);
    let (total, disabled) = score(candidate);
    total < cur_total
        || (total == cur_total && disabled < cur_disabled)
        || (preferred && disabled < cur_disabled)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(spec: &str) -> FeatureList {
        spec.chars()
            .enumerate()
            .map(|(i, c)| (format!("f{i}"), c == 'd'))
            .collect()
    }

    #[test]
    fn score_keeps_libvirts_shrinking_bound() {
        assert_eq!(score(&list("")), (0, 0));
        assert_eq!(score(&list("rrr")), (3, 0));
        // 6 required + 4 disabled: the loop stops after the second disabled feature.
        assert_eq!(score(&list("rrrrrrdddd")), (8 + 5, 5));
        assert_eq!(score(&list("d")), (2, 2));
        assert_eq!(score(&list("dd")), (1 + 2, 2));
        assert_eq!(score(&list("rd")), (1 + 2, 2));
    }

    #[test]
    fn better_candidates() {
        // Fewer features wins; on a tie, fewer disabled; a preferred model wins on fewer disabled.
        assert!(is_better(&list("rrrr"), &list("rrr"), false));
        assert!(!is_better(&list("rrr"), &list("rrr"), false));
        assert!(is_better(&list("rrrd"), &list("rrrrr"), false));
        assert!(is_better(&list("rd"), &list("rrrrrrrr"), true));
        assert!(!is_better(&list("rd"), &list("rrrrrrrr"), false));
    }

    fn map() -> X86Map {
        X86Map::load(&crate::testdata::cpu_map()).unwrap()
    }

    fn cpu(map: &X86Map, model: &str, extra: &[&str]) -> CpuData {
        let def = CpuDef {
            model: Some(model.into()),
            features: extra
                .iter()
                .map(|f| ((*f).to_string(), FeaturePolicy::Require))
                .collect(),
            ..CpuDef::default()
        };
        cpu_data(map, &def, Select::All, Path::new("test")).unwrap()
    }

    #[test]
    fn model_itself_decodes_to_itself() {
        let map = map();
        for name in [
            "Nehalem",
            "SandyBridge",
            "Haswell-noTSX",
            "EPYC-Rome",
            "Skylake-Server",
        ] {
            let data = cpu(&map, name, &[]);
            let vendor = map.model(name).unwrap().vendor.as_deref();
            let d = decode(&map, &data, vendor, &[name], &BaselineOptions::default()).unwrap();
            assert_eq!(d.model, name);
            assert!(d.require.is_empty(), "{name}: {:?}", d.require);
            // Without a preference the model may differ, the features may not.
            let free = decode(&map, &data, vendor, &[], &BaselineOptions::default()).unwrap();
            let b = Baseline {
                cpu: free,
                fallback_forbid: false,
                data: data.clone(),
                vendor_mix: None,
            };
            assert_eq!(
                b.effective_features(&map),
                map.decode_features(&data),
                "{name}"
            );
        }
    }

    #[test]
    fn vendors_and_usable_models() {
        let map = map();
        let intel = InputCpu {
            model: Some("IvyBridge"),
            vendor: Some("Intel"),
            data: cpu(&map, "IvyBridge", &["vmx"]),
        };
        let amd = InputCpu {
            model: Some("Opteron_G4"),
            vendor: Some("AMD"),
            data: cpu(&map, "Opteron_G4", &["svm"]),
        };
        let strict = BaselineOptions::default();
        let e = baseline(&map, &[intel.clone(), amd.clone()], &strict).unwrap_err();
        assert_eq!(e.to_string(), "CPU vendors do not match");
        let neutral = BaselineOptions {
            vendor_neutral: true,
            ..BaselineOptions::default()
        };
        let b = baseline(&map, &[intel.clone(), amd], &neutral).unwrap();
        assert_eq!(b.cpu.vendor, None);
        assert_eq!(b.vendor_mix.as_deref(), Some("CPU vendors do not match"));
        let eff: BTreeSet<&str> = b.effective_features(&map).into_iter().collect();
        assert!(eff.contains("sse4.2") && !eff.contains("vmx") && !eff.contains("svm"));

        let one = baseline(&map, std::slice::from_ref(&intel), &strict).unwrap();
        assert_eq!(one.cpu.model, "IvyBridge");
        assert!(one.fallback_forbid);
        assert_eq!(one.cpu.require, ["vmx"]);
        assert_eq!(one.cpu.vendor.as_deref(), Some("Intel"));

        let usable: BTreeSet<String> = ["Nehalem".to_string()].into();
        let only = BaselineOptions {
            usable: Some(&usable),
            ..BaselineOptions::default()
        };
        let r = baseline(&map, std::slice::from_ref(&intel), &only).unwrap();
        assert_eq!(r.cpu.model, "Nehalem");
        assert!(!r.fallback_forbid);
        assert!(r.cpu.require.contains(&"avx".to_string()));
        let none: BTreeSet<String> = BTreeSet::new();
        let e = baseline(
            &map,
            &[intel],
            &BaselineOptions {
                usable: Some(&none),
                ..BaselineOptions::default()
            },
        )
        .unwrap_err();
        assert!(e.is_incompatible() && e.to_string().contains("Cannot find suitable"));
    }

    #[test]
    fn migratable_drops_invtsc_and_unknown_names_fail() {
        let map = map();
        let a = InputCpu {
            model: Some("Nehalem"),
            vendor: Some("Intel"),
            data: cpu(&map, "Nehalem", &["invtsc"]),
        };
        let plain = baseline(&map, std::slice::from_ref(&a), &BaselineOptions::default()).unwrap();
        assert_eq!(plain.cpu.require, ["invtsc"]);
        let m = BaselineOptions {
            migratable: true,
            ..BaselineOptions::default()
        };
        assert!(baseline(&map, &[a], &m).unwrap().cpu.require.is_empty());

        let bad = CpuDef {
            model: Some("Nehalem-v9".into()),
            ..CpuDef::default()
        };
        let e = cpu_data(&map, &bad, Select::All, Path::new("h.xml")).unwrap_err();
        assert!(
            e.to_string()
                .contains("h.xml: unknown CPU model 'Nehalem-v9'"),
            "{e}"
        );
        let bad = CpuDef {
            features: vec![("cet-ss".into(), FeaturePolicy::Require)],
            ..CpuDef::default()
        };
        let e = cpu_data(&map, &bad, Select::All, Path::new("h.xml")).unwrap_err();
        assert!(
            e.to_string().contains("unknown CPU feature 'cet-ss'"),
            "{e}"
        );
        // A disabled feature is taken out, in document order.
        let def = CpuDef {
            model: Some("Nehalem".into()),
            features: vec![
                ("popcnt".into(), FeaturePolicy::Disable),
                ("aes".into(), FeaturePolicy::Require),
                ("x2apic".into(), FeaturePolicy::Optional),
            ],
            ..CpuDef::default()
        };
        let d = cpu_data(&map, &def, Select::All, Path::new("x")).unwrap();
        assert!(!map.has_feature(&d, "popcnt") && map.has_feature(&d, "aes"));
        assert!(!map.has_feature(&d, "x2apic"));
        let only = cpu_data(
            &map,
            &def,
            Select::Policy(FeaturePolicy::Disable),
            Path::new("x"),
        );
        assert_eq!(map.feature_names(&only.unwrap()), ["popcnt"]);
    }
}
