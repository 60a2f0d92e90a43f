//! `virt-cpu-policyd`: keeps the *stored* definitions of persistent guests conforming.
//!
//! On a plain libvirt host the stored definition is the one place a rewrite of `<cpu>` and
//! `<vcpu>` takes effect (a hook cannot change them: libvirt ignores a hook's output at start and
//! refuses any ABI change on migrate and restore, libvirt's `docs/hooks.rst`). This module is
//! the only part of the project that talks to libvirt, through the `virt` crate (libvirt's own
//! bindings). It reads each definition *with secrets* (`VIR_DOMAIN_XML_INACTIVE |
//! VIR_DOMAIN_XML_SECURE`, so a VNC password survives the round trip), rewrites it with
//! [`crate::rewrite`], backs the old one up (mode 0600) and defines the new one.
//!
//! The daemon listens for libvirt's lifecycle events (`VIR_DOMAIN_EVENT_DEFINED`) and reconciles
//! the guest at once, reconciles everything at start, on a timer, after SIGHUP and after a
//! reconnect, and writes the host-fact snapshot the hook reads (this host's `<hostFacts>` file
//! and the domcapabilities the guests use) atomically under `/var/lib/virt-cpu-policy/`.
//!
//! With `--publish DIR` (or `[host] publish`) it also writes this host's `<hostFacts>` file
//! ([`host_facts`]: `virsh capabilities`, the domcapabilities of the host's own arch and the
//! libvirt version) to `DIR/<hostname>.xml`, atomically, at start and whenever it changes: the
//! cluster's facts for `virt-cpu-policy baseline` and `[host] cluster`, collected on shared
//! storage without a service of their own.
//!
//! With `--metrics-file PATH` it writes Prometheus gauges and counters ([`crate::metrics`]) to
//! PATH, atomically, after every reconciliation; each decision is logged with the journal fields
//! of [`crate::log::decision`].
//!
//! One concern a file: the command line (`cli.rs`); applying the policy to one stored definition
//! (`apply.rs`); this host's facts written to the snapshot and published (`snapshot.rs`); the
//! libvirt session, where every call into libvirt's C library (event callbacks, error handler,
//! the raw flags) is made (`session.rs`); the event-driven loop (`serve.rs`); the figures the
//! metrics are rendered from (`fleet.rs`).

mod apply;
mod cli;
mod guest_states;
mod serve;
mod session;
mod snapshot;

pub use apply::{Applied, COMES_BACK, COMES_BACK_WITHIN, Replaced, Report, apply_one};
pub use cli::{ApplyArgs, BACKUP_DIR, Cli, Command, DaemonArgs};
pub use snapshot::{
    PublishTo, Published, SNAPSHOT_FACTS, host_facts, publish_guests, published_path,
    write_snapshot,
};

use clap::Parser;

/// Parse the command line and run; returns the exit code.
#[must_use]
pub fn main() -> i32 {
    let cli = Cli::parse();
    match &cli.command {
        Command::Apply(a) => apply::cmd_apply(&cli, a),
        Command::Daemon(a) => serve::cmd_daemon(&cli, a),
        Command::Publish => snapshot::cmd_publish(&cli),
    }
}
