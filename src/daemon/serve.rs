//! `virt-cpu-policyd daemon`: reconcile every guest at start, on a timer, after SIGHUP and after
//! a reconnect, and each guest libvirt says was defined (its lifecycle events), until SIGTERM;
//! each decision logged with its journal fields, the metrics written after each reconciliation.

use super::apply::{
    Applied, Between, Replaced, Report, apply_judged, describe, host_for, test_hold, version_used,
};
use super::cli::{Cli, DaemonArgs};
use super::guest_states::GuestStates;
use super::session::{Event, Session, start_libvirt_event_loop};
use super::snapshot::{host_facts, publish_dir, store_host_facts, write_snapshot};
use crate::host::Host;
use crate::libvirt::version::LibvirtVersion;
use crate::metrics::FailureReason;
use crate::policy::Policy;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use virt::domain::Domain as VirDomain;

/// Per guest, the contents of its definition the daemon replaced ([`Replaced`]: a content that
/// keeps coming back is left alone, [`Report::NotKept`]) and the one it said so of (said once).
/// Keyed on what is stored, never on how many events came: an orchestrator that defines often
/// is not a loop. Forgotten at each full reconciliation, which judges every guest afresh.
#[derive(Default)]
struct Recent {
    replaced: HashMap<String, Replaced>,
    told: HashMap<String, u64>,
}

/// The guests being defined, read from the connection's events as they come, during a
/// reconciliation too: each guest's last DEFINED event not yet judged, by the time it came. A
/// step does not define over a guest found here ([`Report::Busy`]); the guest is judged once its
/// definitions have been quiet for [`QUIET`].
struct Defines<'r> {
    rx: &'r mpsc::Receiver<Event>,
    pending: RefCell<HashMap<String, Instant>>,
    /// The connection closed (an event said so).
    closed: Cell<bool>,
}

impl<'r> Defines<'r> {
    /// The events of `rx` from now on; those already there belong to a previous connection.
    fn new(rx: &'r mpsc::Receiver<Event>) -> Defines<'r> {
        while rx.try_recv().is_ok() {}
        Defines {
            rx,
            pending: RefCell::new(HashMap::new()),
            closed: Cell::new(false),
        }
    }

    /// Note one event: a guest defined now, or the connection closed.
    fn note(&self, ev: Event) {
        match ev {
            Event::Defined(n) => {
                self.pending.borrow_mut().insert(n, Instant::now());
            }
            Event::Closed => self.closed.set(true),
        }
    }

    /// Note every event that came and was not noted yet.
    fn take_events(&self) {
        while let Ok(ev) = self.rx.try_recv() {
            self.note(ev);
        }
    }

    /// How long until the next guest's definitions have been quiet for [`QUIET`], at most 100 ms.
    fn wait(&self) -> Duration {
        self.pending
            .borrow()
            .values()
            .map(|t| (*t + QUIET).saturating_duration_since(Instant::now()))
            .min()
            .unwrap_or(Duration::MAX)
            .min(Duration::from_millis(100))
    }

    /// The guests whose definitions have been quiet for [`QUIET`], sorted, no longer pending.
    fn take_due(&self) -> Vec<String> {
        let mut pending = self.pending.borrow_mut();
        let mut due: Vec<String> = pending
            .iter()
            .filter(|(_, t)| t.elapsed() >= QUIET)
            .map(|(n, _)| n.clone())
            .collect();
        due.sort();
        for n in &due {
            pending.remove(n);
        }
        due
    }
}

impl Between for Defines<'_> {
    fn before_define(&self, name: &str) {
        test_hold(name);
    }

    fn defining(&self, name: &str) -> bool {
        self.take_events();
        self.pending.borrow().contains_key(name)
    }
}

/// Reconcile `names` (from events) or every guest (`None`: start, timer, SIGHUP, reconnect);
/// `fleet` keeps each guest's state and the counters for the metrics. A guest another client is
/// defining ([`Defines`]) is left to the step after its definitions are quiet.
#[allow(clippy::too_many_arguments)]
fn reconcile(
    session: &Session,
    names: Option<&[String]>,
    policy: &Policy,
    host: &Host,
    backup_dir: &Path,
    recent: &mut Recent,
    fleet: &mut GuestStates,
    defines: &Defines,
) {
    if names.is_none() {
        recent.replaced.clear();
        recent.told.clear();
        fleet.guests.clear();
    }
    fleet.counters.reconciles += 1;
    let doms: Vec<VirDomain> = match names {
        None => session.conn.list_all_domains(0).unwrap_or_default(),
        Some(ns) => ns
            .iter()
            .filter_map(|n| {
                let d = session.conn.lookup_domain_by_name(n).ok();
                if d.is_none() {
                    // Gone (undefined meanwhile): no longer counted.
                    fleet.guests.remove(n);
                    recent.replaced.remove(n);
                    recent.told.remove(n);
                }
                d
            })
            .collect(),
    };
    for d in doms {
        let name = d.name().unwrap_or_default();
        let replaced = recent.replaced.entry(name.clone()).or_default();
        let applied = apply_judged(
            &session.conn,
            &d,
            policy,
            host,
            backup_dir,
            false,
            replaced,
            defines,
        );
        if applied.report == Report::NotKept {
            // Told once per content that keeps coming back.
            if recent.told.get(&name) == applied.stored.as_ref() {
                continue;
            }
            if let Some(h) = applied.stored {
                recent.told.insert(name.clone(), h);
            }
        } else {
            recent.told.remove(&name);
        }
        log_applied(&name, "reconcile", &applied);
        fleet.record(&name, &applied);
    }
}

/// Log one guest's step as a decision with the journal fields ([`crate::log::decision`]); the
/// message is the line `apply` prints.
pub(super) fn log_applied(name: &str, operation: &str, a: &Applied) {
    use crate::log::Decision;
    use tracing::Level;
    let (kind, level) = match (&a.report, a.failure) {
        (Report::Unchanged, _) => (Decision::DaemonUnchanged, Level::DEBUG),
        (Report::Transient | Report::Undefined, _) => (Decision::DaemonTransient, Level::DEBUG),
        // Left alone while another client defines it, judged by the step after its defines:
        // said, as the one place the daemon waits rather than rewrites.
        (Report::Busy, _) => (Decision::DaemonTransient, Level::INFO),
        (Report::Changed { .. }, _) => (Decision::DaemonRewritten, Level::INFO),
        (Report::Refused(_), Some(FailureReason::CannotConform)) => {
            (Decision::DaemonCannotConform, Level::WARN)
        }
        (Report::Refused(_), Some(_)) => (Decision::DaemonFailed, Level::WARN),
        (Report::Refused(_), None) => (Decision::DaemonAuditOnly, Level::WARN),
        (Report::NotKept, _) => (Decision::DaemonFailed, Level::ERROR),
    };
    let rules = a.rules.join(", ");
    let fields = crate::log::Fields {
        guest: name,
        operation,
        verdict: match (a.verdict, &a.report) {
            (Some(v), _) => v.as_str(),
            (None, Report::Transient | Report::Undefined) => "transient",
            (None, _) => "error",
        },
        rule: (!rules.is_empty()).then_some(rules.as_str()),
        code: a.code,
        decision: kind.name(),
    };
    let mut message = describe(name, &a.report);
    if let Some(w) = a.window {
        // The window another client's define would be lost in (docs/daemon.md).
        let _ = write!(
            message,
            "; defined {:.1} ms after the definition was last read",
            w.as_secs_f64() * 1e3
        );
    }
    crate::log::decision(kind, level, &fields, &message);
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
    fleet: GuestStates,
    /// The cluster CPU last seen ([`crate::cluster::watch`]), for the metrics.
    cluster: Option<crate::cluster::watch::Seen>,
}

impl Daemon<'_> {
    /// One connection: snapshot, full reconciliation, then events, SIGHUP and the timer until the
    /// connection dies or SIGTERM.
    fn serve(&mut self, session: &Session, rx: &mpsc::Receiver<Event>, signals: &Signals) -> After {
        let defines = Defines::new(rx);
        // This host's facts are published after the full reconciliation below.
        let snapshot = write_snapshot(
            &session.conn,
            &self.cli.snapshot_dir,
            None,
            self.cli.host_name.as_deref(),
        );
        tracing::info!(uri = %self.cli.uri, snapshot_files = snapshot.len(), policy = %self.policy.source, "connected; reconciling every guest");
        let mut host = match host_for(&self.policy, &snapshot, session.libvirt.as_ref()) {
            Ok(h) => h,
            Err(e) => {
                tracing::error!(error = %e, "host facts unusable");
                return After::Exit(2);
            }
        };
        tracing::info!("{}", version_used(&host));
        self.reconcile(session, None, &host, &defines);
        let mut next_full = Instant::now() + self.interval;
        loop {
            if defines.closed.get() {
                tracing::warn!("libvirt connection closed; reconnecting");
                return After::Reconnect;
            }
            if signals.stop() {
                tracing::info!("stopping on SIGTERM/SIGINT");
                return After::Exit(0);
            }
            if signals.reload() {
                self.reload(session, &snapshot, &mut host, &defines);
            }
            if Instant::now() >= next_full {
                // Fresh facts files, and the cluster's baseline computed again: other hosts
                // may have published new facts.
                match host_for(&self.policy, &snapshot, session.libvirt.as_ref()) {
                    Ok(h) => host = h,
                    Err(e) => {
                        tracing::error!(error = %e, "host facts unusable; keeping the previous ones");
                    }
                }
                self.reconcile(session, None, &host, &defines);
                next_full = Instant::now() + self.interval;
            }
            // Wake for the next guest whose definitions went quiet, else every 100 ms.
            match rx.recv_timeout(defines.wait()) {
                Ok(ev) => {
                    defines.note(ev);
                    defines.take_events();
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if defines.pending.borrow().is_empty()
                        && !session.conn.is_alive().unwrap_or(false)
                    {
                        tracing::warn!("libvirt connection is dead; reconnecting");
                        return After::Reconnect;
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => return After::Exit(2),
            }
            if defines.closed.get() {
                continue;
            }
            let due = defines.take_due();
            if !due.is_empty() {
                self.reconcile(session, Some(&due), &host, &defines);
            }
        }
    }

    fn reconcile(
        &mut self,
        session: &Session,
        names: Option<&[String]>,
        host: &Host,
        defines: &Defines,
    ) {
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
            defines,
        );
        if names.is_none() {
            self.watch_cluster(host);
        }
        self.write_metrics(session, host, started.elapsed());
        if names.is_none() {
            self.refresh_host_facts(session);
        }
    }

    /// After a full reconciliation: a change of the cluster CPU told once
    /// ([`crate::cluster::watch::tell`], in the snapshot directory the hook shares), and the CPU
    /// kept for the metrics. Nothing is read when no rule asks for `cpu.model = "baseline"`.
    fn watch_cluster(&mut self, host: &Host) {
        if let Err(e) = crate::pipeline::check_cluster(&self.policy, host) {
            tracing::error!(error = %e, "cannot compute the cluster CPU");
        }
        // A state directory that cannot be used still leaves the CPU in the metrics.
        self.cluster = host.cluster_cpu_computed().map(|cpu| {
            crate::cluster::watch::tell(&self.cli.snapshot_dir, cpu)
                .unwrap_or_else(|| crate::cluster::watch::Seen::of(cpu))
        });
    }

    /// After a full reconciliation: this host's facts into the snapshot and, with `--publish` or
    /// `[host] publish`, to `DIR/<hostname>.xml`, each written only when it changed.
    fn refresh_host_facts(&self, session: &Session) {
        match host_facts(&session.conn, self.cli.host_name.as_deref()) {
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
        gauges.cluster.clone_from(&self.cluster);
        let rules: Vec<String> = self.policy.rules.iter().map(|r| r.name.clone()).collect();
        let mut counters = self.fleet.counters.clone();
        // The hook's decisions, counted by the hook in the state directory they share; a file
        // that is not counts shows as none until the next hook replaces it.
        counters.hook_decisions = crate::hook_decisions::read(&self.cli.snapshot_dir)
            .unwrap_or_else(|e| {
                tracing::warn!(error = %e, "cannot read the hook's decision counts");
                crate::hook_decisions::Counts::default()
            });
        let text = crate::metrics::render(&gauges, Some(&counters), &rules);
        if let Err(e) = crate::writefile::write_atomic(path, text.as_bytes()) {
            tracing::error!(path = %path.display(), error = %e, "cannot write the metrics file");
        }
    }

    /// SIGHUP: load the policy again and reconcile everything; a policy that does not load is
    /// logged and the old one kept.
    fn reload(
        &mut self,
        session: &Session,
        snapshot: &[PathBuf],
        host: &mut Host,
        defines: &Defines,
    ) {
        match Policy::load(self.cli.policy.as_deref()) {
            Ok(p) => {
                let new_host = match host_for(&p, snapshot, session.libvirt.as_ref()) {
                    Ok(h) => Some(h),
                    Err(e) => {
                        tracing::error!(error = %e, "host facts unusable; keeping the previous ones");
                        None
                    }
                };
                // A policy naming what this host's libvirt does not know would refuse every
                // guest it matches: the last good one stays.
                let broken = new_host.as_ref().unwrap_or(host).policy_errors(&p);
                if !broken.is_empty() {
                    tracing::error!(
                        policy = %p.source,
                        error = %broken.join("; "),
                        "SIGHUP: the new policy names what this host's libvirt does not know; keeping the old one"
                    );
                    return;
                }
                tracing::info!(policy = %p.source, "SIGHUP: policy reloaded; reconciling every guest");
                self.policy = p;
                if let Some(h) = new_host {
                    *host = h;
                }
                self.reconcile(session, None, host, defines);
            }
            Err(e) => {
                tracing::error!(error = %e.one_line(), "SIGHUP: the new policy does not load; keeping the old one");
            }
        }
    }
}

/// How long a guest's definitions must be quiet before it is judged: an orchestrator's defines
/// in quick succession (Nova's at resize, volume attach, hard reboot; a client retrying) are
/// over, and the daemon's define does not land among them, where it could replace one it has
/// not read (libvirt has no compare-and-set: docs/daemon.md).
const QUIET: Duration = Duration::from_millis(500);

pub(super) fn cmd_daemon(cli: &Cli, a: &DaemonArgs) -> i32 {
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
        fleet: GuestStates::default(),
        cluster: None,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::apply::tests::{applied, changed};
    use crate::log::{Decision, capture};
    use crate::verdict::Verdict;

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
            (
                applied(Report::Busy, Some(Verdict::NeedsRewrite), None),
                Decision::DaemonTransient,
                "needs-rewrite",
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
}
