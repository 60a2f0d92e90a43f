//! Findings: what the tool has to say about a domain, as data.
//!
//! A finding is not a string: it carries a stable code (`cpu-feature-duplicate`...), a severity,
//! the sentence for the operator, the fix, and the policy rule involved, so the command line, the
//! JSON output and (later) the hook render the same facts their own way.

use serde::Serialize;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing; the result is still usable (exit codes unchanged).
    Warning,
    /// libvirt or QEMU would refuse the result, or the policy cannot be met (exit 1).
    Error,
}

/// One finding about a domain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Stable identifier, kebab-case (`cpu-level`, `cpu-mode-unsupported`...).
    pub code: &'static str,
    /// Error or warning.
    pub severity: Severity,
    /// One sentence: what is wrong (quoting libvirt's own error text where it has one).
    pub message: String,
    /// What to do about it.
    pub fix: String,
    /// The policy rule involved, if any.
    pub rule: Option<String>,
}

impl Finding {
    /// An error finding.
    #[must_use]
    pub fn error(code: &'static str, message: impl Into<String>, fix: impl Into<String>) -> Self {
        Finding {
            code,
            severity: Severity::Error,
            message: message.into(),
            fix: fix.into(),
            rule: None,
        }
    }

    /// A warning finding.
    #[must_use]
    pub fn warning(code: &'static str, message: impl Into<String>, fix: impl Into<String>) -> Self {
        Finding {
            severity: Severity::Warning,
            ..Finding::error(code, message, fix)
        }
    }

    /// The same finding, attributed to a policy rule.
    #[must_use]
    pub fn rule(mut self, rule: impl Into<String>) -> Self {
        self.rule = Some(rule.into());
        self
    }
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sev = match self.severity {
            Severity::Warning => "warning",
            Severity::Error => "error",
        };
        write!(f, "{sev}[{}]: {}", self.code, self.message)?;
        if let Some(r) = &self.rule {
            write!(f, " (rule '{r}')")?;
        }
        if !self.fix.is_empty() {
            write!(f, "; fix: {}", self.fix)?;
        }
        Ok(())
    }
}
