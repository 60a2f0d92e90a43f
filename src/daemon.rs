//! `virt-cpu-policyd`: keeps the *stored* definitions of persistent guests conforming.
//!
//! On a plain libvirt host the stored definition is the one place a rewrite of `<cpu>` and
//! `<vcpu>` takes effect (a hook cannot change them: DESIGN.md sections 2 and 4). This module is
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

use crate::hook::SNAPSHOT_DIR;
use crate::host::{Host, HostOptions, Sourced};
use crate::libvirt::version::LibvirtVersion;
use crate::metrics::FailureReason;
use crate::policy::Policy;
use crate::report::Verdict;
use crate::rewrite::rewrite;
use clap::{Args, Parser, Subcommand};
use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::os::raw::{c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use virt::connect::Connect;
use virt::domain::Domain as VirDomain;
use virt::sys;

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
    /// Publish this host's facts (a `<hostFacts>` file: capabilities, domcapabilities, libvirt
    /// version) as `DIR/<hostname>.xml`, atomically, at start and after each full reconciliation
    /// when they changed (for `virt-cpu-policy baseline` and `[host] cluster` on every host).
    /// Default: the policy's `[host] publish`, else not published.
    #[arg(long, global = true, value_name = "DIR")]
    pub publish: Option<PathBuf>,
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

/// `daemon` options.
#[derive(Debug, Args)]
pub struct DaemonArgs {
    /// Minutes between full reconciliations (besides start, SIGHUP and reconnects).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub interval: u64,
}

/// What happened to one guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    /// Already conforming.
    Unchanged,
    /// Rewritten (or, under `--dry-run`, would be); `running`: the change applies at its next cold
    /// boot.
    Changed {
        /// Whether the guest is running.
        running: bool,
        /// The backup of the old definition (None under `--dry-run`).
        backup: Option<PathBuf>,
        /// Unified diff of old and new definition.
        diff: String,
    },
    /// Cannot be made to conform, or libvirt refused the new definition.
    Refused(String),
    /// A transient guest: it has no stored definition; left alone.
    Transient,
}

fn xml_flags() -> sys::virDomainXMLFlags {
    sys::VIR_DOMAIN_XML_INACTIVE | sys::VIR_DOMAIN_XML_SECURE
}

/// What [`apply_judged`] found: the [`Report`], and for the metrics and the journal the stored
/// definition's verdict as `check` gives it, the rules involved and why it failed, if it did.
#[derive(Debug, Clone)]
pub struct Applied {
    /// What happened.
    pub report: Report,
    /// The verdict on the definition as read; None when it was not judged (transient, or it
    /// could not be read or parsed).
    pub verdict: Option<Verdict>,
    /// The rules involved ([`crate::audit::rules_involved`]; none for a conforming guest).
    pub rules: Vec<String>,
    /// The first error finding's code, or the error's ([`crate::Error::code`]).
    pub code: Option<&'static str>,
    /// Why the guest could not be made to conform;
    /// None when it conforms now, or merely would change (dry run, audit mode).
    pub failure: Option<FailureReason>,
}

impl Applied {
    /// A guest that was not judged: transient, or its definition could not be read or parsed.
    fn unjudged(
        report: Report,
        code: Option<&'static str>,
        failure: Option<FailureReason>,
    ) -> Applied {
        Applied {
            report,
            verdict: None,
            rules: Vec::new(),
            code,
            failure,
        }
    }

    /// The verdict of the stored definition *after* this step: a rewritten one conforms.
    #[must_use]
    pub fn verdict_after(&self) -> Option<Verdict> {
        match self.report {
            Report::Changed {
                backup: Some(_), ..
            } => Some(Verdict::Conforms),
            _ => self.verdict,
        }
    }
}

/// Rewrite one guest's stored definition.
pub fn apply_one(
    conn: &Connect,
    dom: &VirDomain,
    policy: &Policy,
    host: &Host,
    backup_dir: &Path,
    dry_run: bool,
) -> Report {
    apply_judged(conn, dom, policy, host, backup_dir, dry_run).report
}

/// [`apply_one`], with what the metrics and the journal need ([`Applied`]).
pub fn apply_judged(
    conn: &Connect,
    dom: &VirDomain,
    policy: &Policy,
    host: &Host,
    backup_dir: &Path,
    dry_run: bool,
) -> Applied {
    let (name, xml) = match stored_definition(dom) {
        Ok(d) => d,
        Err(unjudged) => return *unjudged,
    };
    let outcome = match rewrite(&xml, &format!("the definition of '{name}'"), policy, host) {
        Ok(o) => o,
        Err(e) => {
            return Applied::unjudged(
                Report::Refused(e.to_string()),
                Some(e.code()),
                Some(FailureReason::Unreadable),
            );
        }
    };
    let error = outcome
        .findings
        .iter()
        .find(|f| f.severity == crate::finding::Severity::Error);
    let (report, failure) = if let Some(f) = error {
        let cannot = FailureReason::CannotConform;
        (Report::Refused(f.to_string()), Some(cannot))
    } else if !outcome.changed {
        (Report::Unchanged, None)
    } else if policy.mode == crate::policy::Mode::Audit {
        let why = "would change, but the policy's mode is audit";
        (Report::Refused(why.into()), None)
    } else {
        let new = &outcome.output;
        define_rewritten(conn, dom, &name, &xml, new, backup_dir, dry_run)
    };
    Applied {
        report,
        verdict: Some(Verdict::of(&outcome)),
        rules: crate::audit::rules_involved(&outcome, &crate::policy::Plan::default()),
        code: error.map(|f| f.code.as_str()),
        failure,
    }
}

/// A persistent guest's name and stored definition (with secrets); else what [`apply_judged`]
/// reports for it (a transient guest, or one libvirt cannot give).
fn stored_definition(dom: &VirDomain) -> Result<(String, String), Box<Applied>> {
    let unreadable = |why: String| {
        let r = Report::Refused(why);
        Box::new(Applied::unjudged(
            r,
            Some("libvirt"),
            Some(FailureReason::Unreadable),
        ))
    };
    match dom.is_persistent() {
        Ok(true) => {}
        Ok(false) => return Err(Box::new(Applied::unjudged(Report::Transient, None, None))),
        Err(e) => return Err(unreadable(format!("libvirt: {e}"))),
    }
    let name = dom.name().unwrap_or_default();
    let xml = dom
        .xml_desc(xml_flags())
        .map_err(|e| unreadable(format!("cannot read the definition: {e}")))?;
    Ok((name, xml))
}

/// Back the guest's `old` definition up and define the `new` one (under `dry_run`, neither):
/// the report, and the failure reason when the backup or the define failed.
fn define_rewritten(
    conn: &Connect,
    dom: &VirDomain,
    name: &str,
    old: &str,
    new: &str,
    backup_dir: &Path,
    dry_run: bool,
) -> (Report, Option<FailureReason>) {
    let running = dom.is_active().unwrap_or(false);
    let diff = similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .header(&format!("{name} (stored)"), &format!("{name} (conforming)"))
        .to_string();
    if dry_run {
        let changed = Report::Changed {
            running,
            backup: None,
            diff,
        };
        return (changed, None);
    }
    let uuid = dom.uuid_string().unwrap_or_default();
    let backup = match write_backup(backup_dir, name, &uuid, old) {
        Ok(p) => p,
        Err(e) => {
            let why = format!("cannot write the backup, nothing defined: {e}");
            return (Report::Refused(why), Some(FailureReason::Backup));
        }
    };
    match conn.define_domain_xml(new) {
        Ok(_) => (
            Report::Changed {
                running,
                backup: Some(backup),
                diff,
            },
            None,
        ),
        Err(e) => (
            Report::Refused(format!(
                "libvirt refused the rewritten definition (old one kept, backup {}): {e}",
                backup.display()
            )),
            Some(FailureReason::Define),
        ),
    }
}

/// Write `xml` to `DIR/NAME-UUID-TIMESTAMP.xml`, mode 0600 (it holds secrets), directory 0700.
fn write_backup(dir: &Path, name: &str, uuid: &str, xml: &str) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| format!("{}.{:09}", d.as_secs(), d.subsec_nanos()))
        .unwrap_or_default();
    let safe = safe_file_name(name);
    let path = dir.join(format!("{safe}-{uuid}-{stamp}.xml"));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)?;
    f.write_all(xml.as_bytes())?;
    f.sync_all()?;
    Ok(path)
}

/// `s` as a file name: ASCII letters, digits, `-`, `_` and `.` kept, anything else `_`, and no
/// leading `.` (a hidden file, `..`).
fn safe_file_name(s: &str) -> String {
    let safe: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    match safe.strip_prefix('.') {
        Some(rest) => format!("_{rest}"),
        None if safe.is_empty() => "_".into(),
        None => safe,
    }
}

/// Write `data` to `path` atomically unless the file already holds exactly `data` (a reader
/// such as a fleet's collector sees a change only when there is one). Returns whether it wrote.
fn write_if_changed(path: &Path, data: &str) -> std::io::Result<bool> {
    let same = std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() == data.len() as u64)
        && std::fs::read(path).is_ok_and(|old| old == data.as_bytes());
    if same {
        return Ok(false);
    }
    write_atomic(path, data)?;
    Ok(true)
}

/// Write `data` to `path` atomically (temporary file in the same directory, then rename).
fn write_atomic(path: &Path, data: &str) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.tmp.{}",
        path.file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default(),
        std::process::id()
    ));
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(data.as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

/// The snapshot's `<hostFacts>` file: this host's capabilities, domcapabilities and libvirt
/// version ([`host_facts`]), which the hook reads with the rest of the snapshot.
pub const SNAPSHOT_FACTS: &str = "host-facts.xml";

/// What the snapshot held before `<hostFacts>`: `virsh capabilities` alone. Removed when
/// [`SNAPSHOT_FACTS`] is written, so the hook does not read the same facts twice.
const LEGACY_SNAPSHOT_CAPS: &str = "capabilities.xml";

/// This host's facts from the connection: its name, its `<hostFacts>` document
/// ([`crate::libvirt::host_facts::document`]) and the domcapabilities in it.
#[derive(Debug, Clone)]
pub struct Published {
    /// The host's name: libvirt's (`virConnectGetHostname`), else `gethostname(2)`'s.
    pub name: String,
    /// The `<hostFacts>` document.
    pub xml: String,
    /// The domcapabilities it holds (`virsh domcapabilities` of the host's arch for kvm, or for
    /// qemu when KVM is absent, at the default machine type); None when libvirt gave none.
    pub domcaps: Option<String>,
}

/// This host's `<hostFacts>` from libvirt: `virsh capabilities`, the domcapabilities of the
/// host's own arch (from the capabilities' `<host><cpu><arch>`) for kvm, or qemu when KVM is
/// absent, at the default machine type, and the libvirt version (`virConnectGetLibVersion`).
///
/// # Errors
/// libvirt's error when it gives no capabilities or no version, or capabilities that do not
/// parse.
pub fn host_facts(conn: &Connect) -> Result<Published, String> {
    let caps = conn
        .capabilities()
        .map_err(|e| format!("virConnectGetCapabilities: {e}"))?;
    let version = conn
        .lib_version()
        .map_err(|e| format!("virConnectGetLibVersion: {e}"))?;
    let what = "libvirt's capabilities";
    let doc = crate::xml::parse_xml(&caps, what).map_err(|e| e.to_string())?;
    let caps_read = crate::libvirt::capabilities::Capabilities::read(doc.root_element(), what)
        .map_err(|e| format!("{what}: {e}"))?;
    let arch = caps_read.host_arch().map(str::to_string);
    // KVM's host-model CPU is what guests get; without KVM, TCG's.
    let domcaps = ["kvm", "qemu"].into_iter().find_map(|vt| {
        conn.domain_capabilities(None, arch.as_deref(), None, Some(vt), 0)
            .map_err(|e| tracing::debug!(virt_type = vt, error = %e, "no domcapabilities"))
            .ok()
    });
    let name = conn
        .hostname()
        .ok()
        .filter(|n| !n.trim().is_empty())
        .or_else(gethostname)
        .unwrap_or_else(|| "localhost".into());
    let version = LibvirtVersion::from_number(u64::from(version));
    let xml = crate::libvirt::host_facts::document(&name, version, &caps, domcaps.as_deref());
    Ok(Published { name, xml, domcaps })
}

/// The kernel's host name (`gethostname(2)`), when it has one.
fn gethostname() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that many bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    let name = String::from_utf8_lossy(&buf[..end]).trim().to_string();
    (!name.is_empty()).then_some(name)
}

/// `DIR/<hostname>.xml` for this host's published facts.
#[must_use]
pub fn published_path(dir: &Path, host_name: &str) -> PathBuf {
    dir.join(format!("{}.xml", safe_file_name(host_name)))
}

/// Write `facts` as the snapshot's [`SNAPSHOT_FACTS`] (removing the older `capabilities.xml`)
/// and, with `publish`, as `publish/<hostname>.xml` (only that one when `publish` is the
/// snapshot directory); each only when it changed. Returns the snapshot's file when it holds the
/// facts now. Failures are logged.
fn store_host_facts(facts: &Published, snapshot: &Path, publish: Option<&Path>) -> Option<PathBuf> {
    let stored = |path: &Path, what: &str| match write_if_changed(path, &facts.xml) {
        Ok(true) => {
            tracing::info!(path = %path.display(), host = %facts.name, "{what}: this host's facts written");
            true
        }
        Ok(false) => true,
        Err(e) => {
            tracing::error!(path = %path.display(), error = %e, "{what}: cannot write this host's facts");
            false
        }
    };
    // Published into the snapshot directory itself: the published file is the snapshot's (the
    // hook would read the same facts twice).
    let same_dir = publish.is_some_and(|p| {
        let canon = |d: &Path| std::fs::canonicalize(d).ok();
        canon(p).is_some() && canon(p) == canon(snapshot)
    });
    let snap = if same_dir {
        let _ = std::fs::remove_file(snapshot.join(SNAPSHOT_FACTS));
        published_path(snapshot, &facts.name)
    } else {
        snapshot.join(SNAPSHOT_FACTS)
    };
    let in_snapshot = stored(&snap, "snapshot");
    if in_snapshot {
        let legacy = snapshot.join(LEGACY_SNAPSHOT_CAPS);
        if legacy.is_file() && std::fs::remove_file(&legacy).is_ok() {
            tracing::info!(path = %legacy.display(), "removed: {SNAPSHOT_FACTS} holds the capabilities now");
        }
    }
    if let Some(dir) = publish.filter(|_| !same_dir) {
        stored(&published_path(dir, &facts.name), "publish");
    }
    in_snapshot.then_some(snap)
}

/// Write the host-fact snapshot: this host's `<hostFacts>` ([`SNAPSHOT_FACTS`]) and one
/// `domcapabilities-ARCH-MACHINE-TYPE.xml` per (emulator, arch, machine, virt type) the
/// persistent guests use, unless it is the one `<hostFacts>` already holds; with `publish`,
/// the facts are published too. Returns the snapshot's files.
pub fn write_snapshot(conn: &Connect, dir: &Path, publish: Option<&Path>) -> Vec<PathBuf> {
    let mut written = Vec::new();
    let facts = match host_facts(conn) {
        Ok(f) => Some(f),
        Err(e) => {
            tracing::error!(error = %e, "no host facts for the snapshot");
            None
        }
    };
    if let Some(f) = &facts {
        written.extend(store_host_facts(f, dir, publish));
    }
    let mut seen = BTreeSet::new();
    for d in conn.list_all_domains(0).unwrap_or_default() {
        let Ok(xml) = d.xml_desc(sys::VIR_DOMAIN_XML_INACTIVE) else {
            continue;
        };
        let Ok(dom) = crate::domain::Domain::parse(&xml, "definition") else {
            continue;
        };
        if !dom.in_scope() {
            continue;
        }
        let key = (
            dom.emulator(),
            dom.arch().to_string(),
            dom.machine().to_string(),
            dom.virt_type().to_string(),
        );
        if !seen.insert(key.clone()) {
            continue;
        }
        let (emu, arch, machine, vt) = key;
        match conn.domain_capabilities(
            emu.as_deref(),
            Some(&arch).filter(|a| !a.is_empty()).map(String::as_str),
            Some(&machine).filter(|m| !m.is_empty()).map(String::as_str),
            Some(vt.as_str()),
            0,
        ) {
            Ok(dc) => {
                let p = dir.join(format!(
                    "domcapabilities-{}-{}-{}.xml",
                    safe_file_name(&arch),
                    safe_file_name(&machine),
                    safe_file_name(&vt)
                ));
                if facts.as_ref().and_then(|f| f.domcaps.as_deref()) == Some(dc.as_str()) {
                    // The hook would read the same document twice.
                    let _ = std::fs::remove_file(&p);
                    continue;
                }
                match write_if_changed(&p, &dc) {
                    Ok(_) => written.push(p),
                    Err(e) => {
                        tracing::error!(path = %p.display(), error = %e, "cannot write the snapshot")
                    }
                }
            }
            Err(e) => {
                tracing::warn!(arch, machine, virt_type = vt, error = %e, "virConnectGetDomainCapabilities failed")
            }
        }
    }
    written
}

/// Where this host's facts are published: `--publish`, else the policy's `[host] publish`.
fn publish_dir<'a>(cli: &'a Cli, policy: &'a Policy) -> Option<&'a Path> {
    cli.publish.as_deref().or(policy.host.publish.as_deref())
}

/// A handler that drops libvirt's errors: they reach this program as `Result`s and are logged
/// through `tracing` or said once on stderr, never twice.
extern "C" fn ignore_libvirt_error(_opaque: *mut c_void, _error: sys::virErrorPtr) {}

/// Silence libvirt's default error handler, which prints every error on stderr (the process's
/// handler, so once is enough).
fn quiet_libvirt_errors() {
    static QUIET: std::sync::Once = std::sync::Once::new();
    QUIET.call_once(|| {
        // SAFETY: installs a handler that does nothing; no pointer is kept.
        unsafe { sys::virSetErrorFunc(std::ptr::null_mut(), Some(ignore_libvirt_error)) };
    });
}

/// Open a connection to `uri`. Every path that talks to libvirt opens through here, so none of
/// them lets libvirt print its errors on stderr (an `apply` would say each twice, the daemon
/// would put lines without journal fields in the journal).
///
/// # Errors
/// libvirt's, when the connection cannot be opened.
fn connect(uri: &str) -> Result<Connect, virt::error::Error> {
    quiet_libvirt_errors();
    Connect::open(Some(uri))
}

/// The libvirt version whose rules the daemon applies: the operator's `--libvirt-version`, else
/// the connected libvirtd's (`virConnectGetLibVersion`: a remote connection answers with the
/// daemon's version, not this library's). None when libvirt gives none: [`Host`] then falls
/// back to its files (a `<hostFacts>` read, libvirt's QEMU capability cache).
fn libvirt_version(cli: &Cli, conn: &Connect) -> Option<Sourced<LibvirtVersion>> {
    if let Some(value) = cli.libvirt_version {
        return Some(Sourced {
            value,
            source: "--libvirt-version".into(),
        });
    }
    match conn.lib_version() {
        Ok(n) => Some(Sourced {
            value: LibvirtVersion::from_number(u64::from(n)),
            source: format!("virConnectGetLibVersion on {}", cli.uri),
        }),
        Err(e) => {
            tracing::warn!(uri = %cli.uri, error = %e, "the connected libvirtd gives no version");
            None
        }
    }
}

/// This host's facts for judging guests: the snapshot just written, the policy's `[host]`
/// files, and `libvirt` (from [`libvirt_version`]) over any version those files name, so the
/// daemon judges with the libvirtd it is connected to rather than with a file that another
/// libvirt may have written.
fn host_for(
    policy: &Policy,
    snapshot: &[PathBuf],
    libvirt: Option<&Sourced<LibvirtVersion>>,
) -> Result<Host, crate::Error> {
    Host::discover(&HostOptions {
        libvirt_version: libvirt.cloned(),
        ..HostOptions::from_policy(policy, snapshot, None, None)
    })
}

/// The libvirt version `host` judges with and where it came from, as one sentence for the log.
fn version_used(host: &Host) -> String {
    match host.libvirt_version() {
        Some(v) => format!("judging with libvirt {} (from {})", v.value, v.source),
        None => "judging with libvirt 9.0's rules: no libvirt version known (the connection, host-facts files and libvirt's capability cache gave none)".into(),
    }
}

fn describe(name: &str, r: &Report) -> String {
    match r {
        Report::Unchanged => format!("{name}: unchanged (conforms)"),
        Report::Changed {
            running, backup, ..
        } => {
            let when = if *running {
                "running: the change applies at its next cold boot"
            } else {
                "applies at its next start"
            };
            match backup {
                Some(b) => format!("{name}: changed ({when}); backup {}", b.display()),
                None => format!("{name}: would change ({when})"),
            }
        }
        Report::Refused(why) => format!("{name}: refused: {why}"),
        Report::Transient => {
            format!("{name}: transient guest, left alone (it has no stored definition)")
        }
    }
}

/// The guests `apply` names (`--all`: every guest libvirt lists), each with its domain, None when
/// libvirt has no guest of that name.
fn guests(conn: &Connect, a: &ApplyArgs) -> Vec<(String, Option<VirDomain>)> {
    if a.all {
        conn.list_all_domains(0)
            .unwrap_or_default()
            .into_iter()
            .map(|d| (d.name().unwrap_or_default(), Some(d)))
            .collect()
    } else {
        a.names
            .iter()
            .map(|n| (n.clone(), conn.lookup_domain_by_name(n).ok()))
            .collect()
    }
}

/// `virt-cpu-policyd apply`: exit 0 when every guest is unchanged, changed or transient; 1 when
/// any was refused; 2 when the policy or the connection fails.
fn cmd_apply(cli: &Cli, a: &ApplyArgs) -> i32 {
    let policy = match Policy::load(cli.policy.as_deref()) {
        Ok(p) => p,
        Err(e) => {
            crate::stdio::message_line(&format!("virt-cpu-policyd: {e}"));
            return 2;
        }
    };
    let conn = match connect(&cli.uri) {
        Ok(c) => c,
        Err(e) => {
            crate::stdio::message_line(&format!(
                "virt-cpu-policyd: cannot connect to {}: {e}",
                cli.uri
            ));
            return 2;
        }
    };
    let snapshot = if a.dry_run {
        Vec::new()
    } else {
        write_snapshot(&conn, &cli.snapshot_dir, publish_dir(cli, &policy))
    };
    let host = match host_for(&policy, &snapshot, libvirt_version(cli, &conn).as_ref()) {
        Ok(h) => h,
        Err(e) => {
            crate::stdio::message_line(&format!("virt-cpu-policyd: {e}"));
            return 2;
        }
    };
    // On stderr: stdout is the per-guest report (and the diffs), which scripts read.
    eprintln!("virt-cpu-policyd: {}", version_used(&host));
    let mut code = 0;
    let mut out = String::new();
    for (name, d) in guests(&conn, a) {
        let r = match d {
            Some(d) => apply_one(&conn, &d, &policy, &host, &cli.backup_dir, a.dry_run),
            None => Report::Refused("no such guest".into()),
        };
        if a.dry_run {
            if let Report::Changed { diff, .. } = &r {
                out.push_str(diff);
            }
        }
        if matches!(r, Report::Refused(_)) {
            code = 1;
        }
        out.push_str(&describe(&name, &r));
        out.push('\n');
    }
    let mut stdout = std::io::stdout().lock();
    if stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
        .is_err()
    {
        return 2;
    }
    code
}

/// What the event callbacks send to the main loop.
enum Event {
    /// A guest was defined (added or updated).
    Defined(String),
    /// The connection closed (libvirtd went away).
    Closed,
}

/// libvirt's `virConnectDomainEventLifecycleCallback`; registered through the generic callback
/// type, as libvirt's C API requires (`VIR_DOMAIN_EVENT_CALLBACK`).
type LifecycleCallback =
    unsafe extern "C" fn(sys::virConnectPtr, sys::virDomainPtr, c_int, c_int, *mut c_void) -> c_int;

struct CallbackData {
    tx: mpsc::Sender<Event>,
}

extern "C" fn lifecycle_cb(
    _conn: sys::virConnectPtr,
    dom: sys::virDomainPtr,
    event: c_int,
    _detail: c_int,
    opaque: *mut c_void,
) -> c_int {
    if event != sys::VIR_DOMAIN_EVENT_DEFINED as c_int || opaque.is_null() || dom.is_null() {
        return 0;
    }
    // SAFETY: `opaque` is the CallbackData boxed at registration and freed only by
    // `free_callback_data`, after libvirt stops calling; `dom` is valid during the call.
    let data = unsafe { &*(opaque as *const CallbackData) };
    let name = unsafe { sys::virDomainGetName(dom) };
    if !name.is_null() {
        // SAFETY: libvirt returns a NUL-terminated string owned by the domain object.
        let name = unsafe { std::ffi::CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned();
        let _ = data.tx.send(Event::Defined(name));
    }
    0
}

extern "C" fn close_cb(_conn: sys::virConnectPtr, _reason: c_int, opaque: *mut c_void) {
    if opaque.is_null() {
        return;
    }
    // SAFETY: as in `lifecycle_cb`.
    let data = unsafe { &*(opaque as *const CallbackData) };
    let _ = data.tx.send(Event::Closed);
}

extern "C" fn free_callback_data(opaque: *mut c_void) {
    if !opaque.is_null() {
        // SAFETY: `opaque` came from Box::into_raw in `register`, and libvirt calls this once.
        drop(unsafe { Box::from_raw(opaque as *mut CallbackData) });
    }
}

/// A connection with its event callbacks registered, and the libvirt version it judges with
/// (asked at each connection: a libvirtd upgraded and restarted brings its own rules).
struct Session {
    conn: Connect,
    callback_id: c_int,
    libvirt: Option<Sourced<LibvirtVersion>>,
}

impl Session {
    fn open(cli: &Cli, tx: &mpsc::Sender<Event>) -> Result<Session, String> {
        let conn = connect(&cli.uri).map_err(|e| e.to_string())?;
        // Keepalive makes libvirt notice a dead daemon and run the close callback.
        let _ = conn.set_keep_alive(5, 3);
        let data = Box::into_raw(Box::new(CallbackData { tx: tx.clone() })) as *mut c_void;
        // SAFETY: the callback type matches VIR_DOMAIN_EVENT_ID_LIFECYCLE's signature
        // (virConnectDomainEventCallback); libvirt owns `data` and frees it with
        // `free_callback_data` on deregistration.
        let callback_id = unsafe {
            let cb: LifecycleCallback = lifecycle_cb;
            sys::virConnectDomainEventRegisterAny(
                conn.as_ptr(),
                std::ptr::null_mut(),
                sys::VIR_DOMAIN_EVENT_ID_LIFECYCLE as c_int,
                Some(std::mem::transmute::<
                    LifecycleCallback,
                    unsafe extern "C" fn(sys::virConnectPtr, sys::virDomainPtr, *mut c_void),
                >(cb)),
                data,
                Some(free_callback_data),
            )
        };
        if callback_id < 0 {
            free_callback_data(data);
            return Err("cannot register for domain lifecycle events".into());
        }
        let close_data = Box::into_raw(Box::new(CallbackData { tx: tx.clone() })) as *mut c_void;
        // SAFETY: as above, for virConnectRegisterCloseCallback.
        let rc = unsafe {
            sys::virConnectRegisterCloseCallback(
                conn.as_ptr(),
                Some(close_cb),
                close_data,
                Some(free_callback_data),
            )
        };
        if rc < 0 {
            free_callback_data(close_data);
        }
        let libvirt = libvirt_version(cli, &conn);
        Ok(Session {
            conn,
            callback_id,
            libvirt,
        })
    }

    fn close(self) {
        // SAFETY: the id came from a successful registration on this connection.
        unsafe {
            sys::virConnectDomainEventDeregisterAny(self.conn.as_ptr(), self.callback_id);
            sys::virConnectUnregisterCloseCallback(self.conn.as_ptr(), Some(close_cb));
        }
        drop(self.conn);
    }
}

/// Per-guest memory of our own defines. Our own `define` raises a DEFINED event, whose
/// reconciliation finds the guest conforming (the rewrite is idempotent); should libvirt not keep
/// a rewritten definition, the event-driven path would loop, so a guest changed
/// [`LOOP_CHANGES`] times within [`LOOP_WINDOW`] by events is left alone until the next full
/// reconciliation, with one error logged.
#[derive(Default)]
struct Recent {
    changed: HashMap<String, Vec<Instant>>,
    suspended: BTreeSet<String>,
}

/// Event-driven changes of one guest that make a loop.
const LOOP_CHANGES: usize = 3;
/// The window they must fall in.
const LOOP_WINDOW: Duration = Duration::from_secs(10);

/// Reconcile `names` (from events) or every guest (`None`: start, timer, SIGHUP, reconnect);
/// `fleet` keeps each guest's state and the counters for the metrics.
fn reconcile(
    session: &Session,
    names: Option<&[String]>,
    policy: &Policy,
    host: &Host,
    backup_dir: &Path,
    recent: &mut Recent,
    fleet: &mut Fleet,
) {
    let from_event = names.is_some();
    if !from_event {
        recent.suspended.clear();
        recent.changed.clear();
        fleet.guests.clear();
    }
    fleet.counters.reconciles += 1;
    let doms: Vec<VirDomain> = match names {
        None => session.conn.list_all_domains(0).unwrap_or_default(),
        Some(ns) => ns
            .iter()
            .filter(|n| !recent.suspended.contains(*n))
            .filter_map(|n| {
                let d = session.conn.lookup_domain_by_name(n).ok();
                if d.is_none() {
                    // Gone (undefined meanwhile): no longer counted.
                    fleet.guests.remove(n);
                }
                d
            })
            .collect(),
    };
    for d in doms {
        let name = d.name().unwrap_or_default();
        if from_event {
            let times = recent.changed.entry(name.clone()).or_default();
            times.retain(|t| t.elapsed() < LOOP_WINDOW);
            if times.len() >= LOOP_CHANGES {
                recent.suspended.insert(name.clone());
                tracing::error!(guest = %name, "changed {LOOP_CHANGES} times within {} s: libvirt does not keep the rewritten definition; left alone until the next full reconciliation", LOOP_WINDOW.as_secs());
                continue;
            }
        }
        let applied = apply_judged(&session.conn, &d, policy, host, backup_dir, false);
        if from_event && matches!(applied.report, Report::Changed { .. }) {
            recent
                .changed
                .entry(name.clone())
                .or_default()
                .push(Instant::now());
        }
        log_applied(&name, "reconcile", &applied);
        fleet.record(&name, &applied);
    }
}

/// Log one guest's step as a decision with the journal fields ([`crate::log::decision`]); the
/// message is the line `apply` prints.
fn log_applied(name: &str, operation: &str, a: &Applied) {
    use crate::log::Decision;
    use tracing::Level;
    let (kind, level) = match (&a.report, a.failure) {
        (Report::Unchanged, _) => (Decision::DaemonUnchanged, Level::DEBUG),
        (Report::Transient, _) => (Decision::DaemonTransient, Level::DEBUG),
        (Report::Changed { .. }, _) => (Decision::DaemonRewritten, Level::INFO),
        (Report::Refused(_), Some(FailureReason::CannotConform)) => {
            (Decision::DaemonCannotConform, Level::WARN)
        }
        (Report::Refused(_), Some(_)) => (Decision::DaemonFailed, Level::WARN),
        (Report::Refused(_), None) => (Decision::DaemonAuditOnly, Level::WARN),
    };
    let rules = a.rules.join(", ");
    let fields = crate::log::Fields {
        guest: name,
        operation,
        verdict: match (a.verdict, &a.report) {
            (Some(v), _) => v.as_str(),
            (None, Report::Transient) => "transient",
            (None, _) => "error",
        },
        rule: (!rules.is_empty()).then_some(rules.as_str()),
        code: a.code,
        decision: kind.name(),
    };
    crate::log::decision(kind, level, &fields, &describe(name, &a.report));
}

/// The daemon's view of the host's guests for the metrics: each guest's state after the last
/// step that touched it, and the counters since start.
#[derive(Debug, Default)]
struct Fleet {
    /// Guest → (verdict after the step, rules involved); None: its definition could not be read
    /// or parsed. Transient guests are not kept.
    guests: std::collections::BTreeMap<String, Option<(Verdict, Vec<String>)>>,
    counters: crate::metrics::Counters,
}

impl Fleet {
    /// Take one guest's step into the state and the counters.
    fn record(&mut self, name: &str, a: &Applied) {
        if let Report::Changed {
            backup: Some(_), ..
        } = a.report
        {
            self.counters.rewrites += 1;
            for r in &a.rules {
                *self.counters.rule_rewrites.entry(r.clone()).or_default() += 1;
            }
        }
        if let Some(reason) = a.failure {
            *self.counters.failures.entry(reason).or_default() += 1;
        }
        match (a.verdict_after(), &a.report) {
            (_, Report::Transient) => {
                self.guests.remove(name);
            }
            (Some(v), _) => {
                self.guests
                    .insert(name.to_string(), Some((v, a.rules.clone())));
            }
            (None, _) => {
                self.guests.insert(name.to_string(), None);
            }
        }
    }

    /// The gauges now.
    fn gauges(&self, host: &Host, libvirt: Option<String>) -> crate::metrics::Gauges {
        let mut g = crate::metrics::Gauges {
            host_level: crate::metrics::host_level(host),
            libvirt_version: host
                .libvirt_version()
                .map(|v| v.value.to_string())
                .or(libvirt),
            timestamp_seconds: crate::metrics::now_seconds(),
            ..crate::metrics::Gauges::default()
        };
        for state in self.guests.values() {
            match state {
                Some((verdict, rules)) => g.count(*verdict, rules),
                None => g.unreadable += 1,
            }
        }
        g
    }
}

/// SIGHUP (reload) and SIGTERM/SIGINT (stop), as flags the main loop polls.
struct Signals {
    hup: Arc<AtomicBool>,
    term: Arc<AtomicBool>,
}

impl Signals {
    fn install() -> Result<Signals, String> {
        let hup = Arc::new(AtomicBool::new(false));
        let term = Arc::new(AtomicBool::new(false));
        for (sig, flag) in [
            (signal_hook::consts::SIGHUP, &hup),
            (signal_hook::consts::SIGTERM, &term),
            (signal_hook::consts::SIGINT, &term),
        ] {
            signal_hook::flag::register(sig, Arc::clone(flag))
                .map_err(|e| format!("cannot handle signal {sig}: {e}"))?;
        }
        Ok(Signals { hup, term })
    }

    fn stop(&self) -> bool {
        self.term.load(Ordering::Relaxed)
    }

    /// Whether a SIGHUP came since the last call.
    fn reload(&self) -> bool {
        self.hup.swap(false, Ordering::Relaxed)
    }
}

/// libvirt's default event loop, run on its own thread (the lifecycle and close callbacks are
/// called from it).
fn start_libvirt_event_loop() -> Result<(), String> {
    quiet_libvirt_errors();
    virt::event::event_register_default_impl()
        .map_err(|e| format!("cannot start libvirt's event loop: {e}"))?;
    std::thread::spawn(|| {
        loop {
            if virt::event::event_run_default_impl().is_err() {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    });
    Ok(())
}

/// Connect, retrying with backoff (1 s, doubling up to 30 s); None when SIGTERM comes first.
fn connect_with_backoff(cli: &Cli, tx: &mpsc::Sender<Event>, signals: &Signals) -> Option<Session> {
    let mut backoff = Duration::from_secs(1);
    loop {
        if signals.stop() {
            return None;
        }
        match Session::open(cli, tx) {
            Ok(s) => return Some(s),
            Err(e) => {
                tracing::warn!(uri = %cli.uri, error = %e, retry_in_s = backoff.as_secs(), "cannot connect to libvirt");
                let until = Instant::now() + backoff;
                while Instant::now() < until {
                    if signals.stop() {
                        return None;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
        }
    }
}

/// What ended a connection's loop.
enum After {
    /// Exit with this code.
    Exit(i32),
    /// libvirtd went away: connect again.
    Reconnect,
}

/// The daemon's state across connections.
struct Daemon<'c> {
    cli: &'c Cli,
    interval: Duration,
    policy: Policy,
    recent: Recent,
    fleet: Fleet,
}

impl Daemon<'_> {
    /// One connection: snapshot, full reconciliation, then events, SIGHUP and the timer until the
    /// connection dies or SIGTERM.
    fn serve(&mut self, session: &Session, rx: &mpsc::Receiver<Event>, signals: &Signals) -> After {
        // Drop events of a previous connection.
        while rx.try_recv().is_ok() {}
        // This host's facts are published after the full reconciliation below.
        let snapshot = write_snapshot(&session.conn, &self.cli.snapshot_dir, None);
        tracing::info!(uri = %self.cli.uri, snapshot_files = snapshot.len(), policy = %self.policy.source, "connected; reconciling every guest");
        let mut host = match host_for(&self.policy, &snapshot, session.libvirt.as_ref()) {
            Ok(h) => h,
            Err(e) => {
                tracing::error!(error = %e, "host facts unusable");
                return After::Exit(2);
            }
        };
        tracing::info!("{}", version_used(&host));
        self.reconcile(session, None, &host);
        let mut next_full = Instant::now() + self.interval;
        loop {
            if signals.stop() {
                tracing::info!("stopping on SIGTERM/SIGINT");
                return After::Exit(0);
            }
            if signals.reload() {
                self.reload(session, &snapshot, &mut host);
            }
            if Instant::now() >= next_full {
                // Fresh facts files, and the cluster's baseline computed again: other hosts
                // may have published new facts.
                match host_for(&self.policy, &snapshot, session.libvirt.as_ref()) {
                    Ok(h) => host = h,
                    Err(e) => {
                        tracing::error!(error = %e, "host facts unusable; keeping the previous ones")
                    }
                }
                self.reconcile(session, None, &host);
                next_full = Instant::now() + self.interval;
            }
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(Event::Defined(name)) => {
                    let Some(names) = coalesce(name, rx) else {
                        tracing::warn!("libvirt connection closed; reconnecting");
                        return After::Reconnect;
                    };
                    self.reconcile(session, Some(&names), &host);
                }
                Ok(Event::Closed) => {
                    tracing::warn!("libvirt connection closed; reconnecting");
                    return After::Reconnect;
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if !session.conn.is_alive().unwrap_or(false) {
                        tracing::warn!("libvirt connection is dead; reconnecting");
                        return After::Reconnect;
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => return After::Exit(2),
            }
        }
    }

    fn reconcile(&mut self, session: &Session, names: Option<&[String]>, host: &Host) {
        let started = Instant::now();
        let backup_dir = &self.cli.backup_dir;
        reconcile(
            session,
            names,
            &self.policy,
            host,
            backup_dir,
            &mut self.recent,
            &mut self.fleet,
        );
        self.write_metrics(session, host, started.elapsed());
        if names.is_none() {
            self.refresh_host_facts(session);
        }
    }

    /// After a full reconciliation: this host's facts into the snapshot and, with `--publish` or
    /// `[host] publish`, to `DIR/<hostname>.xml`, each written only when it changed.
    fn refresh_host_facts(&self, session: &Session) {
        match host_facts(&session.conn) {
            Ok(f) => {
                store_host_facts(
                    &f,
                    &self.cli.snapshot_dir,
                    publish_dir(self.cli, &self.policy),
                );
            }
            Err(e) => tracing::error!(error = %e, "cannot read this host's facts from libvirt"),
        }
    }

    /// `--metrics-file`: the gauges and counters, written atomically (node_exporter never reads
    /// half a file). A failure is logged; the daemon goes on.
    fn write_metrics(&self, session: &Session, host: &Host, took: Duration) {
        let Some(path) = &self.cli.metrics_file else {
            return;
        };
        let libvirt = session
            .conn
            .lib_version()
            .ok()
            .map(|n| LibvirtVersion::from_number(u64::from(n)).to_string());
        let mut gauges = self.fleet.gauges(host, libvirt);
        gauges.duration_seconds = took.as_secs_f64();
        let rules: Vec<String> = self.policy.rules.iter().map(|r| r.name.clone()).collect();
        let text = crate::metrics::render(&gauges, Some(&self.fleet.counters), &rules);
        if let Err(e) = write_atomic(path, &text) {
            tracing::error!(path = %path.display(), error = %e, "cannot write the metrics file");
        }
    }

    /// SIGHUP: load the policy again and reconcile everything; a policy that does not load is
    /// logged and the old one kept.
    fn reload(&mut self, session: &Session, snapshot: &[PathBuf], host: &mut Host) {
        match Policy::load(self.cli.policy.as_deref()) {
            Ok(p) => {
                tracing::info!(policy = %p.source, "SIGHUP: policy reloaded; reconciling every guest");
                self.policy = p;
                match host_for(&self.policy, snapshot, session.libvirt.as_ref()) {
                    Ok(h) => *host = h,
                    Err(e) => {
                        tracing::error!(error = %e, "host facts unusable; keeping the previous ones")
                    }
                }
                self.reconcile(session, None, host);
            }
            Err(e) => {
                tracing::error!(error = %e.one_line(), "SIGHUP: the new policy does not load; keeping the old one")
            }
        }
    }
}

/// A burst of events: `first` and every name already queued, sorted and unique; None when the
/// connection closed meanwhile.
fn coalesce(first: String, rx: &mpsc::Receiver<Event>) -> Option<Vec<String>> {
    let mut names = vec![first];
    while let Ok(ev) = rx.try_recv() {
        match ev {
            Event::Defined(n) => names.push(n),
            Event::Closed => return None,
        }
    }
    names.sort();
    names.dedup();
    Some(names)
}

fn cmd_daemon(cli: &Cli, a: &DaemonArgs) -> i32 {
    crate::log::init_daemon();
    let policy = match Policy::load(cli.policy.as_deref()) {
        Ok(p) => p,
        Err(e) => {
            tracing::error!(error = %e.one_line(), "cannot load the policy");
            crate::stdio::message_line(&format!("virt-cpu-policyd: {e}"));
            return 2;
        }
    };
    let signals = match Signals::install().and_then(|s| start_libvirt_event_loop().map(|()| s)) {
        Ok(s) => s,
        Err(e) => {
            crate::stdio::message_line(&format!("virt-cpu-policyd: {e}"));
            return 2;
        }
    };
    let (tx, rx) = mpsc::channel::<Event>();
    let mut daemon = Daemon {
        cli,
        interval: Duration::from_secs(a.interval * 60),
        policy,
        recent: Recent::default(),
        fleet: Fleet::default(),
    };
    loop {
        let Some(session) = connect_with_backoff(cli, &tx, &signals) else {
            return 0;
        };
        let after = daemon.serve(&session, &rx, &signals);
        session.close();
        match after {
            After::Exit(code) => return code,
            After::Reconnect => {}
        }
    }
}

/// Parse the command line and run; returns the exit code.
#[must_use]
pub fn main() -> i32 {
    let cli = Cli::parse();
    match &cli.command {
        Command::Apply(a) => cmd_apply(&cli, a),
        Command::Daemon(a) => cmd_daemon(&cli, a),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::{Decision, capture};

    fn applied(
        report: Report,
        verdict: Option<Verdict>,
        failure: Option<FailureReason>,
    ) -> Applied {
        Applied {
            report,
            verdict,
            rules: vec!["x86-64-v2 baseline".into()],
            code: failure.map(|_| "cpu-level"),
            failure,
        }
    }

    fn changed() -> Report {
        Report::Changed {
            running: false,
            backup: Some(PathBuf::from("/b.xml")),
            diff: "-<cpu/>\n+<cpu mode='custom'/>".into(),
        }
    }

    #[test]
    fn every_daemon_decision_carries_the_journal_fields() {
        let cases = [
            (
                applied(Report::Unchanged, Some(Verdict::Conforms), None),
                Decision::DaemonUnchanged,
                "conforms",
            ),
            (
                applied(changed(), Some(Verdict::NeedsRewrite), None),
                Decision::DaemonRewritten,
                "needs-rewrite",
            ),
            (
                applied(
                    Report::Refused("would change, but the policy's mode is audit".into()),
                    Some(Verdict::NeedsRewrite),
                    None,
                ),
                Decision::DaemonAuditOnly,
                "needs-rewrite",
            ),
            (
                applied(
                    Report::Refused("error[cpu-level] ...".into()),
                    Some(Verdict::CannotConform),
                    Some(FailureReason::CannotConform),
                ),
                Decision::DaemonCannotConform,
                "cannot-conform",
            ),
            (
                applied(
                    Report::Refused("libvirt refused".into()),
                    Some(Verdict::NeedsRewrite),
                    Some(FailureReason::Define),
                ),
                Decision::DaemonFailed,
                "needs-rewrite",
            ),
            (
                applied(Report::Transient, None, None),
                Decision::DaemonTransient,
                "transient",
            ),
        ];
        for (a, kind, verdict) in cases {
            let events = capture::events(|| log_applied("g1", "reconcile", &a));
            assert_eq!(events.len(), 1, "{events:#?}");
            let f = &events[0].1;
            assert_eq!(f["message_id"], kind.message_id(), "{f:#?}");
            assert_eq!(f["guest"], "g1");
            assert_eq!(f["operation"], "reconcile");
            assert_eq!(f["verdict"], verdict);
            assert_eq!(f["rule"], "x86-64-v2 baseline");
            assert_eq!(f["decision"], kind.name());
            assert!(f["message"].starts_with("g1: "), "{f:#?}");
            assert!(
                !f["message"].contains("<cpu"),
                "no XML (the diff) in the log: {f:#?}"
            );
            assert_eq!(f.contains_key("code"), a.failure.is_some(), "{f:#?}");
        }
    }

    #[test]
    fn host_names_become_safe_file_names() {
        for (name, file) in [
            ("kvm-07.example.org", "kvm-07.example.org.xml"),
            ("../../etc/passwd", "_._.._etc_passwd.xml"),
            (".hidden", "_hidden.xml"),
            ("", "_.xml"),
            ("a b/c\u{e9}", "a_b_c_.xml"),
        ] {
            assert_eq!(
                published_path(Path::new("/srv/facts"), name),
                Path::new("/srv/facts").join(file),
                "{name:?}"
            );
        }
    }

    #[test]
    fn host_facts_are_stored_and_published_only_when_they_change() {
        use std::os::unix::fs::MetadataExt;
        let dir = std::env::temp_dir().join(format!("vcp-dmn-facts-{}", std::process::id()));
        let (snap, publish) = (dir.join("snap"), dir.join("shared"));
        std::fs::create_dir_all(&snap).unwrap();
        std::fs::write(snap.join(LEGACY_SNAPSHOT_CAPS), "<capabilities/>").unwrap();
        let caps = "<capabilities><host><cpu><arch>x86_64</arch></cpu></host></capabilities>";
        let doc = |v: &str| Published {
            name: "node 1".into(),
            xml: crate::libvirt::host_facts::document("node 1", v.parse().unwrap(), caps, None),
            domcaps: None,
        };
        let stored = store_host_facts(&doc("9.0.0"), &snap, Some(&publish));
        assert_eq!(stored, Some(snap.join(SNAPSHOT_FACTS)));
        assert!(
            !snap.join(LEGACY_SNAPSHOT_CAPS).exists(),
            "the old capabilities.xml goes"
        );
        let published = publish.join("node_1.xml");
        let text = std::fs::read_to_string(&published).unwrap();
        assert!(
            text.starts_with("<hostFacts name='node 1' libvirt='9.0.0'>"),
            "{text}"
        );
        assert_eq!(
            std::fs::read_to_string(snap.join(SNAPSHOT_FACTS)).unwrap(),
            text
        );
        // The same facts again: nothing written (same inode: no rename happened).
        let ino = std::fs::metadata(&published).unwrap().ino();
        store_host_facts(&doc("9.0.0"), &snap, Some(&publish));
        assert_eq!(std::fs::metadata(&published).unwrap().ino(), ino);
        // New facts: replaced by a rename, no temporary file left behind.
        store_host_facts(&doc("11.3.0"), &snap, Some(&publish));
        assert_ne!(std::fs::metadata(&published).unwrap().ino(), ino);
        assert!(
            std::fs::read_to_string(&published)
                .unwrap()
                .contains("libvirt='11.3.0'")
        );
        let names: Vec<String> = std::fs::read_dir(&publish)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["node_1.xml".to_string()]);
        // Published into the snapshot directory: one file there, the published one.
        let stored = store_host_facts(&doc("11.3.0"), &snap, Some(&snap));
        assert_eq!(stored, Some(snap.join("node_1.xml")));
        assert!(!snap.join(SNAPSHOT_FACTS).exists());
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn fleet_counts_the_state_after_each_step() {
        let mut fleet = Fleet::default();
        fleet.record("a", &applied(changed(), Some(Verdict::NeedsRewrite), None));
        fleet.record(
            "b",
            &applied(
                Report::Refused("x".into()),
                Some(Verdict::CannotConform),
                Some(FailureReason::CannotConform),
            ),
        );
        fleet.record(
            "c",
            &applied(Report::Unchanged, Some(Verdict::OutOfScope), None),
        );
        fleet.record(
            "d",
            &Applied {
                verdict: None,
                ..applied(
                    Report::Refused("parse".into()),
                    None,
                    Some(FailureReason::Unreadable),
                )
            },
        );
        fleet.record("t", &applied(Report::Transient, None, None));
        let host = Host::discover(&crate::host::HostOptions {
            qemu_cache: Some(PathBuf::new()),
            ..crate::host::HostOptions::default()
        })
        .unwrap();
        let g = fleet.gauges(&host, Some("9.0.0".into()));
        assert_eq!(
            g.guests.get(&Verdict::Conforms),
            Some(&1),
            "the rewritten guest conforms now"
        );
        assert_eq!(g.guests.get(&Verdict::CannotConform), Some(&1));
        assert_eq!(g.guests.get(&Verdict::OutOfScope), Some(&1));
        assert_eq!(g.guests.get(&Verdict::NeedsRewrite), None);
        assert_eq!(g.unreadable, 1);
        assert_eq!(g.libvirt_version.as_deref(), Some("9.0.0"));
        assert_eq!(fleet.counters.rewrites, 1);
        assert_eq!(
            fleet.counters.rule_rewrites.get("x86-64-v2 baseline"),
            Some(&1)
        );
        assert_eq!(
            fleet.counters.failures.get(&FailureReason::CannotConform),
            Some(&1)
        );
        assert_eq!(
            fleet.counters.failures.get(&FailureReason::Unreadable),
            Some(&1)
        );
        // The same guest again: its state is replaced, the counters grow.
        fleet.record("b", &applied(changed(), Some(Verdict::NeedsRewrite), None));
        let g = fleet.gauges(&host, None);
        assert_eq!(g.guests.get(&Verdict::Conforms), Some(&2));
        assert_eq!(g.guests.get(&Verdict::CannotConform), None);
        assert_eq!(fleet.counters.rewrites, 2);
    }

    /// libvirt's test driver runs inside this process: a connection without a libvirtd.
    const TEST_URI: &str = "test:///default";

    #[test]
    fn the_connected_libvirt_version_wins_over_files_and_the_override_over_it() {
        let dir = std::env::temp_dir().join(format!("vcp-dmn-version-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // A snapshot file that another libvirt wrote.
        let caps = "<capabilities><host><cpu><arch>x86_64</arch></cpu></host></capabilities>";
        let stale = dir.join(SNAPSHOT_FACTS);
        let doc = crate::libvirt::host_facts::document("n", "99.9.0".parse().unwrap(), caps, None);
        std::fs::write(&stale, doc).unwrap();
        let cli = |extra: &[&str]| {
            let mut args = vec!["virt-cpu-policyd", "--uri", TEST_URI];
            args.extend_from_slice(extra);
            args.extend(["apply", "--all"]);
            Cli::parse_from(args)
        };
        let conn = connect(TEST_URI).unwrap();
        let connected = LibvirtVersion::from_number(u64::from(conn.lib_version().unwrap()));
        let policy = Policy::load(None).unwrap();
        let used = |cli: &Cli| {
            let fact = libvirt_version(cli, &conn);
            let host = host_for(&policy, std::slice::from_ref(&stale), fact.as_ref()).unwrap();
            let v = host.libvirt_version().unwrap();
            (v.value.to_string(), v.source.clone(), version_used(&host))
        };
        let (value, source, line) = used(&cli(&[]));
        assert_eq!(value, connected.to_string());
        assert_eq!(source, format!("virConnectGetLibVersion on {TEST_URI}"));
        assert_eq!(
            line,
            format!(
                "judging with libvirt {connected} (from virConnectGetLibVersion on {TEST_URI})"
            )
        );
        let (value, source, _) = used(&cli(&["--libvirt-version", "11.3.0"]));
        assert_eq!(
            (value.as_str(), source.as_str()),
            ("11.3.0", "--libvirt-version")
        );
        // Without a version from the connection, the files decide, as for the hook.
        let host = host_for(&policy, std::slice::from_ref(&stale), None).unwrap();
        assert_eq!(host.libvirt_version().unwrap().value.to_string(), "99.9.0");
        std::fs::remove_dir_all(&dir).ok();
    }
}
