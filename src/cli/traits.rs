//! `virt-cpu-policy traits`: each host's psABI levels and the cluster's CPU as Nova placement
//! traits (a provider config document) or CloudStack host tags, from the facts `baseline` reads.
//!
//! Exit codes, as `baseline`'s: 0 done; 1 no cluster CPU to name (off x86, or no CPU common to
//! the hosts), one line on stderr and nothing on stdout; 2 bad usage or input (one line on
//! stderr, nothing on stdout).

use super::cluster::map_for;
use super::{EXIT_BAD_INPUT, EXIT_OK, EXIT_REFUSED, Failure, write_stdout};
use crate::cluster::{ClusterOptions, analyze, hosts};
use crate::placement::{
    HostTraits, TraitsError, cluster_traits, render_cloudstack, render_json, render_nova,
};
use clap::{Args, ValueEnum};
use std::path::PathBuf;

/// `traits` options.
#[derive(Debug, Args)]
pub struct TraitsArgs {
    /// libvirt's cpu_map directory (default /usr/share/libvirt/cpu_map); use the cpu_map of the
    /// libvirt the hosts run.
    #[arg(long, value_name = "DIR")]
    pub cpu_map: Option<PathBuf>,
    /// Output: a Nova provider config document (schema 1.0, for `[compute]
    /// provider_config_location`), CloudStack `host.tags=` lines (agent.properties), or one JSON
    /// object.
    #[arg(long, value_enum, default_value = "nova")]
    pub format: TraitsFormat,
    /// Only this host (its facts' name): a document with its provider alone, or its
    /// `host.tags=` line alone. The cluster CPU is still that of every host given.
    #[arg(long, value_name = "NAME")]
    pub host: Option<String>,
    /// Host facts, as `baseline` reads them: `virsh domcapabilities`, `virsh capabilities`, a
    /// host `<cpu>` or a `<hostFacts>` file (what `virt-cpu-policyd --publish` writes), one file
    /// per host, or directories of such `*.xml` files.
    #[arg(value_name = "FACTS", required = true)]
    pub facts: Vec<PathBuf>,
}

/// The `--format` values of `traits`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum TraitsFormat {
    /// A Nova provider config YAML document (schema version 1.0).
    Nova,
    /// CloudStack `host.tags=` lines for agent.properties.
    Cloudstack,
    /// One JSON object.
    Json,
}

impl From<TraitsError> for Failure {
    fn from(e: TraitsError) -> Self {
        Failure {
            code: match e {
                TraitsError::NoBaseline { .. } => EXIT_REFUSED,
                TraitsError::NameTooLong { .. } => EXIT_BAD_INPUT,
            },
            message: Some(e.to_string()),
        }
    }
}

/// Runs `traits`.
pub(super) fn cmd_traits(a: &TraitsArgs) -> Result<i32, Failure> {
    let hosts = hosts::read_hosts(&a.facts)?;
    let map = map_for(&hosts, a.cpu_map.as_deref())?;
    // The CPU `cpu.model = "baseline"` gives guests (cluster::cpu): for guests that migrate,
    // vendor-neutral across a vendor mix.
    let opts = ClusterOptions {
        migratable: true,
        strict_vendor: false,
    };
    let report = analyze(&hosts, map.as_ref(), &opts)?;
    let traits = cluster_traits(&report)?;
    let chosen: Vec<&HostTraits> = match &a.host {
        None => traits.hosts.iter().collect(),
        Some(name) => {
            let Some(h) = traits.hosts.iter().find(|h| &h.name == name) else {
                let names: Vec<&str> = traits.hosts.iter().map(|h| h.name.as_str()).collect();
                return Err(Failure {
                    code: EXIT_BAD_INPUT,
                    message: Some(format!(
                        "--host {name}: no such host among the facts (hosts: {})",
                        names.join(", ")
                    )),
                });
            };
            vec![h]
        }
    };
    let text = match a.format {
        TraitsFormat::Nova => render_nova(&traits, &chosen)?,
        TraitsFormat::Cloudstack => render_cloudstack(&traits, &chosen),
        TraitsFormat::Json => render_json(&traits, &chosen),
    };
    write_stdout(text.as_bytes())?;
    Ok(EXIT_OK)
}
