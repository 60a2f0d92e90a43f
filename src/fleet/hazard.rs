//! The stack's known hazards ([`crate::hazards`]) as reasons of a fleet pair: a guest's arrival
//! on a host whose releases, with its source host's and the guest's shape, meet an entry of the
//! table is `stack-hazard`, naming the entry's symptom, fix and source.

use super::{Fleet, Reason};
use crate::domain::Domain;
use crate::finding::Code;
use crate::hazards::{GuestShape, Hazard, Releases, at_destination, for_guest, sentence};

/// What the table asks of a guest whose reduced domain is `domain`: its domain type (the root's
/// `type`) and its `<topology threads>` (1 without one). The document is parsed only when it
/// names threads: a fleet holds thousands of shapes, and most have no topology.
pub(super) fn shape_of(domain: &str, is_running: bool) -> GuestShape {
    let parsed = domain
        .contains("threads")
        .then(|| Domain::parse(domain, "guest facts").ok())
        .flatten();
    let threads = parsed
        .as_ref()
        .and_then(|d| {
            d.cpus().iter().find_map(|c| {
                crate::xml::child(*c, "topology")
                    .and_then(|t| t.attribute("threads"))
                    .and_then(|t| t.trim().parse::<u32>().ok())
            })
        })
        .unwrap_or(1);
    let virt_type = match &parsed {
        Some(d) => d.virt_type().to_string(),
        None => root_type(domain).unwrap_or_default(),
    };
    GuestShape {
        virt_type,
        threads,
        running: is_running,
    }
}

/// The `type` attribute of the document's root `<domain>`, read from its text.
fn root_type(domain: &str) -> Option<String> {
    let start = domain.find("<domain")?;
    let tag = &domain[start..start + domain[start..].find('>')?];
    let at = tag.find("type=")? + "type=".len();
    let quote = tag[at..].chars().next()?;
    let rest = &tag[at + 1..];
    Some(rest[..rest.find(quote)?].to_string())
}

/// The entries of the table whose destination conditions hold for a host of `libvirt` and
/// `qemu` releases and CPU `vendor`: kept per host when it is read.
pub(super) fn of_host(
    libvirt: Option<crate::libvirt::version::LibvirtVersion>,
    qemu: Option<crate::libvirt::version::QemuVersion>,
    vendor: Option<&str>,
) -> Vec<&'static Hazard> {
    at_destination(Releases { libvirt, qemu }, vendor)
}

impl Fleet {
    /// The `stack-hazard` reasons of guest `g` arriving on host `h` ([`crate::hazards`]): none
    /// for the guest's own host. The destination's part is the host's, kept when it was read;
    /// the guest's, its shape's.
    pub(super) fn hazard_reasons(&self, g: usize, h: usize) -> Vec<Reason> {
        let at = &self.hosts[h].hazards;
        let source = self.source(g);
        if at.is_empty() || source == Some(h) {
            return Vec::new();
        }
        let guest = &self.guests[g];
        let shape = &self.hazard_shapes[guest.shape];
        let source = source.map(|s| Releases {
            libvirt: self.hosts[s].libvirt,
            qemu: self.hosts[s].qemu,
        });
        at.iter()
            .filter(|hz| for_guest(hz, shape, source))
            .map(|hz| Reason {
                code: Code::StackHazard,
                message: sentence(hz),
            })
            .collect()
    }

    /// The `stack-hazard` reasons of guest `g` started on host `h` (`--upgrade`: the upgraded
    /// host restarts its guests): the hazards of a start only, whatever the guest's state.
    pub(super) fn start_hazard_reasons(&self, g: usize, h: usize) -> Vec<Reason> {
        let shape = GuestShape {
            running: false,
            ..self.hazard_shapes[self.guests[g].shape].clone()
        };
        self.hosts[h]
            .hazards
            .iter()
            .filter(|hz| for_guest(hz, &shape, None))
            .map(|hz| Reason {
                code: Code::StackHazard,
                message: sentence(hz),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shape_is_read_from_the_reduced_domain() {
        let kvm = "<domain type='kvm'><name>a</name><cpu mode='custom'><model>qemu64</model><topology sockets='1' dies='1' cores='1' threads='2'/></cpu></domain>";
        let s = shape_of(kvm, true);
        assert_eq!(
            (s.virt_type.as_str(), s.threads, s.running),
            ("kvm", 2, true)
        );
        let tcg = "<domain type=\"qemu\"><name>b</name></domain>";
        let s = shape_of(tcg, false);
        assert_eq!(
            (s.virt_type.as_str(), s.threads, s.running),
            ("qemu", 1, false)
        );
    }
}
