//! The command line of `virt-cpu-policyd` (clap).

use crate::hook::SNAPSHOT_DIR;
use crate::libvirt::version::LibvirtVersion;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// Where backups of replaced definitions go.
pub const BACKUP_DIR: &str = "/var/lib/virt-cpu-policy/backups";

/// The parsed command line of `virt-cpu-policyd`.
#[derive(Debug, Parser)]
#[command(
    name = "virt-cpu-policyd",
    version,
    about = "Keep the stored definitions of persistent libvirt guests conforming to the CPU policy"
)]
pub struct Cli {
    /// libvirt connection URI.
    #[arg(long, global = true, default_value = "qemu:///system")]
    pub uri: String,
    /// Policy file (default: /etc/virt-cpu-policy/policy.toml if it exists, else the built-in one).
    #[arg(long, global = true, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Where backups of replaced definitions go.
    #[arg(long, global = true, value_name = "DIR", default_value = BACKUP_DIR)]
    pub backup_dir: PathBuf,
    /// Where the host-fact snapshot is written (and read).
    #[arg(long, global = true, value_name = "DIR", default_value = SNAPSHOT_DIR)]
    pub snapshot_dir: PathBuf,
    /// Publish this host's facts (a `<hostFacts>` file: capabilities, domcapabilities per virt
    /// type, libvirt version) as `DIR/<hostname>.xml` and its guests' facts as
    /// `DIR/<hostname>.guests.xml`, atomically, at start and after each full reconciliation
    /// when they changed (for `virt-cpu-policy baseline`, `fleet` and `[host] cluster` on every
    /// host). Default: the policy's `[host] publish`, else not published.
    #[arg(long, global = true, value_name = "DIR")]
    pub publish: Option<PathBuf>,
    /// The host's name in the published facts (`DIR/NAME.xml`, `DIR/NAME.guests.xml`), instead
    /// of libvirt's (`virConnectGetHostname`): the name `virt-cpu-policy fleet` knows the host
    /// by.
    #[arg(long, global = true, value_name = "NAME")]
    pub host_name: Option<String>,
    /// libvirt's stored definitions, read as files for the published guest facts.
    #[arg(long, global = true, value_name = "DIR", default_value = crate::fleet::guest::CONFIG_DIR)]
    pub guest_config_dir: PathBuf,
    /// libvirt's status files of running guests (their live CPU), read as files for the
    /// published guest facts.
    #[arg(long, global = true, value_name = "DIR", default_value = crate::fleet::guest::STATE_DIR)]
    pub guest_state_dir: PathBuf,
    /// `daemon`: write Prometheus metrics (text format 0.0.4) to this file after every
    /// reconciliation, atomically (for node_exporter's textfile collector, e.g.
    /// /var/lib/prometheus/node-exporter/virt_cpu_policy.prom). Default: none.
    #[arg(long, global = true, value_name = "PATH")]
    pub metrics_file: Option<PathBuf>,
    /// Apply the rules of this libvirt version (MAJOR.MINOR.MICRO) instead of the connected
    /// libvirtd's (e.g. `apply --dry-run` before an upgrade). The snapshot and the published
    /// facts keep the connected libvirtd's version.
    #[arg(long, global = true, value_name = "VERSION")]
    pub libvirt_version: Option<LibvirtVersion>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Rewrite stored definitions once and report per guest.
    Apply(ApplyArgs),
    /// Run until SIGTERM, keeping every persistent guest conforming.
    Daemon(DaemonArgs),
    /// Publish this host's facts and its guests' facts to the `--publish` directory once, and
    /// exit (for `virt-cpu-policy fleet`; no snapshot, no policy applied).
    Publish,
}

/// `apply` options.
#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// Print the diffs; define nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Every persistent guest.
    #[arg(long, conflicts_with = "names")]
    pub all: bool,
    /// Guest names.
    #[arg(required_unless_present = "all")]
    pub names: Vec<String>,
}

/// The longest `--interval`, in minutes: a year.
const MAX_INTERVAL_MINUTES: u64 = 365 * 24 * 60;

/// `daemon` options.
#[derive(Debug, Args)]
pub struct DaemonArgs {
    /// Minutes between full reconciliations (besides start, SIGHUP and reconnects), 1 to 525600
    /// (a year).
    // Bounded so the interval in seconds, and the instant it ends, fit: a larger value overflowed
    // (a panic, or in a release build a wrapped, far shorter interval).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=MAX_INTERVAL_MINUTES))]
    pub interval: u64,
}
