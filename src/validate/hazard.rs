//! The stack's known hazards ([`crate::hazards`], `src/hazards.toml`) for one guest on this
//! host: what `check`, the rewrite, `audit` and the hook at `prepare` say of a start here, and
//! the hook at `migrate` and `restore` of an arrival. The fleet asks the table per pair of hosts
//! instead (`src/fleet/hazard.rs`: it knows the source host's releases); this is its one-host
//! side, so that an entry is never said twice.
//!
//! An entry that holds is an error (`stack-hazard`: libvirt or QEMU will fail as its symptom
//! says). One about the guest's shape that may hold, a release it depends on not known (the
//! source host's, which the hook at `migrate begin` is never given), is a warning naming the
//! release; one whose release of this host is not known is not claimed at all (this host's own
//! checks judge the start from its capabilities: `machine-unsupported` for a machine type its
//! QEMU lacks), nor is one about a host's own releases alone.

use crate::domain::Domain;
use crate::finding::{Code, Finding};
use crate::hazards::{
    Lacking, Outcome, Releases, at_destination, finding_sentence, for_guest, unknown_sentence,
};

/// The findings of the known hazards for guest `dom` arriving on a host of `here` releases:
/// started (`running` false), or by live migration from a host whose releases are not known.
/// `refused` when this host's own capabilities already refuse the guest's machine type or CPU
/// model ([`crate::hazards::When::refused_by_capabilities`]): the entries about those are then
/// not said a second time.
#[must_use]
pub fn on_this_host(
    dom: &Domain<'_>,
    running: bool,
    here: Releases,
    refused: bool,
) -> Vec<Finding> {
    let shape = dom.hazard_shape(running);
    if !crate::hazards::may_meet(&shape) {
        return Vec::new();
    }
    // The host's CPU vendor is not among what is gathered: an entry that asks it is not
    // claimed (the one such entry today needs facts the tool has not: amd-msr-0x10a).
    at_destination(here, None)
        .into_iter()
        // This host's release not known: its own capability checks judge the start instead.
        .filter(|(_, lacks)| lacks.is_empty())
        .filter(|(h, _)| !(refused && h.when.judged_by_capabilities()))
        .filter_map(|(h, lacks)| {
            Some(match for_guest(h, &lacks, &shape, None)? {
                Outcome::Holds => {
                    Finding::error(Code::StackHazard, finding_sentence(h, None, here), &h.fix)
                }
                Outcome::Unknown(missing) => Finding::warning(
                    Code::StackHazard,
                    unknown_sentence(h, &missing, Lacking::SourceHost),
                    &h.fix,
                ),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::libvirt::version::{LibvirtVersion, QemuVersion};

    fn releases(libvirt: &str, qemu: Option<&str>) -> Releases {
        Releases {
            libvirt: libvirt.parse::<LibvirtVersion>().ok(),
            qemu: qemu.map(|q| q.parse::<QemuVersion>().unwrap()),
        }
    }

    const THREADS: &str = "<domain type='kvm'><name>a</name><memory>65536</memory><vcpu>2</vcpu><os><type arch='x86_64'>hvm</type></os><cpu mode='host-model'><topology sockets='1' dies='1' cores='1' threads='2'/></cpu></domain>";

    /// libvirt 12.4 and QEMU 7.1: every start fails (NEWS), said as an error; with QEMU 7.2
    /// or an older libvirt, nothing.
    #[test]
    fn a_start_hazard_of_this_hosts_releases_is_an_error() {
        let dom = Domain::parse(THREADS, "t").unwrap();
        let f = on_this_host(&dom, false, releases("12.4.0", Some("7.1.0")), false);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].code, Code::StackHazard);
        assert_eq!(f[0].severity, crate::finding::Severity::Error);
        assert!(
            f[0].message.contains("libvirt-12.4-qemu-7.2"),
            "{}",
            f[0].message
        );
        assert!(on_this_host(&dom, false, releases("12.4.0", Some("7.2.0")), false).is_empty());
        assert!(on_this_host(&dom, false, releases("12.3.0", Some("7.1.0")), false).is_empty());
        // The QEMU release not known: a host's own releases are never claimed on a guess.
        assert!(on_this_host(&dom, false, releases("12.4.0", None), false).is_empty());
    }

    /// A KVM guest with threads arriving by live migration at libvirt 11.3 / QEMU 10.0 from a
    /// host not known: the ht hazard may hold (a source QEMU before 10.0), a warning naming the
    /// release it depends on; at libvirt 12.8, nothing; a guest without threads, nothing.
    #[test]
    fn a_migration_hazard_of_an_unknown_source_is_a_warning() {
        let dom = Domain::parse(THREADS, "t").unwrap();
        let f = on_this_host(&dom, true, releases("11.3.0", Some("10.0.0")), false);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].severity, crate::finding::Severity::Warning);
        assert!(
            f[0].message.contains("ht-extra-after-qemu-10")
                && f[0]
                    .message
                    .contains("the QEMU release of the guest's source host"),
            "{}",
            f[0].message
        );
        assert!(on_this_host(&dom, true, releases("12.8.0", Some("11.1.0")), false).is_empty());
        assert!(on_this_host(&dom, false, releases("11.3.0", Some("10.0.0")), false).is_empty());
        let one = THREADS.replace("threads='2'", "threads='1'");
        let dom = Domain::parse(&one, "t").unwrap();
        assert!(on_this_host(&dom, true, releases("11.3.0", Some("10.0.0")), false).is_empty());
    }

    /// A guest of machine type pc-i440fx-2.3 on this host: an error at QEMU 10.0 (the rig's
    /// trixie refuses it at define: QEMU 9.1 removed it), started or arriving; nothing at
    /// QEMU 7.2; with pc-i440fx-2.4, nothing at 10.0.
    #[test]
    fn a_removed_machine_type_is_an_error_on_this_host() {
        let old = THREADS
            .replace("threads='2'", "threads='1'")
            .replace("arch='x86_64'", "arch='x86_64' machine='pc-i440fx-2.3'");
        let dom = Domain::parse(&old, "t").unwrap();
        for running in [false, true] {
            let f = on_this_host(&dom, running, releases("11.3.0", Some("10.0.13")), false);
            assert_eq!(f.len(), 1, "{f:?}");
            assert_eq!(f[0].severity, crate::finding::Severity::Error);
            assert!(
                f[0].message.contains("machine-2.0-gone-qemu-9.1"),
                "{}",
                f[0].message
            );
        }
        assert!(on_this_host(&dom, false, releases("9.0.0", Some("7.2.22")), false).is_empty());
        // This host's capabilities already refuse the machine type (machine-unsupported): the
        // entry is not said a second time.
        assert!(on_this_host(&dom, false, releases("11.3.0", Some("10.0.13")), true).is_empty());
        // This host's QEMU not known: not claimed (machine-unsupported judges it from the
        // capabilities).
        assert!(on_this_host(&dom, false, releases("11.3.0", None), false).is_empty());
        let newer = old.replace("2.3", "2.4");
        let next = Domain::parse(&newer, "t").unwrap();
        assert!(on_this_host(&next, false, releases("11.3.0", Some("10.0.13")), false).is_empty());
    }
}
