//! What schedulers place guests by, for each host of a cluster: the x86-64 psABI levels the host
//! reaches and the cluster's CPU, as OpenStack placement traits and CloudStack host tags.
//!
//! Schedulers decide by traits and tags, not by CPU models: Nova's placement matches a flavor's
//! `trait:NAME=required` against each compute node's resource provider, CloudStack matches a
//! compute offering's host tags against each host's. `os-traits` has no x86-64-v2/v3 trait, so
//! an operator declares custom ones; this module names them and says which host carries which:
//!
//! * a **level trait** for every level from x86-64-v2 up that the host reaches
//!   ([`crate::cluster::analysis::HostReport::level`]: its host-model CPU when its facts have
//!   domcapabilities), `CUSTOM_X86_64_V2` … `CUSTOM_X86_64_V4` (tags `x86-64-v2` …). v1 has
//!   none: every x86_64 host reaches it.
//! * a **cluster trait** on every host, naming the cluster's CPU: the baseline that
//!   `cpu.model = "baseline"` gives guests (`baseline --migratable`, vendor-neutral across a
//!   vendor mix), as `CUSTOM_VCP_CLUSTER_<MODEL>_<FP>` (tag `vcp-cluster-<model>-<fp>`).
//!   `<MODEL>` is the model name with every character other than an ASCII letter or digit
//!   written `_`, upper case; `<FP>` is the first 8 hex digits of the SHA-256 of
//!   [`NamedCpu::canonical`] (`ARCH\nMODEL\nVENDOR\nFEATURES\n`: the vendor empty when none,
//!   the CPU's effective features, model's plus required minus disabled, sorted and joined with
//!   single spaces). Two clusters whose CPUs differ in one feature get different traits, the
//!   same CPU always the same one, and an operator can reproduce it with `sha256sum`.
//!
//! Placement's custom traits are `CUSTOM_` plus `[A-Z0-9_]`, at most 255 characters (os-traits'
//! `is_custom`, Nova's provider config schema `^[A-Z0-9_]{1,255}$`); every name made here is.
//!
//! Nothing here reads files: the traits are a function of a [`ClusterReport`].

use crate::cluster::analysis::ClusterReport;
use crate::cluster::cluster_cpu::NamedCpu;
use crate::cpu::Level;
use std::fmt::Write as _;

/// Placement's longest trait name (os-traits; Nova's provider config schema).
pub const MAX_TRAIT_LEN: usize = 255;

/// Nova's longest provider name in a provider config (schema 1.0,
/// `providerIdentification.name`: `maxLength: 200`).
pub const MAX_PROVIDER_NAME_LEN: usize = 200;

/// The prefix of the cluster trait (`CUSTOM_VCP_CLUSTER_`) and tag (`vcp-cluster-`).
const CLUSTER_PREFIX: &str = "VCP_CLUSTER";

/// The placement trait of the cluster's CPU: `CUSTOM_VCP_CLUSTER_<MODEL>_<FP>` (upper case; at most 255
/// characters, the model part shortened if it must be).
#[must_use]
pub fn cluster_trait(cpu: &NamedCpu) -> String {
    let fp = cpu.fingerprint().to_ascii_uppercase();
    let fixed = "CUSTOM_".len() + CLUSTER_PREFIX.len() + 2 + fp.len();
    let model = trait_word(&cpu.model);
    let model = &model[..model.len().min(MAX_TRAIT_LEN - fixed)];
    format!("CUSTOM_{CLUSTER_PREFIX}_{model}_{fp}")
}

/// The CloudStack host tag of the cluster's CPU: `vcp-cluster-<model>-<fp>` (lower case, `-` for what is not a
/// letter or digit).
#[must_use]
pub fn cluster_tag(cpu: &NamedCpu) -> String {
    let name = cluster_trait(cpu);
    tag_word(&name["CUSTOM_".len()..])
}

/// The placement trait of a level: `CUSTOM_X86_64_V2` for x86-64-v2.
#[must_use]
pub fn level_trait(level: Level) -> String {
    format!("CUSTOM_{}", trait_word(level.as_str()))
}

/// The CloudStack host tag of a level: the level's own name, `x86-64-v2`.
#[must_use]
pub fn level_tag(level: Level) -> String {
    level.as_str().to_string()
}

/// `s` upper case with every character other than an ASCII letter or digit written `_`.
fn trait_word(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// `s` lower case with `_` written `-`.
fn tag_word(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c == '_' {
                '-'
            } else {
                c.to_ascii_lowercase()
            }
        })
        .collect()
}

/// One host's traits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostTraits {
    /// The host's name: the facts' (`<hostFacts name>`, libvirt's host name, which is the name
    /// of Nova's compute node resource provider), else the file name without `.xml`.
    pub name: String,
    /// The highest psABI level the host reaches; None below x86-64-v1.
    pub level: Option<Level>,
    /// The levels from x86-64-v2 up to `level`, lowest first.
    pub levels: Vec<Level>,
}

impl HostTraits {
    /// The placement traits: each level's, then the cluster's.
    #[must_use]
    pub fn traits(&self, cluster: &NamedCpu) -> Vec<String> {
        let mut v: Vec<String> = self.levels.iter().map(|l| level_trait(*l)).collect();
        v.push(cluster_trait(cluster));
        v
    }

    /// The CloudStack host tags: each level's, then the cluster's.
    #[must_use]
    pub fn tags(&self, cluster: &NamedCpu) -> Vec<String> {
        let mut v: Vec<String> = self.levels.iter().map(|l| level_tag(*l)).collect();
        v.push(cluster_tag(cluster));
        v
    }
}

/// The traits of a cluster: its CPU and each host's levels, hosts in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterTraits {
    /// The cluster's CPU.
    pub cpu: NamedCpu,
    /// The level every host reaches (the lowest host's).
    pub level: Option<Level>,
    /// Each host.
    pub hosts: Vec<HostTraits>,
    /// What the cluster's CPU leaves out because hosts are known only by their physical CPU
    /// ([`crate::cluster::analysis::ClusterReport::kvm_left_out`]): said in a comment line.
    pub kvm_left_out: Option<crate::cluster::analysis::KvmLeftOut>,
}

/// Why a cluster has no traits to give.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TraitsError {
    /// No baseline: off x86 no custom model is migration-safe under KVM (libvirt has no
    /// `host-model` on aarch64 and QEMU's named Arm models do not run under KVM).
    #[error(
        "no cluster CPU on {arch}: no custom CPU model is migration-safe there under KVM, so there is no trait to give (virt-cpu-policy baseline lists the groups of identical CPUs a host-passthrough guest migrates in)"
    )]
    NoBaseline {
        /// The hosts' arch.
        arch: String,
    },
    /// A host name Nova's provider config cannot identify (`maxLength: 200`).
    #[error(
        "host name '{name}' has {len} characters; Nova's provider config (schema 1.0) identifies a provider by a name of at most {MAX_PROVIDER_NAME_LEN}"
    )]
    NameTooLong {
        /// The name.
        name: String,
        /// Its length in characters.
        len: usize,
    },
}

/// The traits of the cluster in `report`, which must be a `--migratable` baseline (the CPU
/// `cpu.model = "baseline"` gives guests).
///
/// # Errors
/// [`TraitsError::NoBaseline`] when the report has no baseline (off x86).
pub fn cluster_traits(report: &ClusterReport) -> Result<ClusterTraits, TraitsError> {
    let Some(b) = &report.baseline else {
        return Err(TraitsError::NoBaseline {
            arch: report.arch.clone(),
        });
    };
    let mut features = report.features.clone();
    features.sort();
    features.dedup();
    let cpu = NamedCpu {
        arch: report.arch.clone(),
        model: b.cpu.model.clone(),
        vendor: b.cpu.vendor.clone(),
        features,
    };
    let hosts = report
        .hosts
        .iter()
        .map(|h| HostTraits {
            name: h.name.clone(),
            level: h.level,
            levels: Level::ALL
                .into_iter()
                .filter(|l| *l >= Level::V2 && Some(*l) <= h.level)
                .collect(),
        })
        .collect();
    Ok(ClusterTraits {
        cpu,
        level: report.level,
        hosts,
        kvm_left_out: report.kvm_left_out.clone(),
    })
}

/// A YAML double-quoted scalar: JSON's string syntax is YAML's (YAML 1.2, section 7.3.1).
fn yaml_string(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

/// The comment line that opens every document: the hosts it holds, then the cluster (all the
/// hosts given) and its CPU; a second one when the CPU leaves out features KVM never gives a
/// guest (hosts known only by their physical CPU).
fn header(t: &ClusterTraits, hosts: &[&HostTraits]) -> String {
    let names: Vec<&str> = hosts.iter().map(|h| h.name.as_str()).collect();
    let level = t
        .level
        .map_or_else(|| "no psABI level".to_string(), |l| l.to_string());
    let mut s = format!(
        "# virt-cpu-policy traits of {}; cluster of {} {} host(s), CPU {} ({} features, fingerprint {}), {level}\n",
        names.join(", "),
        t.hosts.len(),
        t.cpu.arch,
        t.cpu.model,
        t.cpu.features.len(),
        t.cpu.fingerprint(),
    );
    if let Some(k) = &t.kvm_left_out {
        s.push_str("# ");
        s.push_str(&k.sentence());
        s.push('\n');
    }
    s
}

/// One Nova provider config document (schema 1.0; `[compute] provider_config_location`), a
/// provider per host of `hosts`, identified by name, with its traits as `traits.additional`.
/// A compute node applies the providers it has and logs and ignores the others, so the same
/// document can go to every node.
///
/// # Errors
/// [`TraitsError::NameTooLong`] for a host name over 200 characters.
pub fn render_nova(t: &ClusterTraits, hosts: &[&HostTraits]) -> Result<String, TraitsError> {
    let mut s = header(t, hosts);
    s.push_str("meta:\n  schema_version: '1.0'\nproviders:\n");
    for h in hosts {
        let len = h.name.chars().count();
        if len > MAX_PROVIDER_NAME_LEN {
            return Err(TraitsError::NameTooLong {
                name: h.name.clone(),
                len,
            });
        }
        s.push_str("  - identification:\n");
        let _ = writeln!(s, "      name: {}", yaml_string(&h.name));
        s.push_str("    traits:\n      additional:\n");
        for tr in h.traits(&t.cpu) {
            let _ = writeln!(s, "        - {tr}");
        }
    }
    Ok(s)
}

/// CloudStack's implicit host tags (4.20 and later: `host.tags` in the agent's
/// `/etc/cloudstack/agent/agent.properties`, comma-separated, read when the agent starts and
/// sent to the management server): one `host.tags=` line per host of `hosts`, each after a
/// comment naming the host; with one host, its line alone after the header.
#[must_use]
pub fn render_cloudstack(t: &ClusterTraits, hosts: &[&HostTraits]) -> String {
    let mut s = header(t, hosts);
    for h in hosts {
        if hosts.len() > 1 {
            let _ = writeln!(s, "# {}", h.name);
        }
        let _ = writeln!(s, "host.tags={}", h.tags(&t.cpu).join(","));
    }
    s
}

/// One JSON object: `schema_version` (1), `cluster` (`arch`, `model`, `vendor`, `features`,
/// `fingerprint`, `trait`, `tag`, `level`) and `hosts` (each `name`, `level`, `traits`,
/// `tags`).
#[must_use]
pub fn render_json(t: &ClusterTraits, hosts: &[&HostTraits]) -> String {
    let level = |l: Option<Level>| l.map(Level::as_str);
    let hosts: Vec<serde_json::Value> = hosts
        .iter()
        .map(|h| {
            serde_json::json!({
                "name": h.name,
                "level": level(h.level),
                "traits": h.traits(&t.cpu),
                "tags": h.tags(&t.cpu),
            })
        })
        .collect();
    let v = serde_json::json!({
        "schema_version": crate::verdict::JSON_SCHEMA_VERSION,
        "cluster": {
            "arch": t.cpu.arch,
            "model": t.cpu.model,
            "vendor": t.cpu.vendor,
            "features": t.cpu.features,
            "fingerprint": t.cpu.fingerprint(),
            "trait": cluster_trait(&t.cpu),
            "tag": cluster_tag(&t.cpu),
            "level": level(t.level),
        },
        "hosts": hosts,
    });
    format!("{v}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu(model: &str, features: &[&str]) -> NamedCpu {
        NamedCpu {
            arch: "x86_64".into(),
            model: model.into(),
            vendor: Some("Intel".into()),
            features: features.iter().map(|f| (*f).to_string()).collect(),
        }
    }

    /// Placement's rule for a custom trait (os-traits' `is_custom` and Nova's schema).
    fn valid_custom_trait(t: &str) -> bool {
        t.starts_with("CUSTOM_")
            && t.len() <= MAX_TRAIT_LEN
            && t.bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    }

    #[test]
    fn level_names() {
        assert_eq!(level_trait(Level::V2), "CUSTOM_X86_64_V2");
        assert_eq!(level_trait(Level::V4), "CUSTOM_X86_64_V4");
        assert_eq!(level_tag(Level::V3), "x86-64-v3");
    }

    #[test]
    fn the_fingerprint_is_the_sha256_of_the_canonical_text() {
        let c = cpu("Nehalem", &["fpu", "sse4.2"]);
        assert_eq!(c.canonical(), "x86_64\nNehalem\nIntel\nfpu sse4.2\n");
        // printf 'x86_64\nNehalem\nIntel\nfpu sse4.2\n' | sha256sum
        assert_eq!(c.fingerprint(), "07db9a5a");
        assert_eq!(cluster_trait(&c), "CUSTOM_VCP_CLUSTER_NEHALEM_07DB9A5A");
        assert_eq!(cluster_tag(&c), "vcp-cluster-nehalem-07db9a5a");
    }

    #[test]
    fn one_feature_more_is_another_trait_and_the_same_cpu_the_same_one() {
        let a = cpu("Skylake-Client-IBRS", &["fpu", "pcid"]);
        let b = cpu("Skylake-Client-IBRS", &["fpu", "pcid", "spec-ctrl"]);
        assert_ne!(cluster_trait(&a), cluster_trait(&b));
        assert_eq!(cluster_trait(&a), cluster_trait(&a.clone()));
        assert!(cluster_trait(&a).starts_with("CUSTOM_VCP_CLUSTER_SKYLAKE_CLIENT_IBRS_"));
        let neutral = NamedCpu {
            vendor: None,
            ..a.clone()
        };
        assert_ne!(cluster_trait(&a), cluster_trait(&neutral));
    }

    #[test]
    fn every_name_is_a_valid_custom_trait_even_for_odd_or_long_models() {
        for model in [
            "486",
            "EPYC-Genoa-v2",
            "Cascadelake-Server-noTSX",
            "a.b c",
            &"X".repeat(400),
        ] {
            let t = cluster_trait(&cpu(model, &["fpu"]));
            assert!(valid_custom_trait(&t), "{t}");
        }
        for l in Level::ALL {
            assert!(valid_custom_trait(&level_trait(l)));
        }
    }
}
