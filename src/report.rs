//! The verdict on one domain and its JSON report: what `check`, `rewrite --explain --format json`,
//! `audit`, the metrics and the daemon all say about a rewrite's [`Outcome`], in one place.
//!
//! Exit codes (README.md, "Exit codes"): 0 conforms (or out of scope), 1 cannot conform, 2 bad
//! input, 3 conforms only after a rewrite.

use crate::change::Change;
use crate::policy::{Mode, Policy};
use crate::rewrite::Outcome;

/// Exit code: success.
pub const EXIT_OK: i32 = 0;
/// Exit code: the domain cannot conform (findings on stderr).
pub const EXIT_REFUSED: i32 = 1;
/// Exit code: bad usage or input.
pub const EXIT_BAD_INPUT: i32 = 2;
/// Exit code (`check`): conforms only after a rewrite.
pub const EXIT_NEEDS_REWRITE: i32 = 3;

/// Version of the JSON reports (`check`, `rewrite --explain --format json`, `host`, `audit`,
/// `baseline`); README.md ("JSON output") documents each field.
pub const JSON_SCHEMA_VERSION: u32 = 1;

/// The verdict on a rewrite's outcome — `conforms`, `needs-rewrite`, `cannot-conform` or
/// `out-of-scope` — and the exit code `check` gives it.
#[must_use]
pub fn verdict(o: &Outcome) -> (&'static str, i32) {
    if !o.in_scope {
        ("out-of-scope", EXIT_OK)
    } else if o.has_errors() {
        ("cannot-conform", EXIT_REFUSED)
    } else if o.changed {
        ("needs-rewrite", EXIT_NEEDS_REWRITE)
    } else {
        ("conforms", EXIT_OK)
    }
}

/// The JSON report on one domain (README.md, "JSON output"): `schema_version`, `guest`,
/// `verdict`, `exit`, `policy`, `mode`, `changes` (none listed when it cannot conform), `findings`,
/// `note`.
#[must_use]
pub fn report_json(o: &Outcome, policy: &Policy) -> serde_json::Value {
    let (verdict, code) = verdict(o);
    // A domain that cannot conform has no rewrite to describe (as in the text report).
    let changes: &[Change] = if verdict == "cannot-conform" {
        &[]
    } else {
        &o.changes
    };
    serde_json::json!({
        "schema_version": JSON_SCHEMA_VERSION,
        "guest": o.name,
        "verdict": verdict,
        "exit": code,
        "policy": policy.source,
        "mode": match policy.mode { Mode::Enforce => "enforce", Mode::Audit => "audit" },
        "changes": changes,
        "findings": o.findings,
        "note": o.note,
    })
}
