//! vCPU counts as libvirt reads them from a domain: `<vcpu>` (maximum and `current`),
//! `<cpu><topology>`, and cpusets (`<numa><cell cpus='0-3,5'>`).
//!
//! Readers only: deciding new values is the rewrite's job ([`crate::rewrite`]), judging them the
//! validator's ([`crate::validate`]).

use crate::xml::text_of;
use roxmltree::Node;
use std::collections::BTreeSet;

/// x86's vCPU count above which QEMU needs x2APIC IDs delivered through an IOMMU in extended
/// interrupt mode (libvirt: "more than 255 vCPUs require extended interrupt mode enabled on the
/// iommu device").
pub const X86_XAPIC_LIMIT: u32 = 255;

/// Parse a libvirt cpuset (`0-3,5,^2`) into the set of ids; None when malformed or over `limit`
/// ids (a hostile `0-4294967295` must not allocate).
#[must_use]
pub fn parse_cpuset(s: &str, limit: u32) -> Option<BTreeSet<u32>> {
    let mut set = BTreeSet::new();
    let mut minus = BTreeSet::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (neg, part) = match part.strip_prefix('^') {
            Some(p) => (true, p),
            None => (false, part),
        };
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse::<u32>().ok()?, b.trim().parse::<u32>().ok()?),
            None => {
                let n = part.parse::<u32>().ok()?;
                (n, n)
            }
        };
        if a > b || b >= limit {
            return None;
        }
        let target = if neg { &mut minus } else { &mut set };
        target.extend(a..=b);
    }
    Some(set.difference(&minus).copied().collect())
}

/// Format ids as a libvirt cpuset with ranges (`0-3,8`).
#[must_use]
pub fn format_cpuset(set: &BTreeSet<u32>) -> String {
    let mut parts = Vec::new();
    let mut it = set.iter().copied().peekable();
    while let Some(start) = it.next() {
        let mut end = start;
        while it.peek() == Some(&(end + 1)) {
            end += 1;
            it.next();
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    parts.join(",")
}

/// `<cpu><topology>` as numbers; missing attributes are 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Topology {
    /// `sockets`.
    pub sockets: u32,
    /// `dies`.
    pub dies: u32,
    /// `clusters` (libvirt >= 10.1; never written on x86).
    pub clusters: u32,
    /// `cores`.
    pub cores: u32,
    /// `threads`.
    pub threads: u32,
}

impl Topology {
    /// One socket of one core with one thread.
    pub const ONE: Topology = Topology {
        sockets: 1,
        dies: 1,
        clusters: 1,
        cores: 1,
        threads: 1,
    };

    /// Read a `<topology>` element as libvirt does. `clusters` says whether that libvirt reads the
    /// `clusters` attribute (10.1.0 and later, [`crate::domain_facts::VersionRule::Clusters`]): an
    /// older one ignores it, so it counts as 1; `dies` and `clusters` are optional (1).
    ///
    /// # Errors
    /// libvirt's refusal (`src/conf/cpu_conf.c`): "Missing required attribute 'sockets' in
    /// element 'topology'" (likewise `cores`, `threads`), or an attribute that is not a positive
    /// integer.
    pub fn read(node: Node<'_, '_>, clusters: bool) -> Result<Topology, String> {
        let get = |n: &str, required: bool| -> Result<u32, String> {
            match node.attribute(n) {
                None if required => Err(format!(
                    "Missing required attribute '{n}' in element 'topology'"
                )),
                None => Ok(1),
                Some(v) => v
                    .trim()
                    .parse::<u32>()
                    .ok()
                    .filter(|v| *v > 0)
                    .ok_or_else(|| format!("<topology {n}='{v}'> is not a positive integer")),
            }
        };
        Ok(Topology {
            sockets: get("sockets", true)?,
            dies: get("dies", false)?,
            clusters: if clusters { get("clusters", false)? } else { 1 },
            cores: get("cores", true)?,
            threads: get("threads", true)?,
        })
    }

    /// sockets × dies × clusters × cores × threads, saturating at `u64::MAX`: five u32 factors
    /// can need 160 bits, but any product above `u32::MAX` is already more vCPUs than libvirt
    /// allows ("cpu topology results in more than 4294967295 cpus"), so comparisons with a
    /// maximum stay right.
    #[must_use]
    pub fn product(&self) -> u64 {
        [
            self.sockets,
            self.dies,
            self.clusters,
            self.cores,
            self.threads,
        ]
        .iter()
        .fold(1u64, |p, v| p.saturating_mul(u64::from(*v)))
    }

    /// `sockets=S dies=D cores=C threads=T` (and `clusters=N` between dies and cores when it is
    /// not 1), for messages.
    #[must_use]
    pub fn describe(&self) -> String {
        let clusters = if self.clusters == 1 {
            String::new()
        } else {
            format!(" clusters={}", self.clusters)
        };
        format!(
            "sockets={} dies={}{clusters} cores={} threads={}",
            self.sockets, self.dies, self.cores, self.threads
        )
    }
}

/// `<vcpu>`'s maximum and current count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VcpuCount {
    /// The element text: the maximum.
    pub max: u32,
    /// `current`, or the maximum when absent.
    pub current: u32,
    /// Whether `current` was written.
    pub current_written: bool,
}

/// Read `<vcpu>`.
///
/// # Errors
/// A message naming the bad value when the text or `current` is not a vCPU count.
pub fn read_vcpu(vcpu: Node<'_, '_>) -> Result<VcpuCount, String> {
    let t = text_of(vcpu).unwrap_or_default();
    let max: u32 = t
        .parse()
        .map_err(|_| format!("<vcpu> '{t}' is not a vCPU count"))?;
    let (current, current_written) = match vcpu.attribute("current") {
        Some(c) => (
            c.trim()
                .parse()
                .map_err(|_| format!("<vcpu current='{c}'> is not a vCPU count"))?,
            true,
        ),
        None => (max, false),
    };
    Ok(VcpuCount {
        max,
        current,
        current_written,
    })
}

/// The ids of `<vcpus>`' entries with `enabled='yes'` below the maximum `max`, in the list's
/// order (libvirt's `<vcpus>`: the vCPUs it starts; entries it would refuse are left to the
/// vCPU checks).
pub fn enabled_vcpu_ids<'a>(vcpus: Node<'a, 'a>, max: u32) -> impl Iterator<Item = u32> + 'a {
    vcpus
        .children()
        .filter(|e| {
            crate::xml::is_libvirt_element(*e, "vcpu") && e.attribute("enabled") == Some("yes")
        })
        .filter_map(|e| e.attribute("id")?.trim().parse::<u32>().ok())
        .filter(move |id| *id < max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpusets() {
        let s = parse_cpuset("0-3,5,^2", 100).unwrap();
        assert_eq!(s.into_iter().collect::<Vec<_>>(), vec![0, 1, 3, 5]);
        assert_eq!(
            format_cpuset(&[0, 1, 2, 3, 8, 10, 11].into_iter().collect()),
            "0-3,8,10-11"
        );
        assert!(parse_cpuset("0-4294967295", 1000).is_none());
        assert!(parse_cpuset("3-1", 10).is_none());
        assert!(parse_cpuset("x", 10).is_none());
    }
}
