//! The policy file: a TOML document (schema version 1) that says what every guest's CPU must be.
//!
//! Parsing is strict: unknown keys, wrong types and bad values are errors that name the key and
//! its line and column (serde's `deny_unknown_fields` plus `toml`'s spans). Feature names are
//! normalised to libvirt's spelling ([`crate::cpu::normalize_feature`]) when the file is read, so
//! the rest of the program only sees libvirt names.
//!
//! [`Policy::plan`] turns the ordered `[[rule]]` list into a [`Plan`] for one domain: rules
//! apply in file order and a later matching rule overrides an earlier one key by key; every value
//! in the plan remembers the rule that set it, for `--explain` and for messages.

mod read;

use crate::cluster::cluster_cpu::ClusterCpu;
use crate::cpu::Level;
use crate::error::{Error, Result};
use crate::libvirt::cpu_def::{CpuCheck, CpuMode, Fallback};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// Where the installed policy lives; read when no `--policy` is given.
pub const SYSTEM_POLICY: &str = "/etc/virt-cpu-policy/policy.toml";

/// The built-in default policy, also shipped as `packaging/policy.toml`: x86-64-v2 for every
/// x86_64 guest. (The aarch64 and TCG mode fixes of [`crate::rewrite`] apply to every domain.)
pub const DEFAULT_POLICY: &str = include_str!("../../packaging/policy.toml");

/// What the tool does with a non-conforming domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Rewrite the domain (default).
    #[default]
    Enforce,
    /// Report what would change; the output is the input, byte for byte.
    Audit,
}

/// `[hook] on_violation`: what the libvirt hook does with a guest that does not conform.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnViolation {
    /// Refuse the start (hook exits 1).
    Deny,
    /// Log and let it start (default).
    #[default]
    Warn,
}

/// `[hook] on_error`: what the hook does when the tool itself fails (bad policy, unparsable XML).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnError {
    /// Log and let libvirt go on (default).
    #[default]
    Allow,
    /// Refuse with the reason.
    Deny,
}

/// `[hook]` settings (used by the libvirt hook; parsed and validated for every command).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookSettings {
    /// See [`OnViolation`].
    #[serde(default)]
    pub on_violation: OnViolation,
    /// See [`OnError`].
    #[serde(default)]
    pub on_error: OnError,
}

/// `[host]`: overrides of discovered host facts, and where the cluster's facts are.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSettings {
    /// libvirt's cpu_map directory (default `/usr/share/libvirt/cpu_map`).
    pub cpu_map: Option<PathBuf>,
    /// Extra `virsh capabilities` / `virsh domcapabilities` / QEMU capability cache /
    /// `<hostFacts>` files.
    #[serde(default)]
    pub capabilities: Vec<PathBuf>,
    /// The host's online CPU count, overriding `sysconf(_SC_NPROCESSORS_ONLN)`.
    pub cpus: Option<u32>,
    /// Where `virt-cpu-policyd` publishes this host's `<hostFacts>` file (`DIR/<hostname>.xml`);
    /// its `--publish DIR` wins. None: not published.
    pub publish: Option<PathBuf>,
    /// The cluster's host facts: files, or directories standing for their `*.xml` files (one
    /// host per file, as `virt-cpu-policy baseline` reads them); what `cpu.model = "baseline"`
    /// is computed from. Empty: no cluster.
    #[serde(default)]
    pub cluster: Vec<PathBuf>,
}

/// `cpu.model = "baseline"`: the rule's guests get the CPU every host of `[host] cluster` can
/// run (the cluster's baseline, computed per run), not a model of this name (libvirt has none).
pub const BASELINE_MODEL: &str = "baseline";

/// `vcpu.max`: the vCPU maximum a rule asks for (applied by part 2 of the rewrite engine).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VcpuMax {
    /// A fixed count (1 or more).
    Count(u32),
    /// The host's online CPU count.
    Host,
    /// The machine type's limit.
    Machine,
}

/// `vcpu.topology`: how `<topology>` is reshaped when the maximum changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TopologyStrategy {
    /// Grow sockets (default).
    #[default]
    Sockets,
    /// Grow cores per socket.
    Cores,
    /// Keep the topology; refuse a maximum it cannot hold.
    Keep,
}

/// `vcpu.iommu`: whether more than 255 x86 vCPUs may bring an IOMMU in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IommuStrategy {
    /// Add the IOMMU and split I/O APIC that more than 255 vCPUs need on q35 (default).
    #[default]
    Auto,
    /// Clamp the maximum to 255 instead.
    Never,
}

/// `match = { ... }`: shell globs on domain facts; all given keys must match.
#[derive(Debug, Clone, Default)]
pub struct Match {
    /// Domain `<name>`.
    pub name: Option<glob::Pattern>,
    /// `<os><type arch>`.
    pub arch: Option<glob::Pattern>,
    /// `<os><type machine>` as written in the domain.
    pub machine: Option<glob::Pattern>,
    /// `<domain type>`: `kvm` or `qemu`.
    pub virt_type: Option<glob::Pattern>,
    /// The guest's OS ([`crate::guest_os::GuestOs`]): libosinfo's id or CloudStack's guest OS
    /// name; a domain that names none does not match.
    pub os: Option<glob::Pattern>,
}

/// The `cpu.*` keys of one rule.
#[derive(Debug, Clone, Default)]
pub struct CpuRule {
    /// `cpu.mode`.
    pub mode: Option<CpuMode>,
    /// `cpu.model` (implies custom).
    pub model: Option<String>,
    /// `cpu.fallback`.
    pub fallback: Option<Fallback>,
    /// `cpu.check`.
    pub check: Option<CpuCheck>,
    /// `cpu.min_level`.
    pub min_level: Option<Level>,
    /// `cpu.require`, libvirt spellings.
    pub require: Option<Vec<String>>,
    /// `cpu.disable`, libvirt spellings.
    pub disable: Option<Vec<String>>,
    /// `cpu.os_floor`: raise the CPU to the floor of the guest's OS where it is above
    /// `min_level` ([`crate::guest_os::Floor`]).
    pub os_floor: Option<bool>,
}

/// The `vcpu.*` keys of one rule.
#[derive(Debug, Clone, Default)]
pub struct VcpuRule {
    /// `vcpu.max`.
    pub max: Option<VcpuMax>,
    /// `vcpu.topology`.
    pub topology: Option<TopologyStrategy>,
    /// `vcpu.iommu`.
    pub iommu: Option<IommuStrategy>,
}

/// One `[[rule]]`.
#[derive(Debug, Clone)]
pub struct Rule {
    /// `name`, shown in explanations and messages.
    pub name: String,
    /// `match`; an empty match matches every domain.
    pub matches: Match,
    /// `cpu.*`.
    pub cpu: CpuRule,
    /// `vcpu.*`.
    pub vcpu: VcpuRule,
}

/// A parsed, validated policy.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Where it came from: a path, or "built-in".
    pub source: String,
    /// `mode`.
    pub mode: Mode,
    /// `[hook]`.
    pub hook: HookSettings,
    /// `[host]`.
    pub host: HostSettings,
    /// `[[rule]]`, in file order.
    pub rules: Vec<Rule>,
}

/// The domain facts rules match on.
#[derive(Debug, Clone, Default)]
pub struct Target<'a> {
    /// `<name>`.
    pub name: &'a str,
    /// `<os><type arch>`.
    pub arch: &'a str,
    /// `<os><type machine>`.
    pub machine: &'a str,
    /// `<domain type>`.
    pub virt_type: &'a str,
    /// The guest's OS as the domain names it (libosinfo's id, or `<description>`).
    pub os: Option<&'a crate::guest_os::GuestOs>,
}

/// A value and the name of the rule that set it (each key of a [`Plan`] says which rule asked
/// for it, for `--explain` and every message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ruled<T> {
    /// The value.
    pub value: T,
    /// The rule's `name`.
    pub rule: String,
}

/// What the matching rules ask of one domain.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// Names of the rules that matched, in order.
    pub matched: Vec<String>,
    /// Desired `<cpu mode>` (a model implies custom).
    pub mode: Option<Ruled<CpuMode>>,
    /// Desired `<model>`.
    pub model: Option<Ruled<String>>,
    /// Desired `<model fallback>`.
    pub fallback: Option<Ruled<Fallback>>,
    /// Desired `<cpu check>`.
    pub check: Option<Ruled<CpuCheck>>,
    /// Guaranteed psABI level.
    pub min_level: Option<Ruled<Level>>,
    /// Features that must be present.
    pub require: Option<Ruled<Vec<String>>>,
    /// Features that must be absent.
    pub disable: Option<Ruled<Vec<String>>>,
    /// Desired vCPU maximum.
    pub vcpu_max: Option<Ruled<VcpuMax>>,
    /// Topology strategy.
    pub topology: Option<Ruled<TopologyStrategy>>,
    /// IOMMU strategy.
    pub iommu: Option<Ruled<IommuStrategy>>,
    /// The cluster's CPU, when the plan's model was `"baseline"` ([`crate::pipeline`] put its
    /// model in `model` and its features in `require` and `disable`), with the rule that asked
    /// for it.
    pub cluster: Option<Ruled<ClusterCpu>>,
    /// The guest's OS as its domain names it, and its CPU floor when a row of
    /// `src/cpu/os_floors.toml` names it: judged whatever the rules say
    /// ([`crate::validate`]'s `os-floor`).
    pub os: Option<(
        crate::guest_os::GuestOs,
        Option<&'static crate::guest_os::Floor>,
    )>,
    /// `cpu.os_floor` as the matching rules leave it: true raises the CPU to the OS's floor,
    /// false waives the floor (not judged: the operator knows better, e.g. AlmaLinux 10's
    /// x86_64_v2 build), unset judges it.
    pub os_floor: Option<Ruled<bool>>,
}

impl Plan {
    /// The rule that waives the floor of the guest's OS (`cpu.os_floor = false`), if one does:
    /// then the floor is neither raised nor judged.
    #[must_use]
    pub fn floor_waiver(&self) -> Option<&Ruled<bool>> {
        self.os_floor.as_ref().filter(|r| !r.value)
    }

    /// Whether the plan asks for all of `floor`: its `min_level` reaches the floor's level, and
    /// each feature the floor needs is required or part of that level.
    #[must_use]
    pub fn asks_floor(&self, floor: &crate::guest_os::Floor) -> bool {
        let level = self.min_level.as_ref().map(|l| l.value);
        floor.level.is_none_or(|l| level.is_some_and(|m| m >= l))
            && floor.require.iter().all(|f| {
                self.requires(f) || level.is_some_and(|m| m.features().contains(&f.as_str()))
            })
    }

    /// Whether the plan's `require` lists `feature`.
    #[must_use]
    pub fn requires(&self, feature: &str) -> bool {
        self.require
            .as_ref()
            .is_some_and(|r| r.value.iter().any(|v| v == feature))
    }

    /// Whether the plan's `require` or `disable` lists `feature` (the policy names it).
    #[must_use]
    pub fn names_feature(&self, feature: &str) -> bool {
        self.requires(feature)
            || self
                .disable
                .as_ref()
                .is_some_and(|x| x.value.iter().any(|v| v == feature))
    }

    /// The rule a feature of `set` (the plan's `require` or `disable`) is there for: the rule
    /// that asked for the cluster's baseline when the baseline brought it, else the set's.
    #[must_use]
    pub fn feature_rule<'p>(&'p self, feature: &str, set: &'p Ruled<Vec<String>>) -> &'p str {
        match &self.cluster {
            Some(c)
                if c.value.require.iter().any(|f| f == feature)
                    || c.value.disable.iter().any(|f| f == feature) =>
            {
                &c.rule
            }
            _ => &set.rule,
        }
    }

    /// Whether no rule asks for anything.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.mode.is_none()
            && self.model.is_none()
            && self.fallback.is_none()
            && self.check.is_none()
            && self.min_level.is_none()
            && self.require.is_none()
            && self.disable.is_none()
            && self.vcpu_max.is_none()
    }
}

impl Policy {
    /// Parse a policy from TOML text; `source` names it in messages.
    ///
    /// # Errors
    /// [`Error::Policy`] naming the key, line and column of every problem (of the first only for
    /// a TOML syntax error): an unknown key, a wrong type, a bad value, `version` other than 1, a
    /// rule without a name, a rule name used twice, with a control character or reserved
    /// ([`crate::change::reserved_rule_name`]), an empty or blank `[host]` path, a `vcpu.max`
    /// above `u32::MAX`, a feature both required and disabled, a disabled feature that
    /// `min_level` needs, a model with a non-custom mode.
    pub fn parse(text: &str, source: &str) -> Result<Policy> {
        read::parse(text, source)
    }

    /// The built-in default policy ([`DEFAULT_POLICY`]).
    ///
    /// # Panics
    /// Never in a released build: a unit test parses the built-in text.
    #[must_use]
    pub fn builtin() -> Policy {
        Policy::parse(DEFAULT_POLICY, "built-in").expect("the built-in policy parses")
    }

    /// Read the policy to use: `path` if given, else [`SYSTEM_POLICY`] if it exists, else the
    /// built-in default.
    ///
    /// # Errors
    /// [`Error::Read`] if the file cannot be read (a directory, no permission, missing when named
    /// explicitly); [`Error::Policy`] if it does not parse.
    pub fn load(path: Option<&Path>) -> Result<Policy> {
        const MAX_POLICY: usize = 1024 * 1024;
        let path = match path {
            Some(p) => p.to_path_buf(),
            None => {
                let sys = Path::new(SYSTEM_POLICY);
                if sys.exists() {
                    sys.to_path_buf()
                } else {
                    return Ok(Policy::builtin());
                }
            }
        };
        let unreadable = |e: std::io::Error| Error::Policy {
            path: path.display().to_string(),
            errors: vec![format!("cannot read it: {e}")],
        };
        // A FIFO or a device would block or never end: a policy is a regular file.
        let bytes = crate::readfile::read_regular(&path, MAX_POLICY).map_err(|e| match e {
            crate::readfile::ReadError::Io { source, .. } => unreadable(source),
            crate::readfile::ReadError::TooLarge { size, .. } => Error::Policy {
                path: path.display().to_string(),
                errors: vec![format!(
                    "the file is {size} bytes, over the 1 MiB limit for a policy"
                )],
            },
        })?;
        let text = String::from_utf8(bytes).map_err(|e| Error::Policy {
            path: path.display().to_string(),
            errors: vec![format!(
                "not valid UTF-8 at byte {} (TOML files are UTF-8)",
                e.utf8_error().valid_up_to()
            )],
        })?;
        Policy::parse(&text, &path.display().to_string())
    }

    /// The plan for a parsed domain (its name, arch, machine and virt type as the target). A
    /// `cpu.model = "baseline"` is still the placeholder: [`crate::pipeline`] puts the cluster's
    /// CPU in.
    #[must_use]
    pub fn plan_for(&self, dom: &crate::domain::Domain<'_>) -> Plan {
        let name = dom.name();
        let os = crate::guest_os::GuestOs::of(dom.root());
        self.plan(&Target {
            name: &name,
            arch: dom.arch(),
            machine: dom.machine(),
            virt_type: dom.virt_type(),
            os: os.as_ref(),
        })
    }

    /// The plan for the domain `t` describes: the matching rules folded in file order, later
    /// keys overriding earlier ones.
    #[must_use]
    pub fn plan(&self, t: &Target<'_>) -> Plan {
        let mut p = Plan::default();
        let mut os_floor: Option<Ruled<bool>> = None;
        for r in self.rules.iter().filter(|r| r.matches.matches(t)) {
            p.matched.push(r.name.clone());
            set2(&mut p.mode, r.cpu.mode, &r.name);
            if r.cpu.model.is_some() {
                set2(&mut p.mode, Some(CpuMode::Custom), &r.name);
            }
            set2(&mut p.model, r.cpu.model.clone(), &r.name);
            if r.cpu.mode.is_some_and(|m| m != CpuMode::Custom) {
                p.model = None;
            }
            set2(&mut p.fallback, r.cpu.fallback, &r.name);
            set2(&mut p.check, r.cpu.check, &r.name);
            set2(&mut p.min_level, r.cpu.min_level, &r.name);
            set2(&mut p.require, r.cpu.require.clone(), &r.name);
            set2(&mut p.disable, r.cpu.disable.clone(), &r.name);
            set2(&mut p.vcpu_max, r.vcpu.max, &r.name);
            set2(&mut p.topology, r.vcpu.topology, &r.name);
            set2(&mut p.iommu, r.vcpu.iommu, &r.name);
            set2(&mut os_floor, r.cpu.os_floor, &r.name);
        }
        p.os = t.os.map(|os| (os.clone(), os.floor()));
        p.os_floor = os_floor;
        if t.arch == "x86_64" {
            p.raise_to_floor();
        }
        p
    }
}

impl Plan {
    /// `cpu.os_floor = true`: `min_level` and `require` raised to the floor of the guest's OS
    /// where it asks more than the rules, each raise attributed to `RULE: the floor of OS`. Only
    /// an x86_64 guest has a psABI level to raise (the caller asks for it there only).
    fn raise_to_floor(&mut self) {
        let Some(rule) = self
            .os_floor
            .as_ref()
            .filter(|r| r.value)
            .map(|r| r.rule.clone())
        else {
            return;
        };
        let Some((os, floor)) = self
            .os
            .as_ref()
            .and_then(|(os, f)| Some((os.short(), (*f)?)))
        else {
            return;
        };
        let why = format!("{rule}: the floor of {os}");
        if let Some(l) = floor
            .level
            .filter(|l| self.min_level.as_ref().is_none_or(|m| m.value < *l))
        {
            self.min_level = Some(Ruled {
                value: l,
                rule: why.clone(),
            });
        }
        if !self.asks_floor(floor) {
            let mut value = self.require.take().map(|r| r.value).unwrap_or_default();
            let level = self
                .min_level
                .as_ref()
                .map(|l| l.value.features())
                .unwrap_or_default();
            for f in &floor.require {
                if !value.contains(f) && !level.contains(&f.as_str()) {
                    value.push(f.clone());
                }
            }
            self.require = Some(Ruled { value, rule: why });
        }
    }
}

fn set2<T>(slot: &mut Option<Ruled<T>>, v: Option<T>, rule: &str) {
    if let Some(value) = v {
        *slot = Some(Ruled {
            value,
            rule: rule.to_string(),
        });
    }
}

impl Match {
    /// Whether every given pattern matches the domain's fact (a missing fact is "").
    #[must_use]
    pub fn matches(&self, t: &Target<'_>) -> bool {
        let m = |p: &Option<glob::Pattern>, v: &str| p.as_ref().is_none_or(|p| p.matches(v));
        let os = self.os.as_ref().is_none_or(|p| {
            t.os.is_some_and(|os| {
                let opts = glob::MatchOptions {
                    case_sensitive: false,
                    ..glob::MatchOptions::new()
                };
                p.matches_with(&os.id, opts) || p.matches_with(&os.short(), opts)
            })
        });
        m(&self.name, t.name)
            && m(&self.arch, t.arch)
            && m(&self.machine, t.machine)
            && m(&self.virt_type, t.virt_type)
            && os
    }
}

/// `[hook] on_error` read leniently from a policy that does not parse as a whole, so the hook
/// honours `on_error = "deny"` even when another key of the same file is broken. None when the
/// value cannot be found (the default, allow, then applies).
#[must_use]
pub fn on_error_hint(text: &str) -> Option<OnError> {
    if let Ok(table) = toml::from_str::<toml::Table>(text) {
        return match table.get("hook")?.get("on_error")?.as_str()? {
            "deny" => Some(OnError::Deny),
            "allow" => Some(OnError::Allow),
            _ => None,
        };
    }
    // Not even TOML: look for the key under a [hook] header, line by line.
    let mut in_hook = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_hook = line.trim_matches(|c| c == '[' || c == ']').trim() == "hook";
            continue;
        }
        let key_value = if in_hook {
            Some(line)
        } else {
            line.strip_prefix("hook.")
        };
        if let Some((k, v)) = key_value.and_then(|l| l.split_once('=')) {
            if k.trim() == "on_error" {
                let v = v.split('#').next().unwrap_or("").trim();
                return match v.trim_matches(|c| c == '"' || c == '\'') {
                    "deny" => Some(OnError::Deny),
                    "allow" => Some(OnError::Allow),
                    _ => None,
                };
            }
        }
    }
    None
}

#[cfg(test)]
mod tests;
