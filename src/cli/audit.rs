//! `virt-cpu-policy audit`: the stored definitions of a host, one line each, then totals; or the
//! same as one JSON object, or as Prometheus gauges. The judging is [`crate::audit`]'s; this module
//! turns it into output and an exit code.
//!
//! Exit codes (docs/exit-codes.md): 0 every guest conforms (or is out of scope); 3 some
//! need a rewrite; 1 some cannot conform; 2 a file could not be read or judged (it is reported and
//! counted, and every other file is still judged), or bad usage, policy or host facts (then one
//! line on stderr and nothing on stdout). The highest applicable code wins: 2, then 1, then 3.

use super::{EXIT_BAD_INPUT, EXIT_NEEDS_REWRITE, EXIT_OK, EXIT_REFUSED, FactArgs, Failure};
use crate::audit::{Entry, Guest, Totals};
use crate::host::Host;
use crate::policy::Policy;
use crate::verdict::Verdict;
use clap::{Args, ValueEnum};
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::path::PathBuf;

/// Files above which a terminal gets a progress indicator on stderr.
const PROGRESS_ABOVE: usize = 200;

/// Report formats for `audit`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum AuditFormat {
    /// A line per guest (name, verdict, level, vCPUs of the machine limit, rules, file), then
    /// totals.
    Text,
    /// One JSON object: `{"guests": [...], "unreadable": [...], "totals": {...}}`.
    Json,
    /// Prometheus text format (0.0.4) gauges, for node_exporter's textfile collector.
    Prometheus,
}

/// `audit` options.
#[derive(Debug, Args)]
pub struct AuditArgs {
    #[command(flatten)]
    /// Policy and host facts (as for `check`).
    pub facts: FactArgs,
    /// Report format.
    #[arg(long, value_enum, default_value = "text")]
    pub format: AuditFormat,
    /// Also every running guest: libvirt's status files (`/run/libvirt/qemu/*.xml`,
    /// `<domstatus>`), transient guests included, each judged with the live CPU it runs with.
    /// The default when no DIR or FILE is given (then the stored definitions too).
    #[arg(long)]
    pub running: bool,
    /// Directories (their `*.xml` entries) and files to audit: stored definitions or status
    /// files (default: /etc/libvirt/qemu, and /run/libvirt/qemu where it exists).
    #[arg(value_name = "DIR | FILE")]
    pub inputs: Vec<PathBuf>,
}

impl AuditArgs {
    /// The directories and files to audit: those given, else the stored definitions and, where
    /// libvirt runs guests here, their status files; `--running` adds the status files.
    fn inputs(&self) -> Vec<PathBuf> {
        let running = std::path::Path::new(crate::audit::RUNNING_DIR);
        let mut inputs = self.inputs.clone();
        let given = !inputs.is_empty();
        if !given {
            inputs.push(PathBuf::from(crate::audit::DEFAULT_DIR));
        }
        if self.running || (!given && running.is_dir()) {
            inputs.push(running.to_path_buf());
        }
        inputs
    }
}

/// The exit code of an audit (module documentation).
fn exit_code(t: &Totals) -> i32 {
    if t.unreadable > 0 {
        EXIT_BAD_INPUT
    } else if t.cannot_conform > 0 {
        EXIT_REFUSED
    } else if t.needs_rewrite > 0 {
        EXIT_NEEDS_REWRITE
    } else if t.not_compared > 0 {
        crate::verdict::EXIT_NOT_COMPARED
    } else {
        EXIT_OK
    }
}

/// Run `audit`.
pub(super) fn cmd_audit(a: &AuditArgs) -> Result<i32, Failure> {
    let started = crate::metrics::now_seconds();
    let policy = Policy::load(a.facts.policy.as_deref())?;
    let host = Host::discover(&super::host_options(&policy, &a.facts))?;
    crate::pipeline::check_cluster(&policy, &host)?;
    let files = crate::audit::files(&a.inputs()).map_err(|e| Failure {
        code: EXIT_BAD_INPUT,
        message: Some(e.to_string()),
    })?;
    let progress = std::io::stderr().is_terminal() && files.len() > PROGRESS_ABOVE;
    let step = (files.len() / 100).max(1);
    let entries = crate::audit::run(&files, &policy, &host, |done, total| {
        if progress && (done % step == 0 || done == total) {
            crate::stdio::message(&format!("\raudit: {done}/{total} files"));
        }
    });
    if progress {
        // Clear the progress line: stderr is left as it was.
        crate::stdio::message("\r\x1b[2K");
    }
    let totals = Totals::of(&entries);
    let code = exit_code(&totals);
    let out = match a.format {
        AuditFormat::Text => text(&entries, &totals),
        AuditFormat::Json => format!("{}\n", json(&entries, &totals, &policy, code)),
        AuditFormat::Prometheus => {
            crate::metrics::render(&crate::audit::gauges(&entries, &host, started), None, &[])
        }
    };
    super::write_stdout(out.as_bytes())?;
    Ok(code)
}

/// `x86-64-v2`, `-` (not x86_64, out of scope) or `?` (unknown).
fn level_cell(g: &Guest) -> String {
    match (g.level.level, g.level.basis) {
        (Some(l), _) => l.to_string(),
        (None, "not x86_64" | "out of scope") => "-".into(),
        (None, _) => "?".into(),
    }
}

/// `MAX/LIMIT`: the vCPU maximum beside the machine type's limit (`?` when unknown).
fn vcpu_cell(g: &Guest) -> String {
    let max = g.vcpu_max.map_or("?".into(), |m| m.to_string());
    match &g.machine_limit {
        Some(l) => format!("{max}/{}", l.max_cpus),
        None if g.outcome.in_scope => format!("{max}/?"),
        None => max,
    }
}

/// The text report: a header, one row per guest, the unreadable files, notes, the totals.
fn text(entries: &[Entry], t: &Totals) -> String {
    let mut rows: Vec<[String; 6]> = vec![[
        "GUEST".into(),
        "VERDICT".into(),
        "LEVEL".into(),
        "VCPUS/LIMIT".into(),
        "RULES".into(),
        "FILE".into(),
    ]];
    let mut unknown_level = false;
    let mut out_tail = String::new();
    for e in entries {
        match e {
            Entry::Guest(g) => {
                let name = if g.outcome.name.is_empty() {
                    "(unnamed)".to_string()
                } else {
                    g.outcome.name.clone()
                };
                // A status file's guest is its live XML: said, as the same name may be a stored
                // definition too.
                let name = if g.running {
                    format!("{name} (running)")
                } else {
                    name
                };
                unknown_level |= g.level.basis == "no domcapabilities";
                let rules = if g.rules.is_empty() {
                    "-".to_string()
                } else {
                    g.rules.join(", ")
                };
                rows.push([
                    name,
                    g.verdict().as_str().into(),
                    level_cell(g),
                    vcpu_cell(g),
                    rules,
                    g.file.display().to_string(),
                ]);
            }
            Entry::Unreadable(file, why) => {
                let _ = writeln!(out_tail, "unreadable: {}: {why}", file.display());
            }
        }
    }
    let mut s = String::new();
    if rows.len() > 1 {
        s.push_str(&table(&rows));
    }
    s.push_str(&out_tail);
    if unknown_level {
        s.push_str("note: LEVEL ? for host-model/host-passthrough guests: give this host's `virsh domcapabilities` with --caps FILE\n");
    }
    // The not-compared count only when there are some: the line is otherwise as it was.
    let not_compared = if t.not_compared > 0 {
        format!(", {} not-compared", t.not_compared)
    } else {
        String::new()
    };
    let _ = writeln!(
        s,
        "totals: {} files, {} conforms, {} needs-rewrite, {} cannot-conform, {} out-of-scope{not_compared}, {} unreadable",
        t.files, t.conforms, t.needs_rewrite, t.cannot_conform, t.out_of_scope, t.unreadable
    );
    s
}

/// Rows padded into columns (the last one is not padded).
fn table(rows: &[[String; 6]]) -> String {
    let mut widths = [0usize; 6];
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut s = String::new();
    for r in rows {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            if i + 1 == r.len() {
                line.push_str(c);
            } else {
                let _ = write!(line, "{c:<w$}  ", w = widths[i]);
            }
        }
        s.push_str(line.trim_end());
        s.push('\n');
    }
    s
}

/// One guest: the `check --format json` object plus `file`, `running`, `level`, `vcpu_max`,
/// `machine_limit` and `rules` (docs/json.md).
fn guest_json(g: &Guest, policy: &Policy) -> Value {
    let mut v = super::report_json(&g.outcome, policy);
    if let Value::Object(m) = &mut v {
        m.insert("file".into(), json!(g.file.display().to_string()));
        m.insert("running".into(), json!(g.running));
        m.insert(
            "level".into(),
            json!({"value": g.level.level.map(crate::cpu::Level::as_str), "basis": g.level.basis}),
        );
        m.insert("vcpu_max".into(), json!(g.vcpu_max));
        m.insert(
            "machine_limit".into(),
            g.machine_limit.as_ref().map_or(
                Value::Null,
                |l| json!({"value": l.max_cpus, "machine": l.machine, "source": l.source}),
            ),
        );
        m.insert("rules".into(), json!(g.rules));
    }
    v
}

/// The JSON report: `{"schema_version", "policy", "guests", "unreadable", "totals", "exit"}`.
fn json(entries: &[Entry], t: &Totals, policy: &Policy, code: i32) -> Value {
    let mut guests = Vec::new();
    let mut unreadable = Vec::new();
    for e in entries {
        match e {
            Entry::Guest(g) => guests.push(guest_json(g, policy)),
            Entry::Unreadable(file, why) => {
                unreadable.push(json!({"file": file.display().to_string(), "error": why}));
            }
        }
    }
    json!({
        "schema_version": super::JSON_SCHEMA_VERSION,
        "policy": policy.source,
        "guests": guests,
        "unreadable": unreadable,
        // Each verdict's count under the verdict's own word, as `check` writes it.
        "totals": {
            "files": t.files,
            (Verdict::Conforms.as_str()): t.conforms,
            (Verdict::NeedsRewrite.as_str()): t.needs_rewrite,
            (Verdict::CannotConform.as_str()): t.cannot_conform,
            (Verdict::OutOfScope.as_str()): t.out_of_scope,
            (Verdict::NotCompared.as_str()): t.not_compared,
            "unreadable": t.unreadable,
        },
        "exit": code,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_rank_bad_input_then_refusal_then_rewrite() {
        let t = |needs, cannot, unreadable| Totals {
            needs_rewrite: needs,
            cannot_conform: cannot,
            unreadable,
            ..Totals::default()
        };
        assert_eq!(exit_code(&t(0, 0, 0)), 0);
        assert_eq!(exit_code(&t(1, 0, 0)), 3);
        assert_eq!(exit_code(&t(1, 1, 0)), 1);
        assert_eq!(exit_code(&t(1, 1, 1)), 2);
    }

    #[test]
    fn columns_line_up() {
        let rows = [
            [
                "a".into(),
                "bb".into(),
                "c".into(),
                "d".into(),
                "e".into(),
                "f".into(),
            ],
            [
                "aaa".into(),
                "b".into(),
                "c".into(),
                "d".into(),
                "e".into(),
                "f".into(),
            ],
        ];
        assert_eq!(table(&rows), "a    bb  c  d  e  f\naaa  b   c  d  e  f\n");
    }
}
