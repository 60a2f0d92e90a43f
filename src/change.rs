//! One change the rewrite makes to a domain, as data.
//!
//! A change is what `--explain` prints and what `check --format json` lists. It is a record, not
//! a sentence: the element it touches (libvirt's element name), what happened to it
//! ([`Action`]), the feature or attribute concerned, the old and new values, the policy rule that
//! caused it, and the sentence for people. A program can then tell "feature popcnt added" from
//! "model replaced" without parsing English (docs/json.md).

use crate::finding::Finding;
use serde::Serialize;

/// The name under which changes that follow libvirt's own rules are explained (they are not a
/// policy rule: libvirt refuses the alternative).
pub const BUILTIN_RULE: &str = "built-in: libvirt rules";

/// The name the hook gives as the rule of a decision `[hook] on_error` took (the tool itself
/// failed: no policy rule is involved).
pub const HOOK_ERROR_RULE: &str = "[hook] on_error";

/// What stands for the rule of a finding no policy rule caused: `libvirt: CODE`, one of libvirt's
/// own rules ([`libvirt_rule`]).
pub const LIBVIRT_RULE_PREFIX: &str = "libvirt: ";

/// The rule named for a finding of code `code` that no policy rule caused.
#[must_use]
pub fn libvirt_rule(code: &str) -> String {
    format!("{LIBVIRT_RULE_PREFIX}{code}")
}

/// Why `name` cannot be a policy rule's name, or None when it can.
///
/// The tool names its own sources of changes and decisions ([`BUILTIN_RULE`],
/// [`HOOK_ERROR_RULE`], `libvirt: CODE`) where a rule's name goes: in `--explain`, JSON, journal
/// fields and Prometheus labels. A rule of such a name could not be told from them. Case and runs
/// of white space are ignored, so a near-copy is refused too; so is every name that starts like
/// [`BUILTIN_RULE`] or a `libvirt:` name, for the names the tool may add later.
#[must_use]
pub fn reserved_rule_name(name: &str) -> Option<String> {
    let folded = name
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase();
    let libvirt = LIBVIRT_RULE_PREFIX.trim_end();
    if folded.starts_with("built-in") {
        Some(format!(
            "the tool names its changes that follow libvirt's rules `{BUILTIN_RULE}`, and keeps every name starting with \"built-in\""
        ))
    } else if folded.starts_with(libvirt) {
        Some(format!(
            "the tool names libvirt's own rules `{LIBVIRT_RULE_PREFIX}CODE` (as `{}`), and keeps every name starting with \"{libvirt}\"",
            libvirt_rule("topology-mismatch")
        ))
    } else if folded == HOOK_ERROR_RULE {
        Some(format!(
            "the hook names its own failures `{HOOK_ERROR_RULE}`"
        ))
    } else {
        None
    }
}

/// What happened to the element.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// The element, the feature named by `name`, or the attribute `attribute` (which had no
    /// value) was added.
    Add,
    /// The element, or its attribute `attribute`, was removed.
    Remove,
    /// The element's text or its attribute `attribute`, which had a value, was given another.
    Set,
    /// Several copies (of `<cpu>`, of a `<feature>`, of a child written twice) were folded into
    /// one.
    Fold,
}

/// One change the rewrite made (or, in audit mode and under `check`, would make).
///
/// Serialised (JSON) with every key present, `null` where it does not apply:
/// `{"rule", "element", "action", "name", "attribute", "old", "new", "what"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    /// The policy rule that caused it, or [`BUILTIN_RULE`].
    pub rule: String,
    /// libvirt's element name: `cpu`, `model`, `vendor`, `feature`, `topology`, `cache`,
    /// `maxphysaddr`, `numa`, `cell`, `vcpu`, `vcpus`, `iommu`, `driver` (the IOMMU's), `ioapic`.
    pub element: &'static str,
    /// What happened to it.
    pub action: Action,
    /// The feature's name, for `<feature>` changes; the cell's `id`, for `<cell>`.
    pub name: Option<String>,
    /// The attribute changed (`mode`, `match`, `check`, `migratable`, `fallback`, `policy`,
    /// `cpus`, `current`, `intremap`, `eim`, `driver`), or None when the element itself or its
    /// text changed.
    pub attribute: Option<&'static str>,
    /// The value before (None when there was none); for an element whose attributes are its
    /// value (`<topology>`, `<driver>`) its attributes as written, `sockets='2' cores='4'`
    /// ([`crate::xml::written_attributes`]).
    pub old: Option<String>,
    /// The value after (None when removed).
    pub new: Option<String>,
    /// What changed and why, in libvirt's element and attribute names.
    pub what: String,
}

impl Change {
    /// A change of `element` by `action` under `rule`, explained by `what`; the other fields are
    /// set with the builder methods below.
    #[must_use]
    pub fn new(
        rule: &str,
        action: Action,
        element: &'static str,
        what: impl Into<String>,
    ) -> Change {
        Change {
            rule: rule.to_string(),
            element,
            action,
            name: None,
            attribute: None,
            old: None,
            new: None,
            what: what.into(),
        }
    }

    /// The feature's name.
    #[must_use]
    pub fn name(mut self, name: &str) -> Change {
        self.name = Some(name.to_string());
        self
    }

    /// The attribute changed.
    #[must_use]
    pub fn attribute(mut self, attribute: &'static str) -> Change {
        self.attribute = Some(attribute);
        self
    }

    /// The value before.
    #[must_use]
    pub fn old(mut self, old: Option<impl Into<String>>) -> Change {
        self.old = old.map(Into::into);
        self
    }

    /// The value after.
    #[must_use]
    pub fn new_value(mut self, new: impl Into<String>) -> Change {
        self.new = Some(new.into());
        self
    }
}

/// What a step of the rewrite has to say: the changes it made, in order, and the findings it
/// raised (a refusal is an error finding; a clamp a warning).
#[derive(Debug, Default)]
pub struct Notes {
    /// Changes, in the order they were made.
    pub changes: Vec<Change>,
    /// Findings about the domain or the policy.
    pub findings: Vec<Finding>,
}

impl Notes {
    /// Record a change. An attribute given a value where it had none is an [`Action::Add`],
    /// whichever way the step phrased it, so a program tells "written" from "changed" alike
    /// everywhere.
    pub fn change(&mut self, mut c: Change) {
        if c.action == Action::Set && c.attribute.is_some() && c.old.is_none() {
            c.action = Action::Add;
        }
        self.changes.push(c);
    }

    /// Record a finding.
    pub fn finding(&mut self, f: Finding) {
        self.findings.push(f);
    }

    /// Take over everything `other` recorded, after what is here.
    pub fn extend(&mut self, other: Notes) {
        self.changes.extend(other.changes);
        self.findings.extend(other.findings);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tools_own_rule_names_are_reserved() {
        for name in [
            BUILTIN_RULE,
            HOOK_ERROR_RULE,
            &libvirt_rule("topology-mismatch"),
            "Built-In",
            "built-in  later",
            "LIBVIRT:x",
            "[Hook]   On_Error",
        ] {
            assert!(reserved_rule_name(name).is_some(), "{name}");
        }
        for name in [
            "x86-64-v2 baseline",
            "libvirt rules",
            "builtin",
            "[hook] on_violation",
        ] {
            assert_eq!(reserved_rule_name(name), None, "{name}");
        }
    }

    #[test]
    fn serialises_every_key() {
        let c = Change::new("r", Action::Add, "feature", "<feature> added")
            .name("popcnt")
            .attribute("policy")
            .new_value("require");
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "rule": "r", "element": "feature", "action": "add", "name": "popcnt",
                "attribute": "policy", "old": null, "new": "require", "what": "<feature> added"
            })
        );
    }
}
