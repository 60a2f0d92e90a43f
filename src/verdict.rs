//! The verdict on one domain and its JSON report: what `check`, `rewrite --explain --format json`,
//! `audit`, the metrics and the daemon all say about a rewrite's [`Outcome`], in one place.
//!
//! Exit codes (docs/exit-codes.md): 0 conforms (or out of scope), 1 cannot conform, 2 bad
//! input, 3 conforms only after a rewrite, 4 not compared (`check`: a start check needed a fact
//! the tool does not have).

use crate::change::Change;
use crate::policy::{Mode, Policy};
use crate::rewrite::Outcome;
use serde::Serialize;

/// Exit code: success.
pub const EXIT_OK: i32 = 0;
/// Exit code: the domain cannot conform (findings on stderr).
pub const EXIT_REFUSED: i32 = 1;
/// Exit code: bad usage or input.
pub const EXIT_BAD_INPUT: i32 = 2;
/// Exit code (`check`): conforms only after a rewrite.
pub const EXIT_NEEDS_REWRITE: i32 = 3;
/// Exit code (`check`, `audit`): nothing found against the policy or libvirt's rules, but a check
/// libvirt makes at start was not made for want of a fact (`not-compared`).
pub const EXIT_NOT_COMPARED: i32 = 4;

/// Version of the JSON reports (`check`, `rewrite --explain --format json`, `host`, `audit`,
/// `baseline`); docs/json.md documents each field.
pub const JSON_SCHEMA_VERSION: u32 = 1;

/// The verdict on one domain, as `check`, `audit`, the metrics (the `verdict` label), the JSON
/// reports and the daemon's journal (`VERDICT`) name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// `conforms`: nothing to change.
    Conforms,
    /// `needs-rewrite`: conforms only after a rewrite.
    NeedsRewrite,
    /// `cannot-conform`: libvirt or QEMU would refuse the result, or the policy cannot be met.
    CannotConform,
    /// `out-of-scope`: a domain type the tool does not handle (`xen`, `lxc`...).
    OutOfScope,
    /// `not-compared`: nothing to change and nothing refused, but a check libvirt makes at start
    /// needed a fact the tool does not have (a `not-compared` finding names it): neither
    /// "conforms" nor "cannot" is claimed.
    NotCompared,
}

impl Verdict {
    /// Every verdict, in the order the metrics list them.
    pub const ALL: [Verdict; 5] = [
        Verdict::Conforms,
        Verdict::NeedsRewrite,
        Verdict::CannotConform,
        Verdict::OutOfScope,
        Verdict::NotCompared,
    ];

    /// The verdict on a rewrite's outcome.
    #[must_use]
    pub fn of(o: &Outcome) -> Verdict {
        if !o.in_scope {
            Verdict::OutOfScope
        } else if o.has_errors() {
            Verdict::CannotConform
        } else if o.changed {
            Verdict::NeedsRewrite
        } else if o
            .findings
            .iter()
            .any(|f| f.code == crate::finding::Code::NotCompared)
        {
            Verdict::NotCompared
        } else {
            Verdict::Conforms
        }
    }

    /// The verdict as every output writes it (`needs-rewrite`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Conforms => "conforms",
            Verdict::NeedsRewrite => "needs-rewrite",
            Verdict::CannotConform => "cannot-conform",
            Verdict::OutOfScope => "out-of-scope",
            Verdict::NotCompared => "not-compared",
        }
    }

    /// The exit code `check` gives it: 0 conforms or out of scope, 1 cannot conform, 3 needs a
    /// rewrite, 4 not compared.
    #[must_use]
    pub fn exit_code(self) -> i32 {
        match self {
            Verdict::Conforms | Verdict::OutOfScope => EXIT_OK,
            Verdict::CannotConform => EXIT_REFUSED,
            Verdict::NeedsRewrite => EXIT_NEEDS_REWRITE,
            Verdict::NotCompared => EXIT_NOT_COMPARED,
        }
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The JSON report on one domain (docs/json.md): `schema_version`, `guest`,
/// `verdict`, `exit`, `policy`, `mode`, `changes` (none listed when it cannot conform), `findings`,
/// `note`, `os` (the guest's OS and whether its floor was judged).
#[must_use]
pub fn report_json(o: &Outcome, policy: &Policy) -> serde_json::Value {
    let verdict = Verdict::of(o);
    // A domain that cannot conform has no rewrite to describe (as in the text report).
    let changes: &[Change] = if verdict == Verdict::CannotConform {
        &[]
    } else {
        &o.changes
    };
    serde_json::json!({
        "schema_version": JSON_SCHEMA_VERSION,
        "guest": o.name,
        "verdict": verdict,
        "exit": verdict.exit_code(),
        "policy": policy.source,
        "mode": match policy.mode { Mode::Enforce => "enforce", Mode::Audit => "audit" },
        "changes": changes,
        "findings": o.findings,
        "note": o.note,
        "os": o.os,
    })
}
