//! The library's error type: everything that stops the tool before it can judge a domain.
//!
//! These are the "bad input" failures (exit code 2 at the command line): an unreadable or
//! malformed document or policy, a refused DTD, an oversized input, an unreadable host-fact file.
//! A domain that can be read but cannot be made to conform is *not* an error here: that is a
//! [`crate::finding::Finding`] with severity error (exit code 1).

use std::fmt::Write as _;
use std::path::PathBuf;

/// Why the tool could not read its input, policy or host facts.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read (missing, a directory, no permission...).
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file named on the command line or in the policy.
        path: PathBuf,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// A file could not be written (`--in-place`).
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file being replaced.
        path: PathBuf,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// The domain document, or a file read as facts, is over its limit
    /// ([`crate::xml::MAX_INPUT_BYTES`], [`crate::readfile::MAX_FACT_BYTES`]).
    #[error(
        "{what} is over the limit of {limit} bytes (at least {size} bytes); refusing to parse it"
    )]
    TooLarge {
        /// "the domain XML" or a file name.
        what: String,
        /// Its size in bytes, as far as known: a file's size, or what was read of a stream
        /// (the limit plus one byte: reading stops there).
        size: usize,
        /// The limit in bytes.
        limit: usize,
    },
    /// The document is not UTF-8 (libvirt writes and reads its XML, domains and host facts alike,
    /// as UTF-8).
    #[error(
        "{what} is not valid UTF-8 (bad or NUL byte at offset {offset}; UTF-16?); libvirt's XML is UTF-8"
    )]
    NotUtf8 {
        /// "the domain XML" or a file name.
        what: String,
        /// Offset of the first invalid byte.
        offset: usize,
    },
    /// The document is not well-formed XML, or uses a DTD or entities (refused: libvirt's schema
    /// has no DTD, and entity expansion is the classic "billion laughs" attack).
    #[error("{what} is not acceptable XML: {message}")]
    Xml {
        /// "the domain XML" or a file name.
        what: String,
        /// roxmltree's description, with line and column.
        message: String,
    },
    /// The document is XML but not a libvirt domain (root element is not `<domain>`).
    #[error(
        "{what} is not a libvirt domain: the root element is <{root}>, expected <domain> in libvirt's namespace (no xmlns)"
    )]
    NotADomain {
        /// "the domain XML" or a file name.
        what: String,
        /// The root element's name.
        root: String,
    },
    /// The policy file does not parse or has bad keys or values; each message names the key and
    /// its line and column. Shown one mistake per line (`policy P: 2 errors:` and the two); see
    /// [`Error::one_line`] for logs.
    #[error("policy {path}: {}", bulleted(errors))]
    Policy {
        /// The policy file ("built-in" for the compiled-in default).
        path: String,
        /// What is wrong, with line and column: one entry per mistake, never empty.
        errors: Vec<String>,
    },
    /// A host-fact file (`--caps`, `[host] capabilities`, cpu_map) is unusable.
    #[error("host facts: {0}")]
    Host(String),
    /// A policy's `cpu.model = "baseline"` has no answer: a `[host] cluster` file is missing or
    /// unreadable, the cluster has no baseline (no CPU common to the hosts, hosts of an arch
    /// without custom models such as aarch64) or libvirt's cpu_map is absent. The message names
    /// the policy and the file or the reason.
    #[error("cpu.model = \"baseline\": {0}")]
    Cluster(String),
}

impl From<crate::readfile::ReadError> for Error {
    fn from(e: crate::readfile::ReadError) -> Error {
        match e {
            crate::readfile::ReadError::Io { path, source } => Error::Read { path, source },
            crate::readfile::ReadError::TooLarge { path, size, limit } => Error::TooLarge {
                what: path.display().to_string(),
                size: usize::try_from(size).unwrap_or(usize::MAX),
                limit,
            },
        }
    }
}

/// One mistake as is; several as a count and one indented line each, for a terminal.
fn bulleted(errors: &[String]) -> String {
    match errors {
        [one] => one.clone(),
        many => format!(
            "{} errors:{}",
            many.len(),
            many.iter().fold(String::new(), |mut s, m| {
                let _ = write!(s, "\n  - {m}");
                s
            })
        ),
    }
}

impl Error {
    /// The error as one line, for a log line or a journal `MESSAGE`: a policy's mistakes joined
    /// with "; " where [`Display`](std::fmt::Display) gives each its own line (a log line cut in
    /// several reads as several entries), any other line break a space.
    #[must_use]
    pub fn one_line(&self) -> String {
        let text = match self {
            Error::Policy { path, errors } if errors.len() > 1 => {
                format!(
                    "policy {path}: {} errors: {}",
                    errors.len(),
                    errors.join("; ")
                )
            }
            _ => self.to_string(),
        };
        text.replace(['\n', '\r'], " ")
    }

    /// A stable short name of the kind of error, for logs (the journal's `CODE` field): `read`,
    /// `write`, `too-large`, `not-utf8`, `xml`, `not-a-domain`, `policy`, `host`, `cluster`.
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            Error::Read { .. } => "read",
            Error::Write { .. } => "write",
            Error::TooLarge { .. } => "too-large",
            Error::NotUtf8 { .. } => "not-utf8",
            Error::Xml { .. } => "xml",
            Error::NotADomain { .. } => "not-a-domain",
            Error::Policy { .. } => "policy",
            Error::Host(_) => "host",
            Error::Cluster(_) => "cluster",
        }
    }
}

/// Result with the library's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
