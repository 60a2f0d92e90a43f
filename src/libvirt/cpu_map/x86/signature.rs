//! A model's `<signature>`s (libvirt's `virCPUx86Signature`, `x86ModelParseSignatures`).

use super::attr_u32;
use crate::libvirt::cpu_map::{CpuMapError, invalid};
use std::path::Path;

/// One `<signature family=F model=M [stepping=S]>` of a model (libvirt's `virCPUx86Signature`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct X86Signature {
    /// The CPU family (`family`, as [`crate::libvirt::cpudata::X86CpuData::signature`] computes it).
    pub family: u32,
    /// The CPU model number (`model`).
    pub model: u32,
    /// The steppings it covers as a bit mask (bit N: stepping N; `stepping='0-4'` written by
    /// libvirt 9.5 and later for Skylake-Server and its successors), None for every stepping.
    pub steppings: Option<u16>,
}

impl X86Signature {
    /// Whether a CPU of `family`, `model` and `stepping` is this signature's (libvirt's
    /// `virCPUx86SignaturesMatch` for one signature).
    #[must_use]
    pub fn matches(&self, family: u32, model: u32, stepping: u32) -> bool {
        self.family == family
            && self.model == model
            && self
                .steppings
                .is_none_or(|s| stepping < 16 && s & (1 << stepping) != 0)
    }
}

/// The `<signature>` children of the model `name` (libvirt's `x86ModelParseSignatures`).
///
/// # Errors
/// [`CpuMapError::Invalid`] for a missing or non-numeric `family` or `model`, or a `stepping`
/// that is not a list of numbers and ranges below 16 (libvirt: "Invalid CPU signature ... in
/// model %s").
pub(super) fn signatures(
    path: &Path,
    name: &str,
    node: roxmltree::Node<'_, '_>,
) -> Result<Vec<X86Signature>, CpuMapError> {
    let mut out = Vec::new();
    for sig in node.children().filter(|n| n.has_tag_name("signature")) {
        let steppings = match sig.attribute("stepping") {
            None => None,
            Some(text) => Some(stepping_mask(text).ok_or_else(|| {
                invalid(
                    path,
                    format!("Invalid CPU signature stepping '{text}' in model {name}"),
                )
            })?),
        };
        out.push(X86Signature {
            family: attr_u32(path, sig, "family")?,
            model: attr_u32(path, sig, "model")?,
            steppings,
        });
    }
    Ok(out)
}

/// A `stepping` list (`0-4`, `5,7`, `10-11`: libvirt's bitmap syntax without negation) as a
/// bit mask; None when it is not one or names a stepping above 15.
fn stepping_mask(text: &str) -> Option<u16> {
    let mut mask = 0u16;
    for part in text.split(',').map(str::trim) {
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse::<u32>().ok()?, b.trim().parse::<u32>().ok()?),
            None => {
                let n = part.parse::<u32>().ok()?;
                (n, n)
            }
        };
        if lo > hi || hi > 15 {
            return None;
        }
        for s in lo..=hi {
            mask |= 1 << s;
        }
    }
    Some(mask)
}
