//! Why a CPU computation over facts files could not be made: libvirt's words for an unknown
//! model, feature or vendor, CPUs without a common one, or input that is not the facts expected.

use crate::libvirt::cpu_map::CpuMapError;
use std::path::PathBuf;

/// Why a CPU computation over hosts' and guests' facts (a baseline, a comparison, a cluster's
/// report) could not be made. [`CpuError::is_incompatible`] tells the
/// answers about the hosts (exit 1 at the command line) from bad input (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum CpuError {
    /// A file could not be read, is too large, not UTF-8 or not XML.
    #[error(transparent)]
    Input(#[from] crate::Error),
    /// A file is XML but not host facts (or not the guest CPU expected).
    #[error("{}: {message}", .path.display())]
    Facts {
        /// The file.
        path: PathBuf,
        /// What is wrong, one sentence.
        message: String,
    },
    /// No facts file was given.
    #[error("no host facts given")]
    NoHosts,
    /// libvirt's cpu_map cannot be loaded.
    #[error(transparent)]
    CpuMap(#[from] CpuMapError),
    /// A CPU names a model the cpu_map does not define (libvirt: "Unknown CPU model %s").
    #[error(
        "{}: unknown CPU model '{model}': libvirt's cpu_map at {} does not define it (libvirt: \"Unknown CPU model {model}\"; a newer libvirt's cpu_map may)",
        .path.display(), .map.display()
    )]
    UnknownModel {
        /// The facts or domain file.
        path: PathBuf,
        /// The model.
        model: String,
        /// The cpu_map directory.
        map: PathBuf,
    },
    /// A CPU names a feature the cpu_map does not define (libvirt: "Unknown CPU feature %s").
    #[error(
        "{}: unknown CPU feature '{feature}': libvirt's cpu_map at {} does not define it (libvirt: \"Unknown CPU feature {feature}\"; a newer libvirt's cpu_map may)",
        .path.display(), .map.display()
    )]
    UnknownFeature {
        /// The facts or domain file.
        path: PathBuf,
        /// The feature.
        feature: String,
        /// The cpu_map directory.
        map: PathBuf,
    },
    /// A CPU names a vendor the cpu_map does not define (libvirt: "Unknown CPU vendor %s").
    #[error(
        "{}: unknown CPU vendor '{vendor}': libvirt's cpu_map at {} does not define it (libvirt: \"Unknown CPU vendor {vendor}\")",
        .path.display(), .map.display()
    )]
    UnknownVendor {
        /// The facts or domain file.
        path: PathBuf,
        /// The vendor.
        vendor: String,
        /// The cpu_map directory.
        map: PathBuf,
    },
    /// Hosts of different arches cannot share a guest CPU.
    #[error("the hosts are of different arches: {0}")]
    MixedArch(String),
    /// No x86 CPU every host can run: libvirt's "CPUs are incompatible" (no common feature) or
    /// "Cannot find suitable CPU model for given data" (no model fits, e.g. none usable on
    /// every host).
    #[error("{0}")]
    Incompatible(String),
}

impl CpuError {
    /// Whether this is an answer about the hosts (no common CPU) rather than bad input.
    #[must_use]
    pub fn is_incompatible(&self) -> bool {
        matches!(self, CpuError::Incompatible(_))
    }

    /// [`CpuError::Facts`]: `path` is not the facts expected, `message` says why.
    #[must_use]
    pub fn facts(path: &std::path::Path, message: &str) -> CpuError {
        CpuError::Facts {
            path: path.to_owned(),
            message: message.to_string(),
        }
    }
}
