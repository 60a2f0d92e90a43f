//! `virt-cpu-policy baseline` and `virt-cpu-policy compare`: the glue from the command line to
//! [`crate::cluster`] and the exit codes.
//!
//! Exit codes, as the other commands': 0 done; 1 an answer about the hosts: `--min-level` not
//! reached, a guest of `--guests` whose OS floor the cluster's CPU misses, no CPU common to the
//! hosts, or (compare) a guest that cannot run there, with one line on stderr and the report
//! still on stdout; 2 bad usage or input (one line on stderr, nothing on
//! stdout).

use super::{EXIT_BAD_INPUT, EXIT_OK, EXIT_REFUSED, Failure, Format, read_input, write_stdout};
use crate::cluster::{ClusterOptions, analyze, hosts};
use crate::cluster_view::{BaselineFormat, render, render_compare};
use crate::cpu::CpuError;
use crate::cpu::Level;
use crate::libvirt::arch::is_x86;
use crate::libvirt::cpu_map::x86::X86Map;
use clap::{Args, ValueEnum};
use std::path::{Path, PathBuf};

/// `baseline` options.
#[derive(Debug, Args)]
pub struct BaselineArgs {
    /// Exit 1 unless every host reaches this x86-64 psABI level (x86-64-v1 … x86-64-v4); the
    /// report names the hosts that block it and what each lacks.
    #[arg(long, value_name = "LEVEL")]
    pub min_level: Option<Level>,
    /// libvirt's cpu_map directory (default /usr/share/libvirt/cpu_map); use the cpu_map of the
    /// libvirt the hosts run.
    #[arg(long, value_name = "DIR")]
    pub cpu_map: Option<PathBuf>,
    /// Leave out the features libvirt marks migratable='no' (invtsc), as `virsh cpu-baseline
    /// --migratable` does: a guest with them cannot be live-migrated.
    #[arg(long)]
    pub migratable: bool,
    /// Refuse hosts of different vendors, as libvirt does ("CPU vendors do not match"), instead of
    /// computing a vendor-neutral baseline.
    #[arg(long)]
    pub strict_vendor: bool,
    /// Output: a report (text), one JSON object, a policy file (toml), nova.conf lines (nova) or
    /// CloudStack agent.properties lines (cloudstack).
    #[arg(long, value_enum, default_value = "text")]
    pub format: BaselineFormatArg,
    /// The cluster's guests (guest facts, `virt-cpu-policyd --publish`'s `HOST.guests.xml`;
    /// domain XML; or directories of them; repeatable): exit 1 naming each whose OS needs more
    /// than the cluster's CPU gives (its floor, docs/os-floor.md).
    #[arg(long, value_name = "FACTS")]
    pub guests: Vec<PathBuf>,
    /// Host facts: `virsh domcapabilities`, `virsh capabilities`, a host `<cpu>` or a
    /// `<hostFacts>` file (what `virt-cpu-policyd --publish` writes), one file per host, or
    /// directories of such `*.xml` files.
    #[arg(value_name = "FACTS", required = true)]
    pub facts: Vec<PathBuf>,
}

/// The `--format` values of `baseline`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum BaselineFormatArg {
    /// A report for people.
    Text,
    /// One JSON object.
    Json,
    /// A policy file whose rule gives guests the baseline.
    Toml,
    /// `[libvirt] cpu_mode / cpu_models / cpu_model_extra_flags` for nova.conf.
    Nova,
    /// `guest.cpu.mode / guest.cpu.model / guest.cpu.features` for agent.properties.
    Cloudstack,
}

/// `compare` options.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The host's facts file (`virsh domcapabilities`, `virsh capabilities`, a host `<cpu>` or a
    /// `<hostFacts>` file).
    #[arg(long, value_name = "FACTS")]
    pub host: PathBuf,
    /// libvirt's cpu_map directory (default /usr/share/libvirt/cpu_map).
    #[arg(long, value_name = "DIR")]
    pub cpu_map: Option<PathBuf>,
    /// Report format.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// The domain XML (its first `<cpu>` is judged) or a bare `<cpu>`, or - for stdin.
    #[arg(value_name = "DOMAIN", default_value = "-")]
    pub domain: PathBuf,
}

impl From<CpuError> for Failure {
    fn from(e: CpuError) -> Self {
        Failure {
            code: if e.is_incompatible() {
                EXIT_REFUSED
            } else {
                EXIT_BAD_INPUT
            },
            message: Some(e.to_string()),
        }
    }
}

/// libvirt's x86 map at `dir`, or the default one; a missing default is said plainly.
fn load_map(dir: Option<&Path>) -> Result<X86Map, Failure> {
    let default = Path::new(crate::libvirt::cpu_map::DEFAULT_CPU_MAP);
    if dir.is_none() && !default.join("index.xml").is_file() {
        return Err(Failure {
            code: EXIT_BAD_INPUT,
            message: Some(format!(
                "libvirt's cpu_map is not at {} (libvirt not installed?): give --cpu-map DIR; x86 clusters are computed on libvirt's CPUID data, which the built-in model table lacks",
                default.display()
            )),
        });
    }
    Ok(X86Map::load(dir.unwrap_or(default)).map_err(CpuError::from)?)
}

/// The x86 map `analyze` needs for `hosts`: libvirt's at `dir` (or the default) when a host is
/// x86, none otherwise (other arches are grouped by their host CPU, without a map).
pub(super) fn map_for(
    hosts: &[hosts::ClusterHost],
    dir: Option<&Path>,
) -> Result<Option<X86Map>, Failure> {
    if hosts.iter().any(|h| is_x86(&h.arch)) {
        load_map(dir).map(Some)
    } else {
        Ok(None)
    }
}

/// Runs `baseline`.
pub(super) fn cmd_baseline(a: &BaselineArgs) -> Result<i32, Failure> {
    let hosts = hosts::read_hosts(&a.facts)?;
    let x86 = hosts.iter().any(|h| is_x86(&h.arch));
    if let (Some(_), false) = (a.min_level, x86) {
        return Err(Failure {
            code: EXIT_BAD_INPUT,
            message: Some(format!(
                "--min-level is an x86-64 psABI level; these hosts are {}",
                hosts[0].arch
            )),
        });
    }
    let map = map_for(&hosts, a.cpu_map.as_deref())?;
    let opts = ClusterOptions {
        migratable: a.migratable,
        strict_vendor: a.strict_vendor,
    };
    let report = analyze(&hosts, map.as_ref(), &opts)?;
    let format = match a.format {
        BaselineFormatArg::Text => BaselineFormat::Text,
        BaselineFormatArg::Json => BaselineFormat::Json,
        BaselineFormatArg::Toml => BaselineFormat::Toml,
        BaselineFormatArg::Nova => BaselineFormat::Nova,
        BaselineFormatArg::Cloudstack => BaselineFormat::CloudStack,
    };
    let below = guests_below_floor(&a.guests, &report)?;
    write_stdout(render(&report, format).as_bytes())?;
    let reached = report
        .level
        .map_or_else(|| "not even x86-64-v1".to_string(), |l| format!("only {l}"));
    let mut code = EXIT_OK;
    if let Some(min) = a.min_level.filter(|m| report.level < Some(*m)) {
        let blockers: Vec<String> = report
            .blocking(min)
            .iter()
            .map(|(h, lacks)| format!("{h} (missing {})", lacks.join(", ")))
            .collect();
        crate::stdio::message_line(&format!(
            "virt-cpu-policy: the cluster does not reach {min} ({reached}) because of host(s) {}",
            blockers.join(", ")
        ));
        code = EXIT_REFUSED;
    }
    if !below.is_empty() {
        crate::stdio::message_line(&format!(
            "virt-cpu-policy: the cluster's CPU ({reached}) is below the OS floor of {} guest(s): {}",
            below.len(),
            below.join("; ")
        ));
        code = EXIT_REFUSED;
    }
    Ok(code)
}

/// The guests of `paths` whose OS needs more than the cluster's CPU of `report` gives
/// ([`crate::guest_os::Floor`]), each as `NAME (OS needs X; missing A, B)`. Guests whose domain
/// names no OS, or an OS without a known floor, are not judged; off x86 nothing is.
fn guests_below_floor(
    paths: &[PathBuf],
    report: &crate::cluster::ClusterReport,
) -> Result<Vec<String>, Failure> {
    if paths.is_empty() || report.baseline.is_none() {
        return Ok(Vec::new());
    }
    let guests = crate::fleet::Fleet::read_guests(paths)?;
    let has: std::collections::BTreeSet<&str> =
        report.features.iter().map(String::as_str).collect();
    Ok(guests
        .iter()
        .filter_map(|g| {
            let dom = crate::domain::Domain::parse(&g.domain, &g.source).ok()?;
            let os = crate::guest_os::GuestOs::of(dom.root())?;
            let floor = os.floor()?;
            let missing = floor.missing(|f| has.contains(f));
            (!missing.is_empty()).then(|| {
                format!(
                    "{} ({} needs {}; missing {})",
                    g.name,
                    os.short(),
                    floor.needs(),
                    missing.join(", ")
                )
            })
        })
        .collect())
}

/// Runs `compare`.
pub(super) fn cmd_compare(a: &CompareArgs) -> Result<i32, Failure> {
    let host = hosts::read_host(&a.host)?;
    let (bytes, what) = read_input(&a.domain)?;
    let text = crate::xml::decode(&bytes, &what)?;
    let guest_path = PathBuf::from(&what);
    let guest = crate::guest_cpu::guest_cpu(text, &guest_path)?;
    if !is_x86(&host.arch) {
        return Err(CpuError::Facts {
            path: host.path,
            message: format!(
                "compare judges x86 hosts (libvirt's x86Compute); this host is {}",
                host.arch
            ),
        }
        .into());
    }
    let map = load_map(a.cpu_map.as_deref())?;
    let result = hosts::compare(&map, &host, &guest, &guest_path)?;
    let json = matches!(a.format, Format::Json);
    write_stdout(render_compare(&host, &guest, &result, json).as_bytes())?;
    if result.verdict == crate::cpu::compare::Compatibility::Incompatible {
        crate::stdio::message_line(&format!(
            "virt-cpu-policy: the guest CPU cannot run on host {}: {}",
            host.name,
            result.message.as_deref().unwrap_or("incompatible")
        ));
        return Ok(EXIT_REFUSED);
    }
    Ok(EXIT_OK)
}
