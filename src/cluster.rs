//! Clusters of hosts: one guest CPU every host can run, the psABI level the cluster reaches, and
//! whether a guest's CPU runs on a given host.
//!
//! libvirt has the algorithms (`virsh cpu-baseline`, `virsh hypervisor-cpu-compare`) but needs a
//! live connection on one host and says nothing about psABI levels or which host holds a cluster
//! back. This module computes the same answers from host facts files, with libvirt's own
//! `cpu_map`:
//!
//! * [`hosts`] reads one host's facts file (domcapabilities, capabilities, a host `<cpu>`,
//!   `<hostFacts>`) through [`crate::libvirt`].
//! * [`baseline`] is libvirt's x86 baseline (`virCPUx86Baseline` and `x86Decode` in
//!   `src/cpu/cpu_x86.c`) on CPUID data from [`crate::libvirt::cpu_map::x86::X86Map`].
//! * [`analysis`] puts a cluster together: the baseline restricted to the models every host can
//!   run, each host's level and what it lacks for the next ones, the groups of hosts with an
//!   identical CPU (where a `host-passthrough` guest may migrate), aarch64 included.
//! * [`compare`] is libvirt's `x86Compute`: identical, superset or incompatible, with the
//!   features named.
//! * [`mod@format`] writes a report as text, JSON, a policy rule, `nova.conf` or CloudStack
//!   `agent.properties` lines.
//! * [`cluster_cpu`] is the cluster's CPU a policy's `cpu.model = "baseline"` gives guests (the plan
//!   takes it in [`crate::pipeline`]).
//! * [`traits`] names what schedulers place guests by: each host's psABI levels and the
//!   cluster's CPU as Nova placement traits and CloudStack host tags.
//! * [`watch`] remembers the last cluster CPU seen on this host, so a change (a host joined, left
//!   or changed) is logged once, with the host responsible, and counted for the metrics.
//!
//! Nothing here calls libvirt: like the rest of the tool, host facts come from files.

pub mod baseline;
pub mod cluster_cpu;
pub mod compare;
pub mod format;
pub mod hosts;
pub mod analysis;
pub mod traits;
pub mod watch;

use crate::libvirt::cpu_map::CpuMapError;
use std::path::{Path, PathBuf};

pub use analysis::{ClusterOptions, ClusterReport, analyze};

/// Why a cluster computation could not be made. [`ClusterError::is_incompatible`] tells the
/// answers about the hosts (exit 1 at the command line) from bad input (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// A file could not be read, is too large, not UTF-8 or not XML.
    #[error(transparent)]
    Input(#[from] crate::Error),
    /// A file is XML but not host facts (or not the guest CPU expected).
    #[error("{}: {message}", .path.display())]
    Facts {
        /// The file.
        path: PathBuf,
        /// What is wrong, one sentence.
        message: String,
    },
    /// No facts file was given.
    #[error("no host facts given")]
    NoHosts,
    /// libvirt's cpu_map cannot be loaded.
    #[error(transparent)]
    CpuMap(#[from] CpuMapError),
    /// A CPU names a model the cpu_map does not define (libvirt: "Unknown CPU model %s").
    #[error(
        "{}: unknown CPU model '{model}': libvirt's cpu_map at {} does not define it (libvirt: \"Unknown CPU model {model}\"; a newer libvirt's cpu_map may)",
        .path.display(), .map.display()
    )]
    UnknownModel {
        /// The facts or domain file.
        path: PathBuf,
        /// The model.
        model: String,
        /// The cpu_map directory.
        map: PathBuf,
    },
    /// A CPU names a feature the cpu_map does not define (libvirt: "Unknown CPU feature %s").
    #[error(
        "{}: unknown CPU feature '{feature}': libvirt's cpu_map at {} does not define it (libvirt: \"Unknown CPU feature {feature}\"; a newer libvirt's cpu_map may)",
        .path.display(), .map.display()
    )]
    UnknownFeature {
        /// The facts or domain file.
        path: PathBuf,
        /// The feature.
        feature: String,
        /// The cpu_map directory.
        map: PathBuf,
    },
    /// A CPU names a vendor the cpu_map does not define (libvirt: "Unknown CPU vendor %s").
    #[error(
        "{}: unknown CPU vendor '{vendor}': libvirt's cpu_map at {} does not define it (libvirt: \"Unknown CPU vendor {vendor}\")",
        .path.display(), .map.display()
    )]
    UnknownVendor {
        /// The facts or domain file.
        path: PathBuf,
        /// The vendor.
        vendor: String,
        /// The cpu_map directory.
        map: PathBuf,
    },
    /// Hosts of different arches cannot share a guest CPU.
    #[error("the hosts are of different arches: {0}")]
    MixedArch(String),
    /// No x86 CPU every host can run: libvirt's "CPUs are incompatible" (no common feature) or
    /// "Cannot find suitable CPU model for given data" (no model fits, e.g. none usable on
    /// every host).
    #[error("{0}")]
    Incompatible(String),
}

impl ClusterError {
    /// Whether this is an answer about the hosts (no common CPU) rather than bad input.
    #[must_use]
    pub fn is_incompatible(&self) -> bool {
        matches!(self, ClusterError::Incompatible(_))
    }

    /// [`ClusterError::Facts`]: `path` is not the facts expected, `message` says why.
    #[must_use]
    pub fn facts(path: &std::path::Path, message: &str) -> ClusterError {
        ClusterError::Facts {
            path: path.to_owned(),
            message: message.to_string(),
        }
    }
}

/// The cluster report of the hosts described by `paths` (files or directories of facts files),
/// with libvirt's cpu_map at `cpu_map` (read only when a host is x86). This is the one call a
/// caller needs: `virt-cpu-policy baseline` and a policy's `cpu.model = "baseline"`
/// ([`cluster_cpu::ClusterCpu::of`]).
///
/// # Errors
/// [`ClusterError`] for unreadable or unknown input and for hosts without a common CPU.
pub fn baseline_from_files(
    paths: &[PathBuf],
    cpu_map: &Path,
    opts: &ClusterOptions,
) -> Result<ClusterReport, ClusterError> {
    baseline_of_hosts(&hosts::read_hosts(paths)?, cpu_map, opts)
}

/// [`baseline_from_files`] of hosts already read ([`hosts::read_hosts`]).
///
/// # Errors
/// As [`baseline_from_files`], but for reading the hosts.
pub fn baseline_of_hosts(
    hosts: &[hosts::ClusterHost],
    cpu_map: &Path,
    opts: &ClusterOptions,
) -> Result<ClusterReport, ClusterError> {
    let map = if hosts.iter().any(|h| crate::libvirt::arch::is_x86(&h.arch)) {
        Some(crate::libvirt::cpu_map::x86::X86Map::load(cpu_map)?)
    } else {
        None
    };
    analyze(hosts, map.as_ref(), opts)
}
