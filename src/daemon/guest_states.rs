//! What the daemon knows of the host's guests for the metrics: each guest's state after the last
//! step that touched it, and the counters since start ([`crate::metrics`] renders them).

use super::apply::{Applied, Report};
use crate::host::Host;
use crate::verdict::Verdict;

/// The daemon's view of the host's guests for the metrics: each guest's state after the last
/// step that touched it, and the counters since start.
#[derive(Debug, Default)]
pub(super) struct GuestStates {
    /// Guest → (verdict after the step, rules involved); None: its definition could not be read
    /// or parsed. Transient guests are not kept.
    pub(super) guests: std::collections::BTreeMap<String, Option<(Verdict, Vec<String>)>>,
    pub(super) counters: crate::metrics::Counters,
}

impl GuestStates {
    /// Take one guest's step into the state and the counters.
    pub(super) fn record(&mut self, name: &str, a: &Applied) {
        if let Report::Changed {
            backup: Some(_), ..
        } = a.report
        {
            self.counters.rewrites += 1;
            // A closed set of label values: every OS's floor one rule.
            let labels: std::collections::BTreeSet<&str> = a
                .rules
                .iter()
                .map(|r| crate::validate::bounded_rule(r))
                .collect();
            for r in labels {
                *self
                    .counters
                    .rule_rewrites
                    .entry(r.to_string())
                    .or_default() += 1;
            }
        }
        if let Some(reason) = a.failure {
            *self.counters.failures.entry(reason).or_default() += 1;
        }
        match (a.verdict_after(), &a.report) {
            (_, Report::Transient | Report::Undefined) => {
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
    pub(super) fn gauges(&self, host: &Host, libvirt: Option<String>) -> crate::metrics::Gauges {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::apply::tests::{applied, changed};
    use crate::metrics::FailureReason;
    use std::path::PathBuf;

    #[test]
    fn fleet_counts_the_state_after_each_step() {
        let mut fleet = GuestStates::default();
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
}
