//! A cluster's CPU, as a policy's `cpu.model = "baseline"` uses it: libvirt's baseline of the
//! hosts' CPUs with `migratable` set (a cluster CPU is for guests that migrate, and a
//! `migratable='no'` feature such as `invtsc` would block that), a vendor mix answered
//! vendor-neutrally ([`super::ClusterOptions`]), and what each level above the one every host
//! reaches lacks on which host.
//!
//! The plan takes it in [`crate::pipeline`]; [`crate::host::Host::cluster_cpu`] computes it once
//! per run, from `[host] cluster`, and only when a plan asks for it.

use super::ClusterOptions;
use crate::cpu::Level;
use crate::libvirt::cpu_map::DEFAULT_CPU_MAP;
use sha2::{Digest, Sha256};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Hex digits of the fingerprint kept in a name: 32 bits tell a fleet's few cluster CPUs apart.
const FINGERPRINT_LEN: usize = 8;

/// The CPU every host of a cluster can run, as a plan uses it for `cpu.model = "baseline"`:
/// libvirt's baseline of the hosts' CPUs, `migratable`. Feature names are libvirt's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterCpu {
    /// The baseline's model (a libvirt model of the cpu_map in use).
    pub model: String,
    /// Features the baseline adds to its model.
    pub require: Vec<String>,
    /// Features of its model the baseline takes away.
    pub disable: Vec<String>,
    /// The hosts' vendor as libvirt names it (`Intel`, `AMD`); None when they differ (the
    /// vendor-neutral baseline) or a host names none.
    pub vendor: Option<String>,
    /// Every feature the baseline CPU has (model + `require` − `disable`): the features all the
    /// hosts share.
    pub features: Vec<String>,
    /// The x86-64 psABI level every host reaches (None: not even x86-64-v1).
    pub level: Option<Level>,
    /// For each level above [`ClusterCpu::level`]: the hosts that lack it, each as `NAME
    /// (missing a, b)`.
    pub blocked: Vec<(Level, Vec<String>)>,
    /// The hosts' names, in the order read.
    pub hosts: Vec<String>,
    /// Each host's own psABI level, in the order of [`ClusterCpu::hosts`] (None: below
    /// x86-64-v1).
    pub host_levels: Vec<Option<Level>>,
    /// The hosts' arch (`x86_64`, `i686`), as the facts name it.
    pub arch: String,
    /// Where the cluster is named: `[host] cluster of policy FILE`.
    pub source: String,
    /// The features KVM never gives a guest left out of the baseline, and the hosts known only
    /// by their physical CPU that listed them ([`super::analysis::ClusterReport::kvm_left_out`]).
    pub kvm_left_out: Option<super::analysis::KvmLeftOut>,
}

impl ClusterCpu {
    /// Its name for schedulers and metrics ([`NamedCpu`]), whose
    /// [`fingerprint`](NamedCpu::fingerprint) tells two cluster CPUs apart.
    #[must_use]
    pub fn named(&self) -> NamedCpu {
        let mut features = self.features.clone();
        features.sort_unstable();
        features.dedup();
        NamedCpu {
            arch: self.arch.clone(),
            model: self.model.clone(),
            vendor: self.vendor.clone(),
            features,
        }
    }

    /// `N host(s): a, b, c` for messages.
    #[must_use]
    pub fn hosts_text(&self) -> String {
        format!("{} host(s): {}", self.hosts.len(), self.hosts.join(", "))
    }

    /// The CPU of the cluster whose hosts' facts are `files` (files, and directories standing for
    /// their `*.xml` files; `source` says where they are named, for messages), computed with
    /// libvirt's cpu_map at `cpu_map` ([`crate::host::Host::cluster_cpu`] keeps it for the run).
    ///
    /// # Errors
    /// One sentence naming `source` and the file or the reason: no files, no cpu_map directory
    /// (the built-in model table has no CPUID data), a facts file that is missing, unreadable or
    /// not host facts, an unknown model or feature, no CPU common to the hosts, or hosts without
    /// a baseline (aarch64).
    pub fn of(
        files: Option<&[PathBuf]>,
        source: &str,
        cpu_map: Option<&Path>,
    ) -> std::result::Result<ClusterCpu, String> {
        let Some(files) = files.filter(|f| !f.is_empty()) else {
            return Err(
            "no [host] cluster names the hosts' facts files (`[host] cluster = [\"DIR or files\"]`)"
                .into(),
        );
        };
        let Some(map) = cpu_map else {
            return Err(format!(
                "{source}: libvirt's cpu_map is not at {DEFAULT_CPU_MAP} (libvirt not installed?): give [host] cpu_map or --cpu-map; a cluster's baseline is computed on libvirt's CPUID data, which the built-in model table lacks"
            ));
        };
        let hosts =
            crate::cluster::hosts::read_hosts(files).map_err(|e| format!("{source}: {e}"))?;
        Self::of_hosts(&hosts, source, map)
    }

    /// [`ClusterCpu::of`] the hosts already read, with the cpu_map at `map`.
    ///
    /// # Errors
    /// As [`ClusterCpu::of`], but for reading the hosts.
    pub fn of_hosts(
        hosts: &[crate::cluster::hosts::ClusterHost],
        source: &str,
        map: &Path,
    ) -> std::result::Result<ClusterCpu, String> {
        let opts = ClusterOptions {
            migratable: true,
            strict_vendor: false,
        };
        let report = crate::cluster::baseline_of_hosts(hosts, map, &opts)
            .map_err(|e| format!("{source}: {e}"))?;
        let Some(b) = &report.baseline else {
            return Err(format!(
                "{source}: the hosts are {}: no custom CPU model is migration-safe there, so the cluster has no baseline; give these guests cpu.mode = \"host-passthrough\" and migrate them only inside a group of identical hosts (`virt-cpu-policy baseline` lists the groups)",
                report.arch
            ));
        };
        let blocked = Level::ALL
            .into_iter()
            .filter(|l| Some(*l) > report.level)
            .map(|l| {
                let hosts = report
                    .blocking(l)
                    .into_iter()
                    .map(|(h, lacks)| format!("{h} (missing {})", lacks.join(", ")))
                    .collect();
                (l, hosts)
            })
            .collect();
        Ok(ClusterCpu {
            model: b.cpu.model.clone(),
            require: b.cpu.require.clone(),
            disable: b.cpu.disable.clone(),
            vendor: b.cpu.vendor.clone(),
            features: report.features.clone(),
            level: report.level,
            blocked,
            hosts: report.hosts.iter().map(|h| h.name.clone()).collect(),
            host_levels: report.hosts.iter().map(|h| h.level).collect(),
            arch: report.arch.clone(),
            source: source.to_string(),
            kvm_left_out: report.kvm_left_out.clone(),
        })
    }
}

/// The cluster's CPU by what tells two apart: arch, model, vendor and effective features, and
/// its fingerprint (what the placement trait and host tag name, [`crate::placement`], and what
/// the cluster CPU seen compares, [`super::watch`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedCpu {
    /// The hosts' arch (`x86_64`, `i686`).
    pub arch: String,
    /// The baseline model (libvirt's name).
    pub model: String,
    /// Its vendor; None for a vendor mix or a host naming none.
    pub vendor: Option<String>,
    /// The effective features (model + required − disabled), sorted by name.
    pub features: Vec<String>,
}

impl NamedCpu {
    /// The text the fingerprint hashes: `ARCH\nMODEL\nVENDOR\nFEATURES\n`, the vendor empty
    /// when none, the features sorted and joined with single spaces.
    #[must_use]
    pub fn canonical(&self) -> String {
        format!(
            "{}\n{}\n{}\n{}\n",
            self.arch,
            self.model,
            self.vendor.as_deref().unwrap_or(""),
            self.features.join(" ")
        )
    }

    /// The first 8 hex digits (lower case) of the SHA-256 of [`NamedCpu::canonical`].
    #[must_use]
    pub fn fingerprint(&self) -> String {
        let digest = Sha256::digest(self.canonical().as_bytes());
        let mut hex = String::with_capacity(FINGERPRINT_LEN);
        for b in &digest[..FINGERPRINT_LEN / 2] {
            let _ = write!(hex, "{b:02x}");
        }
        hex
    }
}
