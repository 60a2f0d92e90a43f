//! libvirt's `x86Decode` (`src/cpu/cpu_x86.c`): CPUID data turned into a model and features.
//!
//! libvirt decodes two kinds of CPU with one walk: a guest CPU (a baseline, `virsh
//! cpu-baseline`: [`crate::cpu::baseline::decode`]) and the host's own CPU (`virsh
//! capabilities`' `<host><cpu>`, `virCPUx86GetHost`: [`X86Map::decode_host`]). Both walk the
//! models newest first, skip the models of another vendor and those the map marks `<decode
//! host='off'/>` or `guest='off'` ([`X86Map::decode_candidates`]), and list each candidate as
//! "the model, plus the features the data has beyond it, minus the features it lacks"
//! ([`X86Map::candidate_features`]). They differ in which candidate wins: a guest may disable
//! features and is scored (`virCPUx86CompareCandidateFeatureList`); a host CPU never has a
//! feature disabled (a candidate that would need one is rejected), prefers the models whose
//! `<signature>` is the CPU's, then the shortest list.

use super::{CpuData, X86Map, X86Model};
use crate::libvirt::cpu_def::{CpuDef, FeaturePolicy};
use crate::libvirt::cpudata::X86CpuData;
use std::path::PathBuf;

/// A candidate's feature list: (name, disabled), in libvirt's order (`x86DataToCPU`): the
/// features the data has beyond the model (map order), then those the model has and the data
/// lacks (map order), then, for a guest, the model's `removed='yes'` features not yet listed.
pub type FeatureList = Vec<(String, bool)>;

/// Which kind of CPU a decoding names (libvirt's `virCPUType` of the CPU decoded into).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeFor {
    /// The host's own CPU (`VIR_CPU_TYPE_HOST`): models with `<decode host='off'/>` are
    /// skipped; removed features are not listed.
    Host,
    /// A guest CPU (`VIR_CPU_TYPE_GUEST`): models with `<decode guest='off'/>` are skipped;
    /// the model's `removed='yes'` features are listed disabled
    /// (`virCPUx86DisableRemovedFeatures`).
    Guest,
}

/// Why CPU data could not be decoded into a host CPU.
#[derive(Debug, thiserror::Error)]
pub enum HostDecodeError {
    /// No model of the map is a candidate: none of the CPU's vendor (or vendor-neutral), none
    /// with `<decode host='on'>`, or every one lacking a feature the data lacks (libvirt's
    /// words).
    #[error("Cannot find suitable CPU model for given data (cpu_map {})", .map.display())]
    NoModel {
        /// The cpu_map directory decoded with.
        map: PathBuf,
    },
}

impl X86Map {
    /// The vendor whose string CPUID leaf 0 gives in `raw` (ebx, edx, ecx: `GenuineIntel`,
    /// `AuthenticAMD`...): the first vendor of the map, in load order, whose string's bits are
    /// all set there (libvirt's `x86DataToVendor`). None when no vendor's string is there.
    #[must_use]
    pub fn vendor_of(&self, raw: &X86CpuData) -> Option<&str> {
        let [_, ebx, ecx, edx] = raw.cpuid(0, 0)?;
        self.vendors
            .iter()
            .find(|(_, [b, d, c])| ebx & b == *b && edx & d == *d && ecx & c == *c)
            .map(|(name, _)| name.as_str())
    }

    /// The map's data for the raw CPUID and MSR registers `raw`: every bit a feature of the map
    /// uses that `raw` sets (a leaf given twice counts with the bits of both, as libvirt's
    /// `virCPUx86DataAdd` ORs them); bits no feature uses are left out, since no decoding looks
    /// at them.
    #[must_use]
    pub fn data_of(&self, raw: &X86CpuData) -> CpuData {
        let mut data = self.empty_data();
        let mut put = |kind: u8, leaf: u32, sub: u32, regs: [(u8, u32); 4]| {
            for (reg, value) in regs {
                for bit in (0..32u8).filter(|b| value & (1 << b) != 0) {
                    if let Some(i) = self.bit_index.get(&(kind, leaf, sub, reg, bit)) {
                        data.set(*i);
                    }
                }
            }
        };
        for c in &raw.cpuid {
            put(
                0,
                c.eax_in,
                c.ecx_in,
                [(0, c.eax), (1, c.ebx), (2, c.ecx), (3, c.edx)],
            );
        }
        for m in &raw.msrs {
            put(1, m.index, 0, [(0, m.eax), (3, m.edx), (1, 0), (2, 0)]);
        }
        data
    }

    /// The (leaf, sub-leaf) pairs of CPUID the map's features use, sorted: what must be asked
    /// of a CPU to decode it.
    #[must_use]
    pub fn cpuid_leaves(&self) -> Vec<(u32, u32)> {
        let mut leaves: Vec<(u32, u32)> = self
            .bit_index
            .keys()
            .filter(|k| k.0 == 0)
            .map(|k| (k.1, k.2))
            .collect();
        leaves.sort_unstable();
        leaves.dedup();
        leaves
    }

    /// The models a CPU of `vendor` may be named after, newest first (the map's load order
    /// reversed, as libvirt walks it): those of another vendor are skipped (a vendor-neutral
    /// model, such as `qemu64`, stays; with no vendor every model stays), and so are those the
    /// map marks `<decode host='off'/>` (for [`DecodeFor::Host`]) or `guest='off'` (for
    /// [`DecodeFor::Guest`]).
    pub fn decode_candidates<'m>(
        &'m self,
        vendor: Option<&'m str>,
        kind: DecodeFor,
    ) -> impl Iterator<Item = &'m X86Model> + 'm {
        self.models().iter().rev().filter(move |m| {
            let decodes = match kind {
                DecodeFor::Host => m.decode_host,
                DecodeFor::Guest => m.decode_guest,
            };
            let same_vendor = match (vendor, &m.vendor) {
                (Some(v), Some(mv)) => v == mv,
                _ => true,
            };
            decodes && same_vendor
        })
    }

    /// `model`'s feature list for `data` (libvirt's `x86DataToCPU`; see [`FeatureList`]).
    #[must_use]
    pub fn candidate_features(
        &self,
        data: &CpuData,
        model: &X86Model,
        kind: DecodeFor,
    ) -> FeatureList {
        let mut list: FeatureList = self
            .decode_features(&data.minus(&model.data))
            .into_iter()
            .map(|n| (n.to_owned(), false))
            .collect();
        list.extend(
            self.decode_features(&model.data.minus(data))
                .into_iter()
                .map(|n| (n.to_owned(), true)),
        );
        if kind == DecodeFor::Guest {
            for removed in &model.removed {
                if !list.iter().any(|(n, _)| n == removed) {
                    list.push((removed.clone(), true));
                }
            }
        }
        list
    }

    /// The host CPU libvirt names for the raw CPUID/MSR data `raw`: what `virsh capabilities`
    /// prints as `<host><cpu>` (libvirt's `virCPUx86GetHost` → `x86DecodeCPUData` → `x86Decode`
    /// for a `VIR_CPU_TYPE_HOST` CPU, with no hypervisor model list), as the capabilities
    /// reader gives it: `arch` `x86_64`, the model, the vendor (None when CPUID leaf 0 gives no
    /// vendor string of the map), and the features beyond the model, in `x86_features.xml`
    /// order, each `require` (a host CPU's features have no policy). The CPU's signature is not
    /// part of [`CpuDef`]: see [`X86CpuData::signature`].
    ///
    /// The steps are libvirt's: the vendor from CPUID leaf 0 ([`X86Map::vendor_of`]); the
    /// signature (family, model, stepping) from leaf 1; on an Intel family 6 CPU of model 60,
    /// 69, 70, or 63 before stepping 4, `hle` and `rtm` dropped (their TSX is broken:
    /// `x86DataFilterTSX`); then each candidate newest first ([`X86Map::decode_candidates`]),
    /// rejected when its list would disable a feature, and kept over the best so far
    /// (`x86DecodeUseCandidate`) when: the best so far has the CPU's signature and it has not →
    /// never; else when its list is shorter, or it has the CPU's signature and the best so far
    /// has not.
    ///
    /// # Errors
    /// [`HostDecodeError::NoModel`] when no model is a candidate.
    pub fn decode_host(&self, raw: &X86CpuData) -> Result<CpuDef, HostDecodeError> {
        let vendor = self.vendor_of(raw);
        let signature = raw.signature().filter(|s| s.0 != 0 || s.1 != 0);
        let mut data = self.data_of(raw);
        if let (Some("Intel"), Some((6, model, stepping))) = (vendor, signature) {
            if matches!(model, 60 | 69 | 70) || (model == 63 && stepping < 4) {
                for name in ["hle", "rtm"] {
                    if let Some(f) = self.feature(name) {
                        data.subtract(&f.data);
                    }
                }
            }
        }
        let has_signature = |m: &X86Model| {
            signature.is_some_and(|(f, mo, s)| m.signatures.iter().any(|x| x.matches(f, mo, s)))
        };
        let mut best: Option<(&X86Model, FeatureList)> = None;
        for model in self.decode_candidates(vendor, DecodeFor::Host) {
            let list = self.candidate_features(&data, model, DecodeFor::Host);
            if list.iter().any(|(_, disabled)| *disabled) {
                continue;
            }
            let better = match &best {
                None => true,
                Some((current, current_list)) => {
                    let (cur_sig, cand_sig) = (has_signature(current), has_signature(model));
                    if cur_sig && !cand_sig {
                        false
                    } else {
                        list.len() < current_list.len() || (cand_sig && !cur_sig)
                    }
                }
            };
            if better {
                best = Some((model, list));
            }
        }
        let Some((model, list)) = best else {
            return Err(HostDecodeError::NoModel {
                map: self.source().to_owned(),
            });
        };
        Ok(CpuDef {
            arch: Some("x86_64".to_owned()),
            model: Some(model.name.clone()),
            vendor: vendor.map(str::to_owned),
            features: list
                .into_iter()
                .map(|(name, _)| (name, FeaturePolicy::Require))
                .collect(),
            ..CpuDef::default()
        })
    }
}
