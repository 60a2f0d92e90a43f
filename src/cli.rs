//! The command line of `virt-cpu-policy`: argument definitions (clap) and the glue from a parsed
//! command to the library and an exit code.
//!
//! Exit codes (documented in docs/exit-codes.md and `--help`):
//! * 0: written / conforms / done;
//! * 1: the domain cannot be made to satisfy the policy, or the result fails validation
//!   (findings on stderr, nothing on stdout);
//! * 2: bad usage, unreadable or malformed input, policy or host-fact file, or output that cannot
//!   be written (one message on stderr, nothing on stdout);
//! * 3: `check` only: the domain conforms only after a rewrite.
//!
//! Output is built whole in memory and written once, so a failure never leaves partial output.

mod audit;
mod fleet;
pub(crate) mod host;
mod policy;

pub use audit::{AuditArgs, AuditFormat};
pub use fleet::{FactsArgs, FleetArgs, FleetFormat};
pub use policy::{PolicyCheckArgs, PolicyCmd};

use crate::error::Error;
use crate::host::{Host, HostOptions, Sourced};
use crate::libvirt::version::{LibvirtVersion, QemuVersion};
use crate::policy::{Mode, Policy};
use crate::rewrite::{Outcome, rewrite};
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

pub mod cluster;
pub mod traits;

pub use crate::verdict::{
    EXIT_BAD_INPUT, EXIT_NEEDS_REWRITE, EXIT_OK, EXIT_REFUSED, JSON_SCHEMA_VERSION, Verdict,
    report_json,
};

/// The parsed command line.
#[derive(Debug, Parser)]
#[command(
    name = "virt-cpu-policy",
    version,
    about = "Make the guest CPU of libvirt domains a declared policy",
    long_about = "Rewrites libvirt domain XML so the guest CPU is what the host's policy says \
                  (one <cpu>, mode/model/features, a minimum x86-64 level), with the smallest \
                  possible edit, and validates the result against libvirt's own rules.",
    after_help = "Exit codes (each command's in docs/exit-codes.md): 0 ok; 1 refused: the \
                  domain cannot conform (rewrite, check, audit), a guest cannot run or leave \
                  (fleet, compare), the policy names what this host's libvirt does not know \
                  (policy check), the hook refuses; 2 bad usage or input; 3 (check, audit) \
                  conforms only after a rewrite; 4 (check, audit, fleet) not compared or \
                  incomplete: a fact the answer needs is missing, and is named."
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Rewrite a domain's XML to conform to the policy; write the whole document to stdout.
    Rewrite(RewriteArgs),
    /// Report whether a domain conforms (exit 0), needs a rewrite (3), or cannot conform (1).
    Check(CheckArgs),
    /// Print the host facts found and where each came from.
    Host(HostArgs),
    /// Judge every stored definition (default /etc/libvirt/qemu/*.xml; libvirt is not called):
    /// a line per guest, then totals. Exit 0 all conform, 3 some need a rewrite, 1 some cannot
    /// conform, 2 a file could not be read or judged (reported; the rest still run).
    Audit(AuditArgs),
    /// The libvirt qemu hook: libvirt runs it as `hook GUEST OPERATION SUB-OPERATION EXTRA` with
    /// the domain XML on stdin; exit 1 with one line on stderr refuses the operation.
    Hook(HookCmd),
    /// One guest CPU every host of a cluster can run (libvirt's baseline), the x86-64 level the
    /// cluster reaches and the hosts that hold it back; on aarch64, the groups of identical CPUs.
    Baseline(cluster::BaselineArgs),
    /// Whether a guest's CPU runs on a host: identical, superset, or incompatible with the
    /// missing features named (as `virsh hypervisor-cpu-compare`).
    Compare(cluster::CompareArgs),
    /// What schedulers place guests by: each host's x86-64 levels (CUSTOM_X86_64_V2 …) and the
    /// cluster's CPU as Nova placement traits (a provider config document) or CloudStack host
    /// tags.
    Traits(traits::TraitsArgs),
    /// Every guest × every host of a fleet, each host judged with its own facts: per host its
    /// counts, per guest the hosts that run it and why the others cannot (`--pairs`: every pair,
    /// `runs` or `cannot` with every reason); `--drain HOST` (exit 1 when a guest cannot leave),
    /// `--guest NAME`, `--admit FACTS`, `--upgrade HOST --to FACTS`; `--format html` a page. Exit
    /// 0 all run, 1 some cannot, 2 bad input, 4 some not compared or the answer incomplete.
    Fleet(FleetArgs),
    /// Check a policy before it is used (`policy check [FILE]`): its keys and values, and every
    /// CPU model, feature and selector against this host's libvirt.
    #[command(subcommand)]
    Policy(PolicyCmd),
    /// Write this host's guest facts (`--guests`: from libvirt's stored definitions and status
    /// files, never libvirt) for `fleet`.
    Facts(FactsArgs),
}

impl Command {
    /// Whether the command's result goes to stdout (`hook` writes nothing there, `rewrite
    /// --in-place` writes the file).
    #[must_use]
    pub fn writes_stdout(&self) -> bool {
        match self {
            Command::Rewrite(a) => !a.in_place,
            Command::Hook(_) => false,
            Command::Check(_)
            | Command::Host(_)
            | Command::Audit(_)
            | Command::Baseline(_)
            | Command::Compare(_)
            | Command::Traits(_)
            | Command::Fleet(_)
            | Command::Policy(_) => true,
            Command::Facts(a) => a.out.is_none(),
        }
    }
}

/// `hook` arguments: libvirt's four, plus options for tests and dry runs.
#[derive(Debug, Args)]
pub struct HookCmd {
    /// Policy file (default: /etc/virt-cpu-policy/policy.toml if it exists, else the built-in one).
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Extra host-fact files: capabilities, domcapabilities, QEMU capability cache or
    /// `<hostFacts>` (repeatable).
    #[arg(long = "caps", value_name = "FILE")]
    pub caps: Vec<PathBuf>,
    /// Log to this file instead of journald (default: journald, else
    /// /var/log/virt-cpu-policy/hook.log).
    #[arg(long, value_name = "FILE")]
    pub log_file: Option<PathBuf>,
    /// The state directory (default /var/lib/virt-cpu-policy): the daemon's host-fact snapshot
    /// is read from it, and each decision is counted in its `hook-decisions` file (made with the
    /// directory when missing) for virt-cpu-policyd's metrics.
    #[arg(long, value_name = "DIR")]
    pub snapshot_dir: Option<PathBuf>,
    #[command(flatten)]
    /// Machine-limit sources.
    pub limits: LimitArgs,
    /// The guest's name.
    pub guest: String,
    /// libvirt's operation: prepare, start, started, stopped, release, migrate, restore, ...
    pub operation: String,
    /// libvirt's sub-operation: begin or end.
    pub sub_operation: String,
    /// libvirt's extra argument (usually "-").
    #[arg(allow_hyphen_values = true, default_value = "-")]
    pub extra: String,
}

/// Where host facts and the policy come from: shared by every subcommand that judges a domain.
#[derive(Debug, Args)]
pub struct FactArgs {
    /// Policy file (default: /etc/virt-cpu-policy/policy.toml if it exists, else the built-in
    /// policy).
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// `virsh capabilities`, `virsh domcapabilities`, libvirt QEMU capability cache or
    /// `<hostFacts>` file (repeatable).
    #[arg(long = "caps", value_name = "FILE")]
    pub caps: Vec<PathBuf>,
    /// The host's online CPU count, instead of sysconf (for tests and dry runs).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub host_cpus: Option<u32>,
    /// libvirt's cpu_map directory (default /usr/share/libvirt/cpu_map, else a built-in copy).
    #[arg(long, value_name = "DIR")]
    pub cpu_map: Option<PathBuf>,
    #[command(flatten)]
    /// Machine-limit sources.
    pub limits: LimitArgs,
}

/// Options shared by `rewrite` and `check`.
#[derive(Debug, Args)]
pub struct Common {
    #[command(flatten)]
    /// Policy and host facts.
    pub facts: FactArgs,
    /// The domain XML file, or - for stdin (the default).
    #[arg(value_name = "INPUT", default_value = "-")]
    pub input: PathBuf,
}

/// Host facts given on the command line besides `--caps`: where machine-type and KVM vCPU limits
/// come from, and the libvirt version.
#[derive(Debug, Args, Clone, Default)]
pub struct LimitArgs {
    /// libvirt's QEMU capability cache directory (default /var/cache/libvirt/qemu/capabilities;
    /// ROOT/var/cache/libvirt/qemu/capabilities is another root's, its emulators under ROOT).
    #[arg(long, value_name = "DIR", conflicts_with = "no_qemu_caps_cache")]
    pub qemu_caps_cache: Option<PathBuf>,
    /// Do not read libvirt's QEMU capability cache.
    #[arg(long)]
    pub no_qemu_caps_cache: bool,
    /// KVM's vCPU limit, instead of asking /dev/kvm (KVM_CAP_MAX_VCPUS).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub kvm_max_vcpus: Option<u32>,
    /// The host's libvirt version (MAJOR[.MINOR[.MICRO]], e.g. 11.3.0; a missing part is 0),
    /// instead of libvirt's QEMU capability cache (for dry runs of another host's rules).
    #[arg(long, value_name = "VERSION")]
    pub libvirt_version: Option<LibvirtVersion>,
    /// The host's QEMU version (MAJOR[.MINOR[.MICRO]], e.g. 10.0.13), instead of libvirt's QEMU
    /// capability cache: what an x86 TCG guest gets from that release (APIC IDs of 255 and
    /// more from QEMU 9.0, ht and cmp_legacy from 10.0.1, hot-plugged vCPUs delivered except on
    /// 5.1.0 to 7.2.0).
    #[arg(long, value_name = "VERSION")]
    pub qemu_version: Option<QemuVersion>,
}

/// `rewrite` options.
#[derive(Debug, Args)]
pub struct RewriteArgs {
    #[command(flatten)]
    /// Shared options.
    pub common: Common,
    /// Print a unified diff instead of the document.
    #[arg(long, conflicts_with = "in_place")]
    pub diff: bool,
    /// Also print, on stderr, each change and the rule that caused it.
    #[arg(long)]
    pub explain: bool,
    /// Format of `--explain`: text, or the JSON object `check --format json` prints.
    #[arg(long, value_enum, default_value = "text", requires = "explain")]
    pub format: Format,
    /// Replace INPUT with the result (atomically; untouched when nothing changes).
    #[arg(long)]
    pub in_place: bool,
}

/// Report formats for `check`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Format {
    /// One line per guest, then the changes and findings.
    Text,
    /// One JSON object.
    Json,
}

/// `check` options.
#[derive(Debug, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    /// Shared options.
    pub common: Common,
    /// Report format.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
}

/// `host` options.
#[derive(Debug, Args)]
pub struct HostArgs {
    #[command(flatten)]
    /// Policy (its `[host]` settings apply) and host facts.
    pub facts: FactArgs,
    /// List every machine type on its own line instead of folding families into version ranges.
    #[arg(long, short)]
    pub verbose: bool,
    /// Report format.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
}

/// A failure that ends the command with a message and an exit code.
#[derive(Debug)]
pub struct Failure {
    /// The exit code.
    pub code: i32,
    /// The message for stderr (without the program name), or None when already printed.
    pub message: Option<String>,
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure {
            code: EXIT_BAD_INPUT,
            message: Some(e.to_string()),
        }
    }
}

/// libvirt runs the hook for every operation of every guest; most are not checked. When the
/// arguments are exactly libvirt's (`hook GUEST OPERATION SUB-OPERATION EXTRA`, no options) and the
/// operation is one the hook passes, drain stdin and answer before the command-line parser is even
/// built: that is most of the cost of such a call. Returns the exit code, or None to go on.
#[must_use]
pub fn unchecked_hook_exit(args: &[std::ffi::OsString]) -> Option<i32> {
    let [_, cmd, guest, op, sub, _extra] = args else {
        return None;
    };
    let (op, sub) = (op.to_str()?, sub.to_str()?);
    if cmd != "hook"
        || guest.to_str()?.starts_with('-')
        || op.starts_with('-')
        || sub.starts_with('-')
    {
        return None;
    }
    if crate::hook::Phase::of(op, sub).is_some() {
        return None;
    }
    crate::hook::drain(&mut std::io::stdin().lock());
    Some(EXIT_OK)
}

/// Run a parsed command; returns the exit code. Messages go to stderr prefixed with the program
/// name; only results go to stdout.
#[must_use]
pub fn run(cli: Cli) -> i32 {
    if cli.command.writes_stdout() && !crate::stdio::stdout_open() {
        // Rust would write the result into /dev/null (stdio.rs): refuse before doing anything.
        crate::stdio::message_line(
            "virt-cpu-policy: cannot write to standard output: it is closed",
        );
        return EXIT_BAD_INPUT;
    }
    let result = match cli.command {
        Command::Rewrite(a) => cmd_rewrite(&a),
        Command::Check(a) => cmd_check(&a),
        Command::Host(a) => cmd_host(&a),
        Command::Audit(a) => audit::cmd_audit(&a),
        Command::Hook(a) => Ok(cmd_hook(&a)),
        Command::Baseline(a) => cluster::cmd_baseline(&a),
        Command::Compare(a) => cluster::cmd_compare(&a),
        Command::Traits(a) => traits::cmd_traits(&a),
        Command::Fleet(a) => fleet::cmd_fleet(&a),
        Command::Facts(a) => fleet::cmd_facts(&a),
        Command::Policy(a) => policy::cmd_policy(&a),
    };
    match result {
        Ok(code) => code,
        Err(f) => {
            if let Some(m) = f.message {
                crate::stdio::message_line(&format!("virt-cpu-policy: {m}"));
            }
            f.code
        }
    }
}

fn host_options(policy: &Policy, f: &FactArgs) -> HostOptions {
    let cpus = f.host_cpus.map(|value| Sourced {
        value,
        source: "--host-cpus".into(),
    });
    HostOptions {
        qemu_cache: f.limits.qemu_cache(),
        kvm_max_vcpus: f.limits.kvm(),
        libvirt_version: f.limits.libvirt(),
        qemu_version: f.limits.qemu(),
        ..HostOptions::from_policy(policy, &f.caps, f.cpu_map.as_deref(), cpus)
    }
}

impl LimitArgs {
    /// The capability cache setting: `--no-qemu-caps-cache` is an empty path (disabled).
    fn qemu_cache(&self) -> Option<PathBuf> {
        if self.no_qemu_caps_cache {
            Some(PathBuf::new())
        } else {
            self.qemu_caps_cache.clone()
        }
    }

    fn kvm(&self) -> Option<Sourced<u32>> {
        self.kvm_max_vcpus.map(|value| Sourced {
            value,
            source: "--kvm-max-vcpus".into(),
        })
    }

    fn libvirt(&self) -> Option<Sourced<LibvirtVersion>> {
        self.libvirt_version.map(|value| Sourced {
            value,
            source: "--libvirt-version".into(),
        })
    }

    fn qemu(&self) -> Option<Sourced<QemuVersion>> {
        self.qemu_version.map(|value| Sourced {
            value,
            source: "--qemu-version".into(),
        })
    }
}

fn read_input(input: &Path) -> Result<(Vec<u8>, String), Failure> {
    let limit = crate::xml::MAX_INPUT_BYTES as u64 + 1;
    let mut buf = Vec::new();
    if input == Path::new("-") {
        std::io::stdin()
            .lock()
            .take(limit)
            .read_to_end(&mut buf)
            .map_err(|source| Error::Read {
                path: "standard input".into(),
                source,
            })?;
        return Ok((buf, "the domain XML on standard input".into()));
    }
    let file = std::fs::File::open(input).map_err(|source| Error::Read {
        path: input.to_path_buf(),
        source,
    })?;
    if file.metadata().is_ok_and(|m| m.is_dir()) {
        return Err(Error::Read {
            path: input.to_path_buf(),
            source: std::io::Error::other("is a directory"),
        }
        .into());
    }
    file.take(limit)
        .read_to_end(&mut buf)
        .map_err(|source| Error::Read {
            path: input.to_path_buf(),
            source,
        })?;
    Ok((buf, input.display().to_string()))
}

struct Prepared {
    policy: Policy,
    outcome: Outcome,
    input: String,
}

/// The policy, the host and the outcome for INPUT: a `<domain>`, or for `check` (`status`) a
/// running guest's status file (`<domstatus>`, its live `<domain>` judged); `rewrite` refuses a
/// status file, libvirt's own record, naming the definition to rewrite instead.
fn prepare(c: &Common, status: bool) -> Result<Prepared, Failure> {
    let policy = Policy::load(c.facts.policy.as_deref())?;
    let host = Host::discover(&host_options(&policy, &c.facts))?;
    for l in host.left_out() {
        crate::stdio::message_line(&format!("virt-cpu-policy: {l}"));
    }
    let (bytes, what) = read_input(&c.input)?;
    let text = crate::xml::decode(&bytes, &what)?;
    let (text, running) = crate::domain::guest_document(text, &what)?;
    if running && !status {
        return Err(Failure {
            code: EXIT_BAD_INPUT,
            message: Some(format!(
                "{what} is libvirt's status file of a running guest (<domstatus>), libvirt's own record: rewrite its definition (/etc/libvirt/qemu/NAME.xml, or `virsh dumpxml --inactive NAME`); `check` and `audit` judge a status file"
            )),
        });
    }
    let outcome = rewrite(text, &what, &policy, &host)?;
    Ok(Prepared {
        policy,
        outcome,
        input: text.to_string(),
    })
}

fn guest_label(o: &Outcome) -> String {
    if o.name.is_empty() {
        "guest (unnamed)".into()
    } else {
        format!("guest '{}'", o.name)
    }
}

fn explain(o: &Outcome, audit: bool) -> String {
    let mut s = String::new();
    let label = guest_label(o);
    if let Some(n) = &o.note {
        let _ = writeln!(s, "{label}: {n}");
        return s;
    }
    if o.has_errors() {
        let _ = writeln!(s, "{label}: cannot conform to the policy");
    } else if o.changes.is_empty() {
        let _ = writeln!(s, "{label}: conforms, nothing to change");
    } else {
        let verb = if audit { "would make" } else { "made" };
        let _ = writeln!(s, "{label}: {verb} {} change(s)", o.changes.len());
        for c in &o.changes {
            let _ = writeln!(s, "  - rule '{}': {}", c.rule, c.what);
        }
    }
    s
}

fn findings_text(o: &Outcome) -> String {
    let label = guest_label(o);
    o.findings.iter().fold(String::new(), |mut s, f| {
        let _ = writeln!(s, "virt-cpu-policy: {label}: {f}");
        s
    })
}

fn write_stdout(bytes: &[u8]) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .map_err(|e| Failure {
            code: EXIT_BAD_INPUT,
            message: Some(format!("cannot write to standard output: {e}")),
        })
}

fn cmd_rewrite(a: &RewriteArgs) -> Result<i32, Failure> {
    if a.in_place && a.common.input == Path::new("-") {
        return Err(Failure {
            code: EXIT_BAD_INPUT,
            message: Some("--in-place needs an INPUT file, not standard input".into()),
        });
    }
    if a.in_place {
        // A FIFO, a device or a directory cannot be replaced by a rewritten file: the rename
        // would put a regular file in its place (and opening a FIFO waits for a writer).
        if let Ok(m) = std::fs::metadata(&a.common.input) {
            if !m.is_file() {
                return Err(Failure {
                    code: EXIT_BAD_INPUT,
                    message: Some(format!(
                        "--in-place needs a regular file: {} is {}",
                        a.common.input.display(),
                        crate::readfile::kind(m.file_type())
                    )),
                });
            }
        }
    }
    let p = prepare(&a.common, false)?;
    let o = &p.outcome;
    let audit = p.policy.mode == Mode::Audit;
    let err = match a.format {
        Format::Json => format!("{}\n", report_json(o, &p.policy)),
        Format::Text if a.explain || audit => explain(o, audit) + &findings_text(o),
        Format::Text => findings_text(o),
    };
    crate::stdio::message(&err);
    if o.has_errors() && !audit {
        return Ok(EXIT_REFUSED);
    }
    if a.diff {
        let diff = similar::TextDiff::from_lines(&p.input, &o.output);
        let name = a.common.input.display().to_string();
        let text = diff
            .unified_diff()
            .context_radius(3)
            .header(&name, &name)
            .to_string();
        write_stdout(text.as_bytes())?;
        return Ok(EXIT_OK);
    }
    if a.in_place {
        if o.output != p.input {
            // Replace the file a symlink points to, not the link.
            let target = std::fs::canonicalize(&a.common.input).map_err(|source| {
                Failure::from(Error::Write {
                    path: a.common.input.clone(),
                    source,
                })
            })?;
            write_atomically(&target, o.output.as_bytes())?;
        }
        return Ok(EXIT_OK);
    }
    write_stdout(o.output.as_bytes())?;
    Ok(EXIT_OK)
}

/// Replace `path` with `bytes` atomically ([`crate::writefile::write_atomic`]: the old file's
/// owner, group and permissions kept, readers see the old or the new file, never half).
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), Failure> {
    crate::writefile::write_atomic(path, bytes).map_err(|source| {
        Failure::from(Error::Write {
            path: path.to_path_buf(),
            source,
        })
    })
}

fn report_text(o: &Outcome) -> String {
    let verdict = Verdict::of(o);
    let label = guest_label(o);
    let mut s = match verdict {
        Verdict::OutOfScope => format!("{label}: {}\n", o.note.clone().unwrap_or_default()),
        Verdict::CannotConform => format!("{label}: cannot conform to the policy\n"),
        Verdict::NeedsRewrite => format!(
            "{label}: conforms only after a rewrite ({} change(s))\n",
            o.changes.len()
        ),
        Verdict::Conforms => format!("{label}: conforms\n"),
        Verdict::NotCompared => format!(
            "{label}: not compared (nothing refused, but a check libvirt makes at start was not made: the finding names the fact it needs)\n"
        ),
    };
    if verdict != Verdict::CannotConform {
        for c in &o.changes {
            let _ = writeln!(s, "  - rule '{}': {}", c.rule, c.what);
        }
    }
    for f in &o.findings {
        let _ = writeln!(s, "  {f}");
    }
    // Where the floor was not judged the answer says so: nothing is guessed (docs/os-floor.md).
    if let Some(os) = &o.os {
        let _ = writeln!(s, "  {}", os.line());
    }
    s
}

fn cmd_check(a: &CheckArgs) -> Result<i32, Failure> {
    let p = prepare(&a.common, true)?;
    let report = match a.format {
        Format::Json => format!("{}\n", report_json(&p.outcome, &p.policy)),
        Format::Text => report_text(&p.outcome),
    };
    write_stdout(report.as_bytes())?;
    Ok(Verdict::of(&p.outcome).exit_code())
}

fn cmd_hook(a: &HookCmd) -> i32 {
    let mut stdin = std::io::stdin().lock();
    let Some(check) = crate::hook::Phase::of(&a.operation, &a.sub_operation) else {
        // Not an operation the hook checks: no policy, no logging, just let libvirt go on.
        crate::hook::drain(&mut stdin);
        return EXIT_OK;
    };
    crate::log::init(a.log_file.as_deref());
    let xml = crate::hook::read_stdin(&mut stdin).unwrap_or_default();
    let opts = crate::hook::HookOptions {
        policy: a.policy.clone(),
        caps: a.caps.clone(),
        snapshot_dir: a.snapshot_dir.clone(),
        qemu_cache: a.limits.qemu_cache(),
        kvm_max_vcpus: a.limits.kvm(),
        libvirt_version: a.limits.libvirt(),
        qemu_version: a.limits.qemu(),
    };
    let decided = crate::hook::decide(&a.guest, check, &xml, &opts);
    // Counted after the decision is made and logged; counting cannot change it (a failure is a
    // warning in the log).
    if let Some(kind) = decided.kind {
        crate::hook_decisions::record(opts.state_dir(), kind);
    }
    match decided.answer {
        crate::hook::Answer::Allow => EXIT_OK,
        crate::hook::Answer::Refuse(line) => {
            crate::stdio::message_line(&line);
            EXIT_REFUSED
        }
    }
}

fn cmd_host(a: &HostArgs) -> Result<i32, Failure> {
    let policy = Policy::load(a.facts.policy.as_deref())?;
    let host = Host::discover(&host_options(&policy, &a.facts))?;
    // The policy whose `[host]` settings these facts follow is usable here, or nothing is said.
    let broken = host.policy_errors(&policy);
    if !broken.is_empty() {
        return Err(Error::Policy {
            path: policy.source.clone(),
            errors: broken,
        }
        .into());
    }
    let models = host.full_cpu_map()?.len();
    let out = match a.format {
        Format::Text => host::text(&policy, &host, models, a.verbose),
        Format::Json => format!("{}\n", host::json(&policy, &host, models)),
    };
    write_stdout(out.as_bytes())?;
    Ok(EXIT_OK)
}
