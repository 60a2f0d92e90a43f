//! Where the hook's decisions are logged: journald when it listens, else a file under
//! `/var/log/virt-cpu-policy/`, never stdout (libvirt reads a hook's stdout as XML on migrate and
//! restore) and never domain XML (on migrate it carries secrets).
//!
//! Every decision of the hook and the daemon goes through [`decision`], which gives it structured
//! fields: `GUEST`, `OPERATION`, `VERDICT`, `RULE`, `CODE`, `DECISION` and a stable `MESSAGE_ID`
//! per kind of decision ([`Decision`]), so `journalctl MESSAGE_ID=...` and log shippers can select
//! them. Field names reach the journal unprefixed (tracing-journald's default `F_` prefix is
//! switched off) and upper-cased.

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
    /// Nowhere: neither journald nor the file could be opened (not root, say).
    Nowhere,
}

/// Install the global `tracing` subscriber: `file` if given, else journald, else [`LOG_FILE`].
/// Never fails: logging that cannot be set up must not stop a guest.
pub fn init(file: Option<&Path>) -> Target {
    if file.is_none() {
        if let Ok(layer) = tracing_journald::layer() {
            let layer = layer
                .with_syslog_identifier(SYSLOG_IDENTIFIER.to_string())
                .with_field_prefix(None);
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
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let Ok(f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
    else {
        return Target::Nowhere;
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
/// (128-bit, systemd catalog style: `journalctl MESSAGE_ID=...`). README.md ("Journal fields")
/// lists them; an id never changes meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    /// Daemon: a transient guest (no stored definition) was left alone.
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

    /// A short name for the kind (`hook-violation-refused`), as README.md lists it.
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
    /// names it (`conforms`, `needs-rewrite`, `cannot-conform`, `out-of-scope`; `error` when it
    /// could not be judged) for the daemon (`VERDICT`).
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
