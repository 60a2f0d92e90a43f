//! Integration tests, built as one binary (as ripgrep and just do: one link, one harness): they
//! run the real `virt-cpu-policy` binary.
//!
//! Tests that need a running libvirtd are `#[ignore]`d so a plain `cargo test` reports them as
//! ignored rather than passing; `.ci/run` starts libvirtd and runs them with `--include-ignored`.

// Cargo.toml's [lints] hold the tool's code; this crate's helpers are `pub` for their sibling
// modules, and its scenarios and tables are held to clippy's `all` group, not `pedantic`.
#![allow(unreachable_pub, clippy::pedantic)]

mod amd_iommu;
mod as_found;
mod audit;
mod cli;
mod cluster;
mod cluster_oracle;
mod corpus;
#[cfg(feature = "daemon")]
mod daemon;
mod differential;
mod docs;
mod fleet;
mod generations;
mod golden;
mod harness;
mod hook;
mod hostcpu;
mod hostile;
mod journal;
mod kvm;
mod kvm_truth;
mod libvirt;
mod machines;
mod modes;
mod operator;
mod oracles;
mod producer_floors;
mod producers;
mod props;
mod tables;
mod tcg;
mod upgrades;
