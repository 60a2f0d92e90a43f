//! Integration tests, built as one binary (STYLE.md): they run the real `virt-cpu-policy` binary.
//!
//! Tests that need a running libvirtd are `#[ignore]`d so a plain `cargo test` reports them as
//! ignored rather than passing; `.ci/run` starts libvirtd and runs them with `--include-ignored`.

mod audit;
mod cli;
mod cluster;
mod cluster_oracle;
mod corpus;
#[cfg(feature = "daemon")]
mod daemon;
mod differential;
mod docs;
mod generations;
mod golden;
mod harness;
mod hook;
mod hostile;
mod journal;
mod libvirt;
mod machines;
mod modes;
mod oracles;
mod props;
mod tables;
