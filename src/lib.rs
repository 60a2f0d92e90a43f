//! virt-cpu-policy: the guest CPU of libvirt domains as a declared, checked policy.
//!
//! A host's policy (TOML, [`policy`]) says what every guest must get: CPU mode, model and
//! features, a minimum x86-64 psABI level, the vCPU maximum. [`rewrite::rewrite`] edits a
//! domain's XML to reach it with the smallest possible change (one `<cpu>`, untouched bytes kept),
//! and [`validate`] checks the result the way libvirt and QEMU will. Host facts come from files
//! only ([`host`]): the libvirt hook must never call back into libvirt.
//!
//! Data flows one way, and the modules below are listed in that order (none imports one listed
//! after it): domain → policy plan → host facts → desired CPU/vCPU → edits, validated, then the
//! front ends (hook, daemon, command line) that drive it.
#![deny(missing_docs)]

// Shared records and knowledge, imported by everything below them.
pub mod change;
pub mod cpu;
pub mod error;
pub mod finding;
pub mod machine;
pub mod modes;
pub mod stdio;

// The document.
pub mod domain;
pub mod topology;

// The plan.
pub mod policy;

// Host facts: where they come from, then the ones one domain needs, then a cluster's.
pub mod cluster;
pub mod facts;
pub mod host;

// The checks of a result, then the desired CPU/vCPU and the edits that reach it (the rewrite
// validates what it writes).
pub mod edit;
pub mod report;
pub mod rewrite;
pub mod validate;

// The verdict on one domain, the fleet view (Prometheus metrics, `audit` over stored
// definitions), then the front ends.
pub mod audit;
pub mod cli;
#[cfg(feature = "daemon")]
pub mod daemon;
pub mod hook;
pub mod log;
pub mod metrics;

pub use error::{Error, Result};
