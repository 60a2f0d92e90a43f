//! The stack's known hazards ([`crate::hazards`]) as reasons of a fleet pair: a guest's arrival
//! on a host whose releases, with its source host's and the guest's shape, meet an entry of the
//! table is `stack-hazard`, naming the entry's symptom, fix and source.

use super::{Fleet, Reason};
use crate::domain::Domain;
use crate::finding::Code;
use crate::hazards::{GuestShape, Outcome, for_guest, sentence, unknown_sentence};

/// What the table asks of a guest whose reduced domain is `domain`: its domain type (the root's
/// `type`) and its `<topology threads>` (1 without one). The document is parsed only when it
/// names threads: a fleet holds thousands of shapes, and most have no topology.
pub(super) fn shape_of(domain: &str, is_running: bool) -> GuestShape {
    let parsed = domain
        .contains("threads")
        .then(|| Domain::parse(domain, "guest facts").ok())
        .flatten();
    match parsed {
        Some(d) => d.hazard_shape(is_running),
        None => GuestShape {
            virt_type: root_type(domain).unwrap_or_default(),
            threads: 1,
            running: is_running,
        },
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

impl Fleet {
    /// The reasons the known hazards give guest `g` arriving on a host of class `c`
    /// ([`crate::hazards`]): `stack-hazard` for one that holds, `not-compared` for one that
    /// may, a release it depends on not given. Empty, at no cost, for a class that meets none.
    pub(super) fn hazard_in(&self, g: usize, c: usize) -> Vec<Reason> {
        let Some(shape) = &self.hazard_shapes[self.guests[g].shape] else {
            return Vec::new();
        };
        let class = &self.classes[c];
        if class.hazards.is_empty() {
            return Vec::new();
        }
        self.hazard_reasons_for(shape, self.sources[g], class)
    }

    /// The reasons of the start hazards of guest `g` started on host `h` (`--upgrade`: the
    /// upgraded host restarts its guests), whatever the guest's state.
    pub(super) fn start_hazard_reasons(&self, g: usize, h: usize) -> Vec<Reason> {
        let class = &self.classes[self.hosts[h].class];
        if class.hazards.is_empty() {
            return Vec::new();
        }
        // Read again: a running guest's shape may meet only migration hazards, and a start's
        // are asked here.
        let guest = &self.guests[g];
        let shape = GuestShape {
            running: false,
            ..shape_of(&guest.facts.domain, false)
        };
        self.hazard_reasons_for(&shape, None, class)
    }

    fn hazard_reasons_for(
        &self,
        shape: &GuestShape,
        source: Option<usize>,
        class: &super::HostClass,
    ) -> Vec<Reason> {
        let source = source.map(|s| self.classes[self.hosts[s].class].releases);
        class
            .hazards
            .iter()
            .filter_map(|(hz, lacks)| match for_guest(hz, lacks, shape, source)? {
                Outcome::Holds => Some(Reason {
                    code: Code::StackHazard,
                    message: sentence(hz, source, class.releases),
                }),
                Outcome::Unknown(missing) => Some(Reason {
                    code: Code::NotCompared,
                    message: unknown_sentence(hz, &missing),
                }),
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
