//! x86 feature names as libvirt spells them: QEMU, Linux (`/proc/cpuinfo`) and libvirt spell some
//! features differently (`sse3` / `pni`, `sse4_1` / `sse4.1`, `lzcnt` / `abm`);
//! [`normalize_feature`] maps a name to libvirt's `cpu_map` spelling, using the feature names and
//! aliases of libvirt 9.0's `x86_features.xml` (built into the tool as sorted tables).

/// Spellings that libvirt's `x86_features.xml` does not list as aliases but
/// that QEMU or Linux use (first) for a libvirt feature (second). Some repeat
/// libvirt's own aliases so that the table in the design document holds even
/// if the generated list changes.
const EXTRA_ALIASES: &[(&str, &str)] = &[
    // QEMU / Linux spellings also listed by libvirt.
    ("sse3", "pni"),
    ("sse4_1", "sse4.1"),
    ("sse4-1", "sse4.1"),
    ("sse4_2", "sse4.2"),
    ("sse4-2", "sse4.2"),
    ("lahf-lm", "lahf_lm"),
    ("pclmulqdq", "pclmuldq"),
    // LZCNT is CPUID 0x80000001 ECX bit 5, which libvirt (like Linux) calls abm.
    ("lzcnt", "abm"),
    // Linux /proc/cpuinfo spelling.
    ("tsc_deadline_timer", "tsc-deadline"),
];

// KNOWN_FEATURES and FEATURE_ALIASES: sorted tables that build.rs generates from
// src/cpu/x86_features.txt (libvirt 9.0.0's cpu_map/x86_features.xml: one feature a line, the
// libvirt name first, then its aliases).
include!(concat!(env!("OUT_DIR"), "/x86_features.rs"));

/// The canonical libvirt spelling of `name` if it is a known name or alias (libvirt's own
/// aliases first, then [`EXTRA_ALIASES`]): bisection in the generated tables, nothing built at
/// run time.
fn lookup(name: &str) -> Option<&'static str> {
    if let Ok(i) = KNOWN_FEATURES.binary_search(&name) {
        return Some(KNOWN_FEATURES[i]);
    }
    if let Ok(i) = FEATURE_ALIASES.binary_search_by(|(a, _)| a.cmp(&name)) {
        return Some(FEATURE_ALIASES[i].1);
    }
    EXTRA_ALIASES
        .iter()
        .find(|(a, _)| *a == name)
        .map(|(_, n)| *n)
}

/// Whether `name` (libvirt spelling) is an x86 feature libvirt 9.0's cpu_map defines
/// (`x86_features.xml`). A newer libvirt may know more: callers treat an unknown name as a warning.
#[must_use]
pub fn is_known_x86_feature(name: &str) -> bool {
    KNOWN_FEATURES.binary_search(&name).is_ok()
}

/// Every spelling of an x86 feature a policy accepts: libvirt 9.0's names, its aliases and the
/// QEMU and Linux spellings this module adds (for "did you mean" answers, which answer in
/// the operator's own spelling: `pclmulqdq` for `pclmulqdqq`).
pub fn x86_feature_spellings() -> impl Iterator<Item = &'static str> {
    KNOWN_FEATURES
        .iter()
        .copied()
        .chain(FEATURE_ALIASES.iter().map(|(a, _)| *a))
        .chain(EXTRA_ALIASES.iter().map(|(a, _)| *a))
}

/// libvirt's name of a feature the domain spells another way (QEMU's `sse4_2`, Linux's `sse3`,
/// upper case), which libvirt's domain XML refuses ("unknown CPU feature: sse3", seen with
/// libvirt 9.0) though a policy's rules accept it: the name [`normalize_feature`] makes of it,
/// whether or not that is known; None for libvirt 9.0's own names and names it keeps as they
/// are.
#[must_use]
pub fn libvirt_spelling_of(name: &str) -> Option<String> {
    normalize_feature(name).filter(|key| key != name && !is_known_x86_feature(name))
}

/// Normalise a feature name to libvirt's `cpu_map` spelling.
///
/// The name is lower-cased (ASCII). Returns `None` if it is empty or then
/// contains characters other than `[a-z0-9._-]`. Otherwise returns, in order
/// of preference:
///
/// 1. the name itself if it is one of libvirt's x86 feature names (libvirt
///    9.0.0 `cpu_map/x86_features.xml`, e.g. `tsc-deadline`, `lahf_lm`);
/// 2. libvirt's name for a QEMU or Linux alias: the `<alias>` entries of
///    `x86_features.xml` (`sse3` → `pni`, `sse4_1`/`sse4-1` → `sse4.1`,
///    `sse4_2`/`sse4-2` → `sse4.2`, `lahf-lm` → `lahf_lm`, `pclmulqdq` →
///    `pclmuldq`, `i64` → `lm`, …) plus `lzcnt` → `abm` and Linux's
///    `tsc_deadline_timer` → `tsc-deadline`;
/// 3. the first known name among the spelling variants `-` → `_`, `_` → `-`,
///    `-`/`_` → `.`, and `-`/`_` removed (so Linux's `sha_ni` → `sha-ni`,
///    `avx512_vnni` → `avx512vnni`);
/// 4. the lower-cased name unchanged: unknown features are passed through for
///    libvirt to judge.
#[must_use]
pub fn normalize_feature(name: &str) -> Option<String> {
    let lower = name.to_ascii_lowercase();
    if lower.is_empty()
        || !lower.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
        })
    {
        return None;
    }
    if let Some(found) = lookup(&lower) {
        return Some(found.to_owned());
    }
    let variants = [
        lower.replace('-', "_"),
        lower.replace('_', "-"),
        lower.replace(['-', '_'], "."),
        lower.replace(['-', '_'], ""),
    ];
    for variant in &variants {
        if let Some(found) = lookup(variant) {
            return Some(found.to_owned());
        }
    }
    Some(lower)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_feature_cases() {
        let cases = [
            ("SSE3", Some("pni")),
            ("sse3", Some("pni")),
            ("pni", Some("pni")),
            ("sse4_1", Some("sse4.1")),
            ("sse4-1", Some("sse4.1")),
            ("sse4.1", Some("sse4.1")),
            ("sse4-2", Some("sse4.2")),
            ("sse4_2", Some("sse4.2")),
            ("lahf-lm", Some("lahf_lm")),
            ("LAHF_LM", Some("lahf_lm")),
            ("lzcnt", Some("abm")),
            ("pclmulqdq", Some("pclmuldq")),
            ("tsc-deadline", Some("tsc-deadline")),
            ("tsc_deadline_timer", Some("tsc-deadline")),
            ("sse4a", Some("sse4a")),
            ("sha_ni", Some("sha-ni")),
            ("avx512_vnni", Some("avx512vnni")),
            ("avx512_vpopcntdq", Some("avx512-vpopcntdq")),
            ("md_clear", Some("md-clear")),
            ("nrip_save", Some("nrip-save")),
            ("cr8_legacy", Some("cr8legacy")),
            ("Avx2", Some("avx2")),
            ("constant_tsc", Some("constant_tsc")),
            ("bad name!", None),
            ("", None),
            ("avx\u{e9}", None),
            ("a/b", None),
        ];
        for (input, expected) in cases {
            assert_eq!(normalize_feature(input).as_deref(), expected, "{input:?}");
        }
    }
}
