//! The stack's known hazards ([`crate::hazards`]) as reasons of a fleet pair: a guest's arrival
//! on a host whose releases, with its source host's and the guest's shape, meet an entry of the
//! table is `stack-hazard`, naming the entry's symptom, fix and source.

use super::{Fleet, Reason};
use crate::domain::Domain;
use crate::finding::Code;
use crate::hazards::{GuestShape, Outcome, for_guest, sentence, unknown_sentence};

/// What the table asks of a guest whose reduced domain is `domain` ([`Domain::hazard_shape`]):
/// its domain type, `<topology threads>`, machine type, CPU model and features. The document is
/// parsed only when its text names one of them (a fleet holds thousands of shapes; the text
/// search can only say yes too often, the parse decides).
pub(super) fn shape_of(domain: &str, is_running: bool) -> GuestShape {
    const ASKED: [&str; 4] = ["threads", "machine=", "<model", "<feature"];
    let parsed = ASKED
        .iter()
        .any(|a| domain.contains(a))
        .then(|| Domain::parse(domain, "guest facts").ok())
        .flatten();
    match parsed {
        Some(d) => d.hazard_shape(is_running),
        None => GuestShape {
            virt_type: root_type(domain).unwrap_or_default(),
            threads: 1,
            running: is_running,
            ..GuestShape::default()
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
        let refused = crate::hazards::When::refused_by_capabilities(
            self.verdict_in(g, c).iter().map(|r| r.code),
        );
        self.hazard_reasons_for(shape, self.sources[g], class, refused)
    }

    /// The reasons of the start hazards of guest `g` started on host `h` (`--upgrade`: the
    /// upgraded host restarts its guests), whatever the guest's state.
    /// `refused`: the judge already refuses its machine type or CPU model there.
    pub(super) fn start_hazard_reasons(&self, g: usize, h: usize, refused: bool) -> Vec<Reason> {
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
        self.hazard_reasons_for(&shape, None, class, refused)
    }

    /// The reasons of the entries of `class` that guest `shape` from host `source` meets;
    /// `refused`: the class's own capabilities already refuse its machine type or CPU model
    /// (entries about those are then left out: [`crate::hazards::When::judged_by_capabilities`]).
    fn hazard_reasons_for(
        &self,
        shape: &GuestShape,
        source: Option<usize>,
        class: &super::HostClass,
        refused: bool,
    ) -> Vec<Reason> {
        let source = source.map(|s| self.classes[self.hosts[s].class].releases);
        class
            .hazards
            .iter()
            .filter(|(hz, _)| !(refused && hz.when.judged_by_capabilities()))
            .filter_map(|(hz, lacks)| match for_guest(hz, lacks, shape, source)? {
                Outcome::Holds => Some(Reason {
                    code: Code::StackHazard,
                    message: sentence(hz, source, class.releases),
                }),
                Outcome::Unknown(missing) => Some(Reason {
                    code: Code::NotCompared,
                    message: unknown_sentence(hz, &missing, crate::hazards::Lacking::InFacts),
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
        // The machine type's version, the CPU's model and features (src/hazards.toml asks
        // them): read from the reduced copy, which keeps `<os><type>` and `<cpu>`.
        let old = "<domain type='kvm'><name>c</name><os><type arch='x86_64' machine='pc-i440fx-2.3'>hvm</type></os><cpu mode='custom'><model>Icelake-Client</model><feature policy='require' name='vmx'/><feature policy='disable' name='vmx-apicv-xapic'/><feature policy='optional' name='ssbd'/></cpu></domain>";
        let s = shape_of(old, true);
        assert_eq!(s.machine.map(|m| m.to_string()).as_deref(), Some("2.3.0"));
        assert_eq!(s.cpu_model.as_deref(), Some("Icelake-Client"));
        assert_eq!(s.features_enabled, ["vmx"]);
        assert_eq!(s.features_disabled, ["vmx-apicv-xapic"]);
        // An alias is no version.
        let alias = old.replace("pc-i440fx-2.3", "q35");
        assert_eq!(shape_of(&alias, true).machine, None);
    }
}
