//! Where the hook's decisions are logged: journald when it listens, else a file under
//! `/var/log/virt-cpu-policy/`, never stdout (libvirt reads a hook's stdout as XML on migrate and
//! restore) and never domain XML (on migrate it carries secrets).
//!
//! Every decision of the hook and the daemon goes through [`decision`], which gives it structured
//! fields: `GUEST`, `OPERATION`, `VERDICT`, `RULE`, `CODE`, `DECISION` and a stable `MESSAGE_ID`
//! per kind of decision ([`Decision`]), so `journalctl MESSAGE_ID=...` and log shippers can select
//! them; the hook's warnings go through [`warning`], with a `MESSAGE_ID` of their own. Field names
//! reach the journal unprefixed (tracing-journald's default `F_` prefix is switched off) and
//! upper-cased.
//!
//! The journal's `PRIORITY` is what a syslog reader expects of each record (docs/journal.md): the
//! hook's `INFO` (a guest let through, nothing wrong) is 6 (info), not tracing-journald's default 5
//! (notice); the daemon keeps 5 for `INFO`, which it uses for what it changed (a rewritten
//! definition) and for its own life cycle.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use tracing_subscriber::prelude::*;

/// The syslog identifier of every journald entry.
pub const SYSLOG_IDENTIFIER: &str = "virt-cpu-policy";

/// The log file used where journald is absent (CI containers have no systemd).
pub const LOG_FILE: &str = "/var/log/virt-cpu-policy/hook.log";

/// Where logging went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// journald, with [`SYSLOG_IDENTIFIER`].
    Journald,
    /// A log file (appended).
    File(PathBuf),
    /// stderr, in the log file's format: the log file could not be opened (libvirt keeps a
    /// hook's stderr in its own log, so the decision is still recorded).
    Stderr,
    /// Nowhere: a subscriber was already installed.
    Nowhere,
}

/// Install the global `tracing` subscriber: `file` if given, else journald, else [`LOG_FILE`];
/// when the file cannot be opened, one line on stderr says so and the records go to stderr.
/// Never fails: logging that cannot be set up must not stop a guest.
pub fn init(file: Option<&Path>) -> Target {
    if file.is_none() {
        if let Ok(layer) = tracing_journald::layer() {
            let priorities = tracing_journald::PriorityMappings {
                info: tracing_journald::Priority::Informational,
                ..tracing_journald::PriorityMappings::new()
            };
            let layer = layer
                .with_syslog_identifier(SYSLOG_IDENTIFIER.to_string())
                .with_field_prefix(None)
                .with_priority_mappings(priorities);
            if tracing_subscriber::registry()
                .with(layer)
                .try_init()
                .is_ok()
            {
                return Target::Journald;
            }
        }
    }
    let path = file.map_or_else(|| PathBuf::from(LOG_FILE), Path::to_path_buf);
    // Only the default directory is made: a named file in a directory that does not exist is a
    // mistake to report (below), not a directory to create.
    if file.is_none() {
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
    }
    // O_NONBLOCK: a FIFO without a reader fails to open (ENXIO) instead of hanging the hook and
    // the guest start behind it; a regular file is not affected.
    let f = match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&path)
    {
        Ok(f) => f,
        Err(e) => return init_stderr(&path, &e),
    };
    let layer = tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .with_target(false)
        .with_writer(std::sync::Mutex::new(f));
    if tracing_subscriber::registry()
        .with(layer)
        .try_init()
        .is_ok()
    {
        Target::File(path)
    } else {
        Target::Nowhere
    }
}

/// The log file `path` could not be opened (`e`): say so in one line on stderr and log there
/// instead, so a decision is never recorded nowhere.
fn init_stderr(path: &Path, e: &std::io::Error) -> Target {
    crate::stdio::message_line(&format!(
        "{SYSLOG_IDENTIFIER}: cannot open the log file {}: {e}; logging to stderr",
        path.display()
    ));
    // No internal error reports: tracing-subscriber would print them with eprintln!, which
    // panics on a closed stderr.
    let layer = tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .with_target(false)
        .with_writer(std::io::stderr)
        .log_internal_errors(false);
    if tracing_subscriber::registry()
        .with(layer)
        .try_init()
        .is_ok()
    {
        Target::Stderr
    } else {
        Target::Nowhere
    }
}

/// Install the daemon's subscriber: stderr when it is a terminal (run by hand), else journald,
/// else stderr (which systemd captures anyway).
pub fn init_daemon() {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        if let Ok(layer) = tracing_journald::layer() {
            let layer = layer
                .with_syslog_identifier("virt-cpu-policyd".to_string())
                .with_field_prefix(None)
                .with_filter(tracing_subscriber::filter::LevelFilter::INFO);
            if tracing_subscriber::registry()
                .with(layer)
                .try_init()
                .is_ok()
            {
                return;
            }
        }
    }
    let layer = tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .with_target(false)
        .with_writer(std::io::stderr)
        .with_filter(tracing_subscriber::filter::LevelFilter::INFO);
    let _ = tracing_subscriber::registry().with(layer).try_init();
}

/// The kinds of decision the hook and the daemon log, each with a stable journal `MESSAGE_ID`
/// (128-bit, systemd catalog style: `journalctl MESSAGE_ID=...`). docs/journal.md
/// lists them; an id never changes meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Decision {
    /// Hook: the guest is let through, nothing wrong found.
    HookAllowed,
    /// Hook: the guest does not conform to the policy but is let through (`on_violation = "warn"`,
    /// audit mode, or a migrate/restore, where the CPU cannot change).
    HookViolationAllowed,
    /// Hook: refused because the guest does not conform (`on_violation = "deny"`).
    HookViolationRefused,
    /// Hook: refused because libvirt or QEMU would refuse the guest anyway, or this host cannot
    /// run it (migrate/restore).
    HookLibvirtRefused,
    /// Hook: the hook could not check the guest (policy, XML or host facts unusable) and lets it
    /// through (`on_error = "allow"`).
    HookErrorAllowed,
    /// Hook: the hook could not check the guest and refuses it (`on_error = "deny"`).
    HookErrorRefused,
    /// Daemon: the stored definition conforms (or is out of scope); nothing done.
    DaemonUnchanged,
    /// Daemon: the stored definition was rewritten and defined (old one backed up).
    DaemonRewritten,
    /// Daemon: the definition needs a rewrite but the policy's mode is audit; nothing defined.
    DaemonAuditOnly,
    /// Daemon: the definition cannot conform to the policy; nothing defined.
    DaemonCannotConform,
    /// Daemon: the definition could not be read, backed up or defined.
    DaemonFailed,
    /// Daemon: a transient guest (no stored definition) was left alone, or one another client
    /// undefined or was defining meanwhile (nothing defined; the latter judged once its
    /// definitions are quiet).
    DaemonTransient,
}

impl Decision {
    /// Every kind, hook first.
    pub const ALL: [Decision; 12] = [
        Decision::HookAllowed,
        Decision::HookViolationAllowed,
        Decision::HookViolationRefused,
        Decision::HookLibvirtRefused,
        Decision::HookErrorAllowed,
        Decision::HookErrorRefused,
        Decision::DaemonUnchanged,
        Decision::DaemonRewritten,
        Decision::DaemonAuditOnly,
        Decision::DaemonCannotConform,
        Decision::DaemonFailed,
        Decision::DaemonTransient,
    ];

    /// The hook's kinds: the first six of [`Decision::ALL`] (what the hook counts:
    /// [`crate::hook_decisions`]).
    pub const HOOK: [Decision; 6] = {
        let mut hook = [Decision::HookAllowed; 6];
        let mut i = 0;
        while i < hook.len() {
            hook[i] = Decision::ALL[i];
            i += 1;
        }
        hook
    };

    /// The kind named `name` ([`Decision::name`]), or None.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Decision> {
        Decision::ALL.into_iter().find(|d| d.name() == name)
    }

    /// The journal `MESSAGE_ID`: 32 lowercase hex digits, generated once per kind.
    #[must_use]
    pub fn message_id(self) -> &'static str {
        match self {
            Decision::HookAllowed => "1bf6f9280b904f00aa082c3206e10849",
            Decision::HookViolationAllowed => "ae90be5fa89e42ffbcc423cedbe8c7f4",
            Decision::HookViolationRefused => "4ae705035d2441d08a09a18dfcbc09be",
            Decision::HookLibvirtRefused => "b452576bc8994077a905f36d2baf9f87",
            Decision::HookErrorAllowed => "f3b0c6b0d70941ceaf632ba6b321e054",
            Decision::HookErrorRefused => "3008fddf2ee348799ea485709f14b359",
            Decision::DaemonUnchanged => "2ead3107e47d4e8a961c77f4ca4acd6b",
            Decision::DaemonRewritten => "2c96ea148aa54039a5454b33a4226ce8",
            Decision::DaemonAuditOnly => "3bdad03da69849648dcd76276e3234dc",
            Decision::DaemonCannotConform => "60e469bf8c0444f29511f772e7152d13",
            Decision::DaemonFailed => "1a69eea2e0c541739f29ee4c01103772",
            Decision::DaemonTransient => "57690aca3b484143b0c163c442510fa8",
        }
    }

    /// Whether the hook refuses the guest with this decision (`HookViolationRefused`,
    /// `HookLibvirtRefused`, `HookErrorRefused`); the daemon's decisions refuse nothing.
    #[must_use]
    pub fn refuses(self) -> bool {
        matches!(
            self,
            Decision::HookViolationRefused
                | Decision::HookLibvirtRefused
                | Decision::HookErrorRefused
        )
    }

    /// The hook's `VERDICT` with this decision: `refuse` or `allow`.
    #[must_use]
    pub fn hook_verdict(self) -> &'static str {
        if self.refuses() { "refuse" } else { "allow" }
    }

    /// A short name for the kind (`hook-violation-refused`), as docs/journal.md lists it.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Decision::HookAllowed => "hook-allowed",
            Decision::HookViolationAllowed => "hook-violation-allowed",
            Decision::HookViolationRefused => "hook-violation-refused",
            Decision::HookLibvirtRefused => "hook-libvirt-refused",
            Decision::HookErrorAllowed => "hook-error-allowed",
            Decision::HookErrorRefused => "hook-error-refused",
            Decision::DaemonUnchanged => "daemon-unchanged",
            Decision::DaemonRewritten => "daemon-rewritten",
            Decision::DaemonAuditOnly => "daemon-audit-only",
            Decision::DaemonCannotConform => "daemon-cannot-conform",
            Decision::DaemonFailed => "daemon-failed",
            Decision::DaemonTransient => "daemon-transient",
        }
    }
}

/// The fields of one decision besides its kind and message. Never domain XML.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fields<'a> {
    /// The guest's name (`GUEST`).
    pub guest: &'a str,
    /// The hook's operation (`prepare`, `started`, `migrate`, `restore`) or the daemon's
    /// (`reconcile`, `apply`) (`OPERATION`).
    pub operation: &'a str,
    /// The hook's verdict (`allow`, `refuse`), or the stored definition's verdict as `check`
    /// names it (`conforms`, `needs-rewrite`, `cannot-conform`, `out-of-scope`; `transient` for a
    /// guest without one, `error` when it could not be read or parsed) for the daemon
    /// (`VERDICT`).
    pub verdict: &'a str,
    /// The policy rule involved (`libvirt: CODE` for libvirt's own rules), when one is (`RULE`).
    pub rule: Option<&'a str>,
    /// The finding or error code (`cpu-level`, `topology-mismatch`, `policy`...), when there is
    /// one (`CODE`).
    pub code: Option<&'a str>,
    /// What was done, in words (`allow (on_violation = warn)`) (`DECISION`).
    pub decision: &'a str,
}

/// Log one decision at `level` with its fields and `MESSAGE_ID`; `message` (the journal's
/// `MESSAGE`) is the one-line reason.
pub fn decision(kind: Decision, level: tracing::Level, f: &Fields<'_>, message: &str) {
    // tracing fixes an event's level at its call site: one call per level.
    macro_rules! event {
        ($mac:ident) => {
            tracing::$mac!(
                message_id = kind.message_id(),
                guest = f.guest,
                operation = f.operation,
                verdict = f.verdict,
                rule = f.rule,
                code = f.code,
                decision = f.decision,
                "{message}"
            )
        };
    }
    match level {
        tracing::Level::ERROR => event!(error),
        tracing::Level::WARN => event!(warn),
        tracing::Level::INFO => event!(info),
        _ => event!(debug),
    }
}

/// The journal `MESSAGE_ID` of a warning the hook logs beside its decision (a finding libvirt
/// accepts with a warning, such as `match` under host-model): not a decision, so not a
/// [`Decision`], but selectable all the same. docs/journal.md lists it as `hook-warning`.
pub const HOOK_WARNING_ID: &str = "fc3e55da7ca34faa94b17bcbd67937ba";

/// Log one warning of the hook at WARN: `MESSAGE_ID` [`HOOK_WARNING_ID`], `GUEST`, `OPERATION`,
/// `CODE`, `RULE` when a rule is involved, and `message` (the finding, one line) as `MESSAGE`.
pub fn warning(guest: &str, operation: &str, rule: Option<&str>, code: &str, message: &str) {
    tracing::warn!(
        message_id = HOOK_WARNING_ID,
        guest,
        operation,
        rule,
        code,
        "{message}"
    );
}

/// A `tracing` layer that keeps every event's fields, for tests of what is logged.
#[cfg(test)]
pub(crate) mod capture {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};
    use tracing::field::{Field, Visit};
    use tracing_subscriber::prelude::*;

    /// One event: its level and its fields by name (`message` included).
    pub(crate) type Event = (tracing::Level, BTreeMap<String, String>);

    struct Fields<'a>(&'a mut BTreeMap<String, String>);

    impl Visit for Fields<'_> {
        fn record_str(&mut self, field: &Field, value: &str) {
            self.0.insert(field.name().into(), value.into());
        }
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            self.0.insert(field.name().into(), format!("{value:?}"));
        }
    }

    struct Layer(Arc<Mutex<Vec<Event>>>);

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Layer {
        fn on_event(
            &self,
            event: &tracing::Event<'_>,
            _: tracing_subscriber::layer::Context<'_, S>,
        ) {
            let mut fields = BTreeMap::new();
            event.record(&mut Fields(&mut fields));
            if let Ok(mut v) = self.0.lock() {
                v.push((*event.metadata().level(), fields));
            }
        }
    }

    /// Run `f` with a subscriber that records every event (all levels); return the events.
    pub(crate) fn events(f: impl FnOnce()) -> Vec<Event> {
        let store = Arc::new(Mutex::new(Vec::new()));
        let sub = tracing_subscriber::registry().with(Layer(Arc::clone(&store)));
        tracing::subscriber::with_default(sub, f);
        store.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hook::{Answer, HookOptions, Phase, decide};

    #[test]
    fn message_ids_are_128_bit_hex_and_distinct() {
        let mut seen = std::collections::BTreeSet::new();
        let ids = Decision::ALL.map(|d| (d.message_id(), d.name()));
        for (id, name) in ids.into_iter().chain([(HOOK_WARNING_ID, "hook-warning")]) {
            assert_eq!(id.len(), 32, "{id}");
            assert!(
                id.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            );
            assert!(seen.insert(id), "{id} used twice");
            assert!(seen.insert(name));
        }
    }

    #[test]
    fn the_hook_kinds_are_the_hooks() {
        for d in Decision::ALL {
            assert_eq!(
                Decision::HOOK.contains(&d),
                d.name().starts_with("hook-"),
                "{d:?}"
            );
            assert_eq!(Decision::from_name(d.name()), Some(d));
        }
        assert_eq!(Decision::from_name("hook"), None);
    }

    const CLOUDSTACK: &str = "<domain type='kvm'>\n  <name>i-2-14-VM</name>\n  <memory unit='KiB'>524288</memory>\n  <vcpu>2</vcpu>\n  <os>\n    <type arch='x86_64' machine='pc'>hvm</type>\n  </os>\n  <cpu><topology sockets='1' cores='2' threads='1' /></cpu>\n  <devices><graphics type='vnc' passwd='s3cret'/></devices>\n</domain>\n";

    fn hook_events(policy: &str, xml: &str, phase: Phase) -> (Answer, Vec<capture::Event>) {
        let dir = std::env::temp_dir().join(format!(
            "vcp-log-{}-{:x}",
            std::process::id(),
            policy.len() * 131 + xml.len()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("policy.toml");
        std::fs::write(&p, policy).unwrap();
        let opts = HookOptions {
            policy: Some(p),
            snapshot_dir: Some(dir.clone()),
            qemu_cache: Some(PathBuf::new()),
            ..HookOptions::default()
        };
        let mut decided = None;
        let events =
            capture::events(|| decided = Some(decide("i-2-14-VM", phase, xml.as_bytes(), &opts)));
        std::fs::remove_dir_all(&dir).ok();
        let decided = decided.expect("the hook decided");
        // The kind the hook returns (what it counts) is the kind it logged.
        let logged: Vec<&str> = events
            .iter()
            .filter_map(|(_, f)| f.get("message_id"))
            .filter(|id| Decision::ALL.iter().any(|d| d.message_id() == id.as_str()))
            .map(String::as_str)
            .collect();
        assert_eq!(
            logged,
            Vec::from_iter(decided.kind.map(Decision::message_id))
        );
        (decided.answer, events)
    }

    fn policy(on_violation: &str, on_error: &str) -> String {
        format!(
            "version = 1\n[hook]\non_violation = \"{on_violation}\"\non_error = \"{on_error}\"\n[[rule]]\nname = \"x86-64-v2 baseline\"\nmatch = {{ arch = \"x86_64\" }}\ncpu.min_level = \"x86-64-v2\"\n"
        )
    }

    /// The one decision among `events`: it carries every field, and no domain XML.
    fn decision_of(events: &[capture::Event], kind: Decision) -> &capture::Event {
        let with_id: Vec<&capture::Event> = events
            .iter()
            .filter(|(_, f)| {
                f.get("message_id")
                    .is_some_and(|id| Decision::ALL.iter().any(|d| d.message_id() == id))
            })
            .collect();
        assert_eq!(with_id.len(), 1, "one decision per hook run: {events:#?}");
        let e = with_id[0];
        let f = &e.1;
        assert_eq!(f["message_id"], kind.message_id(), "{f:#?}");
        assert_eq!(f["guest"], "i-2-14-VM");
        for key in ["operation", "verdict", "decision", "message"] {
            assert!(!f[key].is_empty(), "{key} empty: {f:#?}");
        }
        for (_, f) in events {
            for v in f.values() {
                assert!(
                    !v.contains("<domain") && !v.contains("s3cret"),
                    "XML logged: {v}"
                );
            }
        }
        e
    }

    #[test]
    fn every_hook_decision_carries_the_journal_fields() {
        let (v, ev) = hook_events(&policy("deny", "allow"), CLOUDSTACK, Phase::Prepare);
        assert!(matches!(v, Answer::Refuse(_)));
        let (level, f) = decision_of(&ev, Decision::HookViolationRefused);
        assert_eq!(*level, tracing::Level::WARN);
        assert_eq!(
            (f["operation"].as_str(), f["verdict"].as_str()),
            ("prepare", "refuse")
        );
        assert_eq!(f["rule"], "x86-64-v2 baseline");
        assert!(f["message"].contains("x86-64-v2"), "{f:#?}");

        let (v, ev) = hook_events(&policy("warn", "allow"), CLOUDSTACK, Phase::Prepare);
        assert_eq!(v, Answer::Allow);
        let (_, f) = decision_of(&ev, Decision::HookViolationAllowed);
        assert_eq!(f["verdict"], "allow");
        assert_eq!(f["decision"], "allow (on_violation = warn)");

        let conforming = CLOUDSTACK.replace(
            "<cpu><topology sockets='1' cores='2' threads='1' /></cpu>",
            "<cpu mode='custom'><model>Nehalem</model></cpu>",
        );
        let (v, ev) = hook_events(&policy("deny", "allow"), &conforming, Phase::Prepare);
        assert_eq!(v, Answer::Allow);
        let (level, f) = decision_of(&ev, Decision::HookAllowed);
        assert_eq!(*level, tracing::Level::INFO);
        assert!(!f.contains_key("rule") && !f.contains_key("code"), "{f:#?}");

        // libvirt would refuse: topology product 2, maximum 3.
        let topo = conforming
            .replace("<vcpu>2</vcpu>", "<vcpu>3</vcpu>")
            .replace(
                "<cpu mode='custom'>",
                "<cpu mode='custom'><topology sockets='1' cores='2' threads='1'/>",
            );
        let (v, ev) = hook_events(&policy("warn", "allow"), &topo, Phase::Prepare);
        assert!(matches!(v, Answer::Refuse(_)));
        let (_, f) = decision_of(&ev, Decision::HookLibvirtRefused);
        assert_eq!(f["code"], "topology-mismatch");
        assert_eq!(f["rule"], "libvirt: topology-mismatch");

        for (on_error, kind, verdict) in [
            ("allow", Decision::HookErrorAllowed, "allow"),
            ("deny", Decision::HookErrorRefused, "refuse"),
        ] {
            let (_, ev) = hook_events(&policy("warn", on_error), "<domain", Phase::Migrate);
            let (level, f) = decision_of(&ev, kind);
            assert_eq!(*level, tracing::Level::ERROR);
            assert_eq!(
                (f["operation"].as_str(), f["verdict"].as_str()),
                ("migrate", verdict)
            );
            assert_eq!(
                (f["code"].as_str(), f["rule"].as_str()),
                ("xml", "[hook] on_error")
            );
        }
    }
}
