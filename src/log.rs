//! Where the hook's decisions are logged: journald when it listens, else a file under
//! `/var/log/virt-cpu-policy/`, never stdout (libvirt reads a hook's stdout as XML on migrate and
//! restore) and never domain XML (on migrate it carries secrets).

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
            let layer = layer.with_syslog_identifier(SYSLOG_IDENTIFIER.to_string());
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
