//! virt-cpu-policy: the guest CPU of libvirt domains as a declared, checked policy.
//!
//! A host's policy (TOML, [`policy`]) says what every guest must get: CPU mode, model and
//! features, a minimum x86-64 psABI level, the vCPU maximum. [`rewrite::rewrite`] edits a
//! domain's XML to reach it with the smallest possible change (one `<cpu>`, untouched bytes kept),
//! and [`validate`] checks the result the way libvirt and QEMU will. Host facts come from files
//! only ([`host`]): the libvirt hook must never call back into libvirt.
//!
//! Data flows one way, and the modules below are listed in that order, in layers
//! (ARCHITECTURE.md; none imports one listed after it: `cargo xtask layers` checks it):
//! shared records, libvirt's documents ([`libvirt`], one reader each), CPU knowledge, the
//! domain, facts (cluster, plan, host, domain) and one [`pipeline::Pipeline`] per domain, the
//! judges (validate, destination, rewrite), the verdict, the views, then the front ends (hook,
//! daemon, command line) that drive it.
#![deny(missing_docs)]

// Shared records and knowledge, imported by everything below them. (Blank lines keep rustfmt
// from sorting the modules: the order is the import order.)
pub mod finding;
pub mod parallel;
pub mod progress;
pub mod readfile;

pub mod change;
pub mod error;
pub mod stdio;

// Files replaced atomically (`rewrite --in-place`, the daemon's snapshot, published facts and
// metrics), and state files shared by the hook and the daemon: one writer at a time.
pub mod writefile;

pub mod lockfile;

pub mod xml;

// libvirt's documents and words, then what the tool knows of CPUs, machines and modes.
pub mod libvirt;
// The stack's known hazards, as data: reads libvirt's version types only.
pub mod hazards;

pub mod cpu;
pub mod modes;
pub mod vcpu_limits;

// The document.
pub mod domain;
pub mod guest_cpu;
pub mod guest_os;
pub mod topology;

pub mod apic_id;

// A cluster's hosts and the CPU they share (a plan's `cpu.model = "baseline"`).
pub mod cluster;

// The plan.
pub mod policy;

// Host facts: where they come from, then the ones one domain needs, then the domain with its
// plan and facts, ready to be judged.
pub mod host;

pub mod tcg_facts;
// What an AMD IOMMU needs above 255 vCPUs, and the QEMU release that gives it.
pub mod amd_iommu;

pub mod domain_facts;

pub mod pipeline;

// The edits, the checks of a result, then the desired CPU/vCPU (the rewrite validates what it
// writes) and the verdict on it.
pub mod edit;

pub mod validate;

pub mod destination;

pub mod rewrite;

pub mod verdict;

// Where decisions go (the journal, a log file), and the hook's decisions counted in a state
// file for the daemon's metrics.
pub mod log;

pub mod hook_decisions;

// The views (Prometheus metrics, `audit` over stored definitions, the fleet), then the front
// ends.
pub mod metrics;

pub mod audit;

pub mod fleet;

pub mod cluster_view;
pub mod placement;

pub mod hook;

#[cfg(feature = "daemon")]
pub mod daemon;

pub mod cli;

#[cfg(test)]
mod testdata;

pub use error::{Error, Result};
