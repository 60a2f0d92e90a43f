//! Clusters of hosts, as a source of facts: the hosts read from their facts files, what they
//! share (the CPU every host can run, the psABI level the cluster reaches, the groups of
//! identical CPUs), and the cluster CPU this host last saw.
//!
//! libvirt has the algorithms (`virsh cpu-baseline`, `virsh hypervisor-cpu-compare`) but needs a
//! live connection on one host and says nothing about psABI levels or which host holds a cluster
//! back. The algorithms are libvirt's `cpu_x86`, kept with the CPU knowledge
//! ([`crate::cpu::baseline`], [`crate::cpu::compare`]); this module applies them to hosts:
//!
//! * [`hosts`] reads one host's facts file (domcapabilities, capabilities, a host `<cpu>`,
//!   `<hostFacts>`) through [`crate::libvirt`], and compares a guest CPU with a host's.
//! * [`analysis`] puts a cluster together: the baseline restricted to the models every host can
//!   run, each host's level and what it lacks for the next ones, the groups of hosts with an
//!   identical CPU (where a `host-passthrough` guest may migrate), aarch64 included.
//! * [`cluster_cpu`] is the cluster's CPU a policy's `cpu.model = "baseline"` gives guests (the
//!   plan takes it in [`crate::pipeline`]), and its fingerprint.
//! * [`watch`] remembers the last cluster CPU seen on this host, so a change (a host joined, left
//!   or changed) is logged once, with the host responsible, and counted for the metrics.
//!
//! The views of a cluster are with the other views: [`crate::cluster_view`] (text, JSON, a policy
//! rule, `nova.conf`, `agent.properties`) and [`crate::placement`] (Nova placement traits and
//! CloudStack host tags). Nothing here calls libvirt: like the rest of the tool, host facts come
//! from files.

pub mod analysis;
pub mod cluster_cpu;
pub mod hosts;
pub mod watch;

use crate::cpu::CpuError;
use std::path::{Path, PathBuf};

pub use analysis::{ClusterOptions, ClusterReport, analyze};

/// The cluster report of the hosts described by `paths` (files or directories of facts files),
/// with libvirt's cpu_map at `cpu_map` (read only when a host is x86). This is the one call a
/// caller needs: `virt-cpu-policy baseline` and a policy's `cpu.model = "baseline"`
/// ([`cluster_cpu::ClusterCpu::of`]).
///
/// # Errors
/// [`CpuError`] for unreadable or unknown input and for hosts without a common CPU.
pub fn baseline_from_files(
    paths: &[PathBuf],
    cpu_map: &Path,
    opts: &ClusterOptions,
) -> Result<ClusterReport, CpuError> {
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
) -> Result<ClusterReport, CpuError> {
    let map = if hosts.iter().any(|h| crate::libvirt::arch::is_x86(&h.arch)) {
        Some(crate::libvirt::cpu_map::x86::X86Map::load(cpu_map)?)
    } else {
        None
    };
    analyze(hosts, map.as_ref(), opts)
}
