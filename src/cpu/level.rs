//! The x86-64 psABI microarchitecture levels (`x86-64-v1` … `x86-64-v4`), each level's features
//! spelled the way libvirt spells them (source: the x86-64 psABI, cross-checked with QEMU's
//! `docs/system/cpu-models-x86-abi.csv`), and the level a set of features reaches.

use std::fmt;
use std::str::FromStr;

/// x86-64 psABI microarchitecture level.
///
/// The levels are cumulative: every feature of `V1` is also a feature of `V2`,
/// and so on. The ordering of the enum follows that inclusion
/// (`V1 < V2 < V3 < V4`). Feature lists (see [`Level::features`]) come from the
/// x86-64 psABI "microarchitecture levels" table, written in libvirt's
/// `cpu_map` spellings (cross-checked with QEMU's
/// `docs/system/cpu-models-x86-abi.csv`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// `x86-64-v1`: the x86-64 baseline (`cmov cx8 fpu fxsr mmx syscall sse sse2 lm`).
    V1,
    /// `x86-64-v2`: v1 plus `cx16 lahf_lm popcnt pni sse4.1 sse4.2 ssse3`
    /// (`pni` is SSE3).
    V2,
    /// `x86-64-v3`: v2 plus `avx avx2 bmi1 bmi2 f16c fma abm movbe xsave`
    /// (`abm` carries LZCNT).
    V3,
    /// `x86-64-v4`: v3 plus `avx512f avx512bw avx512cd avx512dq avx512vl`.
    V4,
}

/// Features a level adds to the previous one, libvirt spellings, in the order
/// of the psABI table. Index 0 is v1, index 3 is v4.
const LEVEL_ADDS: [&[&str]; 4] = [
    &[
        "cmov", "cx8", "fpu", "fxsr", "mmx", "syscall", "sse", "sse2", "lm",
    ],
    &[
        "cx16", "lahf_lm", "popcnt", "pni", "sse4.1", "sse4.2", "ssse3",
    ],
    &[
        "avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave",
    ],
    &["avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"],
];

impl Level {
    /// All four levels, lowest first.
    pub const ALL: [Level; 4] = [Level::V1, Level::V2, Level::V3, Level::V4];

    /// Position of the level in [`LEVEL_ADDS`] / [`Level::ALL`].
    const fn index(self) -> usize {
        match self {
            Level::V1 => 0,
            Level::V2 => 1,
            Level::V3 => 2,
            Level::V4 => 3,
        }
    }

    /// All features of this level, cumulative (v2 includes v1), in libvirt
    /// `cpu_map` spellings.
    ///
    /// The order is that of the psABI table: v1's features first
    /// (`cmov cx8 fpu fxsr mmx syscall sse sse2 lm`), then v2's additions
    /// (`cx16 lahf_lm popcnt pni sse4.1 sse4.2 ssse3`), then v3's
    /// (`avx avx2 bmi1 bmi2 f16c fma abm movbe xsave`), then v4's
    /// (`avx512f avx512bw avx512cd avx512dq avx512vl`). Source: the x86-64
    /// psABI, with libvirt's names for the features (`pni` = SSE3,
    /// `abm` = LZCNT).
    #[must_use]
    pub fn features(self) -> Vec<&'static str> {
        LEVEL_ADDS[..=self.index()]
            .iter()
            .flat_map(|adds| adds.iter().copied())
            .collect()
    }

    /// The psABI name of the level: `"x86-64-v1"`, `"x86-64-v2"`,
    /// `"x86-64-v3"` or `"x86-64-v4"` (the spelling used by the psABI, GCC's
    /// `-march=` and QEMU's `docs/system/cpu-models-x86-abi.csv`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Level::V1 => "x86-64-v1",
            Level::V2 => "x86-64-v2",
            Level::V3 => "x86-64-v3",
            Level::V4 => "x86-64-v4",
        }
    }

    /// The highest level all of whose features satisfy `has`, or `None` if
    /// even one `x86-64-v1` feature is missing.
    ///
    /// `has` is asked about libvirt spellings (see [`Level::features`]); wrap
    /// it with [`crate::cpu::normalize_feature`] if the feature set uses other spellings.
    /// Levels are cumulative, so a set that lacks a v2 feature is v1 even if it
    /// has every v3 feature.
    pub fn highest(has: impl Fn(&str) -> bool) -> Option<Level> {
        let mut reached = None;
        for level in Level::ALL {
            if LEVEL_ADDS[level.index()].iter().all(|f| has(f)) {
                reached = Some(level);
            } else {
                break;
            }
        }
        reached
    }
}

impl FromStr for Level {
    type Err = String;

    /// Parses `"x86-64-v1"` … `"x86-64-v4"` (exact spelling). The error is a
    /// sentence naming the rejected value and listing the valid ones.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Level::ALL
            .into_iter()
            .find(|level| level.as_str() == s)
            .ok_or_else(|| {
                let valid: Vec<&str> = Level::ALL.iter().map(|l| l.as_str()).collect();
                format!(
                    "unknown x86-64 psABI level '{s}': expected one of {}",
                    valid.join(", ")
                )
            })
    }
}

impl fmt::Display for Level {
    /// Writes [`Level::as_str`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::libvirt::cpu_map::CpuMap;
    use std::collections::BTreeSet;

    fn level_of(map: &CpuMap, model: &str) -> Option<Level> {
        let features = map
            .model_features(model)
            .unwrap_or_else(|| panic!("model {model} missing from {}", map.source()));
        Level::highest(|f| features.contains(f))
    }

    #[test]
    fn level_features_are_cumulative_and_ordered() {
        assert_eq!(
            Level::V1.features(),
            [
                "cmov", "cx8", "fpu", "fxsr", "mmx", "syscall", "sse", "sse2", "lm"
            ]
        );
        assert_eq!(Level::V2.features().len(), 16);
        assert_eq!(Level::V3.features().len(), 25);
        assert_eq!(Level::V4.features().len(), 30);
        assert_eq!(Level::V4.features().last(), Some(&"avx512vl"));
        for pair in Level::ALL.windows(2) {
            assert!(pair[0] < pair[1]);
            assert!(pair[1].features().starts_with(&pair[0].features()));
        }
        // Every level feature is a libvirt feature name.
        for f in Level::V4.features() {
            assert_eq!(crate::cpu::normalize_feature(f).as_deref(), Some(f));
            assert!(crate::cpu::is_known_x86_feature(f), "{f}");
        }
    }

    #[test]
    fn level_strings() {
        for level in Level::ALL {
            assert_eq!(level.as_str().parse::<Level>(), Ok(level));
            assert_eq!(level.to_string(), level.as_str());
        }
        assert_eq!("x86-64-v3".parse::<Level>(), Ok(Level::V3));
        let err = "x86-64-v5".parse::<Level>().unwrap_err();
        assert!(err.contains("x86-64-v5"), "{err}");
        assert!(
            err.contains("x86-64-v1, x86-64-v2, x86-64-v3, x86-64-v4"),
            "{err}"
        );
        assert!("".parse::<Level>().is_err());
    }

    #[test]
    fn highest_level() {
        assert_eq!(Level::highest(|_| false), None);
        assert_eq!(Level::highest(|_| true), Some(Level::V4));
        let v3: BTreeSet<&str> = Level::V3.features().into_iter().collect();
        assert_eq!(Level::highest(|f| v3.contains(f)), Some(Level::V3));
        // A v2 feature missing caps the level at v1 even with all v3/v4 features.
        assert_eq!(Level::highest(|f| f != "popcnt"), Some(Level::V1));
        assert_eq!(Level::highest(|f| f != "lm"), None);
    }

    #[test]
    fn highest_level_of_libvirt_models() {
        let map = CpuMap::builtin();
        assert_eq!(level_of(&map, "qemu64"), Some(Level::V1));
        assert_eq!(level_of(&map, "kvm64"), Some(Level::V1));
        assert_eq!(level_of(&map, "qemu32"), None); // no lm
        assert_eq!(level_of(&map, "Nehalem"), Some(Level::V2));
        // libvirt's Haswell and Broadwell lack f16c and abm, so they stay v2.
        for model in ["Haswell", "Haswell-noTSX", "Broadwell", "Broadwell-noTSX"] {
            let features = map.model_features(model).expect(model);
            assert!(!features.contains("f16c"), "{model}");
            assert!(!features.contains("abm"), "{model}");
            assert!(features.contains("avx2"), "{model}");
            assert_eq!(level_of(&map, model), Some(Level::V2), "{model}");
        }
        assert_eq!(level_of(&map, "Skylake-Client"), Some(Level::V3));
        assert_eq!(level_of(&map, "Skylake-Server"), Some(Level::V4));
        assert_eq!(level_of(&map, "Icelake-Server"), Some(Level::V4));
        assert_eq!(level_of(&map, "EPYC"), Some(Level::V3));
    }
}
