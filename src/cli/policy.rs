//! `virt-cpu-policy policy check`: a policy file judged before it is used, against this host's
//! libvirt (or the host facts given): its parse ([`Policy::parse`]: keys, types, values, levels)
//! and every name it gives ([`crate::host::Host::policy_problems`]: models and features this
//! host's libvirt knows, selectors that can match).
//!
//! Exit codes (docs/exit-codes.md): 0 the policy can be used here (warnings may be printed);
//! 1 it names what this host's libvirt does not know (each named, with the nearest known name);
//! 2 it cannot be read or does not parse, or the host facts do not load (one message on stderr).

use super::{EXIT_OK, EXIT_REFUSED, FactArgs, Failure, write_stdout};
use crate::finding::Severity;
use crate::host::{Host, PolicyProblem};
use crate::policy::Policy;
use clap::{Args, Subcommand};
use std::fmt::Write as _;
use std::path::PathBuf;

/// `policy` subcommands.
#[derive(Debug, Subcommand)]
pub enum PolicyCmd {
    /// Check a policy against this host's libvirt: its keys, types and values, every CPU model
    /// and feature name (with the nearest known name for a typo) and every selector. Exit 0
    /// usable here, 1 it names what this host's libvirt does not know, 2 unreadable or does not
    /// parse.
    Check(PolicyCheckArgs),
}

/// `policy check` options.
#[derive(Debug, Args)]
pub struct PolicyCheckArgs {
    #[command(flatten)]
    /// Host facts (`--policy` names the file when FILE is not given).
    pub facts: FactArgs,
    /// The policy file (default: --policy, else /etc/virt-cpu-policy/policy.toml if it
    /// exists, else the built-in policy).
    #[arg(value_name = "FILE")]
    pub file: Option<PathBuf>,
}

/// The report of `policy check`: one line per problem, then the verdict line.
#[must_use]
pub(super) fn report(policy: &Policy, host: &Host, problems: &[PolicyProblem]) -> String {
    let mut s = String::new();
    for p in problems {
        let _ = writeln!(s, "{p}");
    }
    let errors = problems
        .iter()
        .filter(|p| p.severity == Severity::Error)
        .count();
    let warnings = problems.len() - errors;
    let rules = policy.rules.len();
    let _ = if errors == 0 {
        writeln!(
            s,
            "policy {}: usable on this host ({rules} rule(s), {warnings} warning(s); cpu_map {})",
            policy.source,
            host.cpu_map_source()
        )
    } else {
        writeln!(
            s,
            "policy {}: NOT usable on this host: {errors} error(s), {warnings} warning(s) (cpu_map {}); each is a name libvirt would refuse in every guest the rule matches, or a rule that never applies",
            policy.source,
            host.cpu_map_source()
        )
    };
    s
}

/// Runs `policy check`.
pub(super) fn cmd_policy(cmd: &PolicyCmd) -> Result<i32, Failure> {
    let PolicyCmd::Check(a) = cmd;
    let path = a.file.as_deref().or(a.facts.policy.as_deref());
    let policy = Policy::load(path)?;
    let host = Host::discover(&super::host_options(&policy, &a.facts))?;
    let problems = host.policy_problems(&policy);
    write_stdout(report(&policy, &host, &problems).as_bytes())?;
    Ok(if problems.iter().any(|p| p.severity == Severity::Error) {
        EXIT_REFUSED
    } else {
        EXIT_OK
    })
}
