//! virt-cpu-policy: the guest CPU of libvirt domains as a declared, checked policy.
//!
//! A host's policy (TOML, [`policy`]) says what every guest must get: CPU mode, model and
//! features, a minimum x86-64 psABI level. [`rewrite::rewrite`] edits a domain's XML to reach it
//! with the smallest possible change (one `<cpu>`, untouched bytes kept), and [`validate`] checks
//! the result the way libvirt and QEMU will. Host facts come from files only ([`host`]): the
//! libvirt hook must never call back into libvirt.
//!
//! Data flows one way: [`domain`] (a read-only view of the document) and [`policy::Plan`] go into
//! [`rewrite`], which produces [`edit`] splices and a new document, which [`validate`] judges.
#![deny(missing_docs)]

pub mod cli;
pub mod cluster;
pub mod cpu;
#[cfg(feature = "daemon")]
pub mod daemon;
pub mod domain;
pub mod edit;
pub mod error;
pub mod finding;
pub mod hook;
pub mod host;
pub mod log;
pub mod machine;
pub mod policy;
pub mod rewrite;
pub mod validate;
pub mod vcpu;

pub use error::{Error, Result};
