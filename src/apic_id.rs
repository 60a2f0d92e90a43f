//! QEMU's x86 APIC IDs, from the vCPU topology.
//!
//! QEMU gives each x86 vCPU an APIC ID built from its place in the topology
//! (`include/hw/i386/topology.h`: `x86_topo_ids_from_idx`, `apicid_bitwidth_for_count`,
//! `x86_apicid_from_topo_ids`): the thread, core, module (libvirt's `clusters`) and die numbers
//! each take as many bits as their count needs, the socket number the bits above. A count that is
//! not a power of two leaves gaps, so the APIC IDs can pass 254 with fewer than 255 vCPUs:
//! `<topology sockets='85' cores='3' threads='1'/>` gives 255 vCPUs APIC IDs up to 338.
//!
//! An APIC ID of 255 or more needs x2APIC: QEMU 7.2 refuses to start a TCG guest whose vCPUs
//! can reach one ("current -smp configuration requires kernel irqchip and X2APIC API support",
//! the maximum counts, not the online vCPUs), and QEMU 9.0 and later refuse to create such a
//! vCPU without x2APIC in the guest CPU ("APIC ID 255 requires x2APIC feature in CPU"; seen with
//! libvirt 9.0 / QEMU 7.2 and libvirt 11.3 / QEMU 10.0, `tests/integration/oracles.rs`). libvirt
//! writes `-smp N,maxcpus=MAX,sockets=MAX,cores=1,threads=1` for a domain without `<topology>`:
//! then the APIC IDs are the vCPU numbers.

use crate::topology::Topology;

/// The highest APIC ID a vCPU can have without x2APIC (255 is xAPIC's broadcast ID).
pub const XAPIC_MAX_ID: u64 = 254;

/// Bits QEMU gives a level of `count` members (`apicid_bitwidth_for_count`): the bits of
/// `count - 1`.
fn width(count: u32) -> u32 {
    let n = count.max(1) - 1;
    u32::BITS - n.leading_zeros()
}

/// The APIC ID QEMU gives vCPU `index` (0-based, in libvirt's order) of topology `t`. Saturates
/// at `u64::MAX` (a hostile topology cannot overflow it).
#[must_use]
pub fn apic_id(t: &Topology, index: u32) -> u64 {
    let index = u128::from(index);
    let (threads, cores, modules, dies) = (
        u128::from(t.threads.max(1)),
        u128::from(t.cores.max(1)),
        u128::from(t.clusters.max(1)),
        u128::from(t.dies.max(1)),
    );
    let smt = index % threads;
    let core = index / threads % cores;
    let module = index / (threads * cores) % modules;
    let die = index / (threads * cores * modules) % dies;
    let pkg = index / (threads * cores * modules * dies);
    let core_offset = width(t.threads);
    let module_offset = core_offset + width(t.cores);
    let die_offset = module_offset + width(t.clusters);
    let pkg_offset = die_offset + width(t.dies);
    // Each offset is at most 4 × 32 bits: the shifts stay inside u128 only up to 127.
    let shifted = |v: u128, by: u32| v.checked_shl(by).filter(|s| s >> by == v);
    [
        Some(smt),
        shifted(core, core_offset),
        shifted(module, module_offset),
        shifted(die, die_offset),
        shifted(pkg, pkg_offset),
    ]
    .into_iter()
    .try_fold(0u128, |acc, v| v.map(|v| acc | v))
    .and_then(|id| u64::try_from(id).ok())
    .unwrap_or(u64::MAX)
}

/// The highest APIC ID among the first `vcpus` vCPUs of `t` (APIC IDs grow with the vCPU
/// number), or None for no vCPU. Without a `<topology>` (`t` None) libvirt gives QEMU one
/// socket per vCPU: the APIC IDs are the vCPU numbers.
#[must_use]
pub fn highest(t: Option<&Topology>, vcpus: u32) -> Option<u64> {
    let last = vcpus.checked_sub(1)?;
    Some(t.map_or(u64::from(last), |t| apic_id(t, last)))
}

/// The first vCPU number whose APIC ID passes [`XAPIC_MAX_ID`] among `vcpus` vCPUs, or None
/// when every one fits in xAPIC.
#[must_use]
pub fn first_x2apic_vcpu(t: Option<&Topology>, vcpus: u32) -> Option<u32> {
    if highest(t, vcpus)? <= XAPIC_MAX_ID {
        return None;
    }
    // APIC IDs grow with the vCPU number: a binary search finds the first one past the limit.
    let (mut lo, mut hi) = (0u32, vcpus - 1);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if highest(t, mid + 1).is_some_and(|id| id > XAPIC_MAX_ID) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Some(lo)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(sockets: u32, dies: u32, cores: u32, threads: u32) -> Topology {
        Topology {
            sockets,
            dies,
            clusters: 1,
            cores,
            threads,
        }
    }

    #[test]
    fn contiguous_topologies_number_apic_ids_as_vcpus() {
        assert_eq!(highest(None, 255), Some(254));
        assert_eq!(highest(Some(&t(288, 1, 1, 1)), 288), Some(287));
        assert_eq!(highest(Some(&t(16, 1, 4, 2)), 128), Some(127));
        assert_eq!(first_x2apic_vcpu(None, 255), None);
        assert_eq!(first_x2apic_vcpu(None, 256), Some(255));
        assert_eq!(highest(None, 0), None);
    }

    #[test]
    fn gaps_of_counts_that_are_not_powers_of_two() {
        // Seen with QEMU 7.2 and 10.0: 255 vCPUs as 85 sockets of 3 cores are refused, QEMU 10.0
        // naming "APIC ID 256" (vCPU 192: socket 64, 64 << 2).
        let s85 = t(85, 1, 3, 1);
        assert_eq!(apic_id(&s85, 191), 254);
        assert_eq!(apic_id(&s85, 192), 256);
        assert_eq!(highest(Some(&s85), 255), Some(338));
        assert_eq!(first_x2apic_vcpu(Some(&s85), 255), Some(192));
        // 2 sockets of 129 cores: vCPU 129 is socket 1, APIC ID 1 << 8.
        let s2 = t(2, 1, 129, 1);
        assert_eq!(apic_id(&s2, 129), 256);
        assert_eq!(first_x2apic_vcpu(Some(&s2), 258), Some(129));
        // Threads, cores and dies of 3 each: 64 APIC IDs per socket of 27 vCPUs.
        let d3 = t(5, 3, 3, 3);
        assert_eq!(apic_id(&d3, 27), 64);
        assert_eq!(apic_id(&d3, 28), 65);
        assert_eq!(first_x2apic_vcpu(Some(&d3), 135), Some(108));
    }

    #[test]
    fn hostile_topologies_stay_in_range() {
        for topo in [
            t(u32::MAX, u32::MAX, u32::MAX, u32::MAX),
            t(u32::MAX, 3, 5, 7),
            t(1, 1 << 31, 1 << 31, 3),
        ] {
            let id = apic_id(&topo, u32::MAX);
            assert!(id >= u64::from(u32::MAX), "{topo:?}: {id}");
        }
    }
}
