//! This machine's raw CPU data, gathered as libvirt gathers it for `virsh capabilities`' host CPU
//! (`virCPUx86GetHost` in libvirt's `src/cpu/cpu_x86.c`): CPUID leaves and sub-leaves
//! (`cpuidSet`), then, when CPUID says the CPU has it, the `IA32_ARCH_CAPABILITIES` MSR
//! (`virHostCPUGetMSR` in `src/util/virhostcpu.c`).
//!
//! Only the leaves and sub-leaves the cpu_map's features use are asked (plus leaves 0, 1 and 7,
//! which give the vendor, the signature and the MSR's presence): nothing else changes the
//! decoding, and each CPUID in a virtual machine is a trip to the hypervisor. Which of them are
//! asked at all is libvirt's rule, [`gather`]: never a leaf above the maximum leaf 0 (basic) or
//! `0x80000000` (extended) gives, since Intel CPUs answer such a leaf with another leaf's data;
//! a sub-leaf only as libvirt's `cpuidSetLeaf*` would enumerate it.

use crate::libvirt::cpu_map::x86::X86Map;
use crate::libvirt::cpudata::{Cpuid, Msr, X86CpuData};
use std::collections::HashMap;

/// `IA32_ARCH_CAPABILITIES`, the one MSR libvirt reads for a host CPU.
pub const MSR_ARCH_CAPABILITIES: u32 = 0x10a;

/// The registers one CPUID gives: eax, ebx, ecx, edx.
pub type Regs = [u32; 4];

/// The CPUID data libvirt's `cpuidSet` would collect for the basic and extended ranges,
/// restricted to the (leaf, sub-leaf) pairs of `wanted` plus leaves 0, 1 and 7 sub-leaf 0;
/// `cpuid(leaf, sub)` executes CPUID (each pair is asked at most once).
///
/// A pair is asked only when libvirt would ask it: a basic leaf up to leaf 0's eax, an extended
/// leaf from `0x80000000` up to that leaf's eax (no other range: libvirt's `cpuidSet` asks only
/// these two); sub-leaf 0 of every leaf but `0x12` (only with SGX, leaf 7 ebx bit 2) and
/// `0x17` (only when its eax is at least 3); a further sub-leaf only of leaf 4 (while the
/// previous one's eax bits 0..=4 are not 0), 7, `0x14`, `0x17`, `0x1e` and `0x24` (up to
/// sub-leaf 0's eax), `0xb` (while ecx bits 8..=15 are not 0, sub-leaf 0 included), `0xd`
/// (1, and 2..=63 as sub-leaf 0's eax/edx or sub-leaf 1's ecx/edx bits say), `0xf` and `0x10`
/// (1..=31 as sub-leaf 0's edx, resp. ebx, bits say), `0x12` (1, then 2.. while eax bits 0..=3
/// are not 0).
pub fn gather(wanted: &[(u32, u32)], cpuid: &mut dyn FnMut(u32, u32) -> Regs) -> X86CpuData {
    let mut asked: HashMap<(u32, u32), Regs> = HashMap::new();
    let mut ask =
        |leaf: u32, sub: u32| *asked.entry((leaf, sub)).or_insert_with(|| cpuid(leaf, sub));
    let max_basic = ask(0, 0)[0];
    let max_extended = ask(0x8000_0000, 0)[0];
    let mut pairs: Vec<(u32, u32)> = wanted.to_vec();
    pairs.extend([(0, 0), (1, 0), (7, 0)]);
    pairs.sort_unstable();
    pairs.dedup();
    let mut data = X86CpuData::default();
    for (leaf, sub) in pairs {
        let in_range = if leaf < 0x8000_0000 {
            leaf <= max_basic
        } else {
            max_extended >= 0x8000_0000 && leaf <= max_extended
        };
        if in_range && libvirt_asks(leaf, sub, &mut ask, max_basic) {
            let [eax, ebx, ecx, edx] = ask(leaf, sub);
            data.cpuid.push(Cpuid {
                eax_in: leaf,
                ecx_in: sub,
                eax,
                ebx,
                ecx,
                edx,
            });
        }
    }
    data
}

/// Whether libvirt's `cpuidSet` enumerates sub-leaf `sub` of the (in range) `leaf` (the rules
/// of [`gather`]).
fn libvirt_asks(
    leaf: u32,
    sub: u32,
    ask: &mut dyn FnMut(u32, u32) -> Regs,
    max_basic: u32,
) -> bool {
    let bit = |value: u32, n: u32| n < 32 && value & (1 << n) != 0;
    match leaf {
        4 => (0..sub).all(|k| ask(4, k)[0] & 0x1f != 0),
        7 | 0x14 | 0x1e | 0x24 => sub == 0 || sub <= ask(leaf, 0)[0],
        0xb => (0..=sub).all(|k| ask(0xb, k)[2] & 0xff00 != 0),
        0xd => match sub {
            0 | 1 => true,
            2..=31 => bit(ask(0xd, 0)[0], sub) || bit(ask(0xd, 1)[2], sub),
            32..=63 => bit(ask(0xd, 0)[3], sub - 32) || bit(ask(0xd, 1)[3], sub - 32),
            _ => false,
        },
        0xf => sub == 0 || bit(ask(0xf, 0)[3], sub),
        0x10 => sub == 0 || bit(ask(0x10, 0)[1], sub),
        0x12 => {
            let sgx = max_basic >= 7 && bit(ask(7, 0)[1], 2);
            sgx && (sub <= 1 || (2..=sub).all(|k| ask(0x12, k)[0] & 0xf != 0))
        }
        0x17 => {
            let max = ask(0x17, 0)[0];
            max >= 3 && sub <= max
        }
        _ => sub == 0,
    }
}

/// This machine's raw CPU data for decoding with `map` (libvirt's `virCPUx86GetHost` before
/// `x86DecodeCPUData`): CPUID as [`gather`] asks it for the leaves `map`'s features use, then,
/// when CPUID leaf 7 says the CPU has `IA32_ARCH_CAPABILITIES` (edx bit 29), that MSR as
/// [`read_msr`] reads it, left out when it cannot be read (libvirt: best effort). None on a
/// machine that is not x86_64.
#[must_use]
pub fn this_machine(map: &X86Map) -> Option<X86CpuData> {
    #[cfg(target_arch = "x86_64")]
    {
        let mut cpuid = |leaf: u32, sub: u32| -> Regs {
            // SAFETY: CPUID exists on every x86_64 CPU and only reads registers; asking a leaf
            // the CPU lacks returns data, never faults. (The intrinsic is safe in newer Rust,
            // hence the allow.)
            #[allow(unused_unsafe)]
            let r = unsafe { core::arch::x86_64::__cpuid_count(leaf, sub) };
            [r.eax, r.ebx, r.ecx, r.edx]
        };
        let mut data = gather(&map.cpuid_leaves(), &mut cpuid);
        let arch_capabilities = data.cpuid(7, 0).is_some_and(|r| r[3] & (1 << 29) != 0);
        if arch_capabilities {
            if let Some(value) = read_msr(MSR_ARCH_CAPABILITIES) {
                data.msrs.push(Msr {
                    index: MSR_ARCH_CAPABILITIES,
                    eax: (value & 0xffff_ffff) as u32,
                    edx: (value >> 32) as u32,
                });
            }
        }
        Some(data)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = map;
        None
    }
}

/// This machine's CPU vendor string, CPUID leaf 0 (EBX, EDX, ECX: `AuthenticAMD`,
/// `GenuineIntel`, the strings of libvirt's `x86_vendors.xml`). None off x86_64.
#[must_use]
pub fn this_machine_vendor() -> Option<String> {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: as in [`this_machine`]: CPUID leaf 0 exists on every x86_64 CPU.
        #[allow(unused_unsafe)]
        let r = unsafe { core::arch::x86_64::__cpuid_count(0, 0) };
        let bytes: Vec<u8> = [r.ebx, r.edx, r.ecx]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        Some(String::from_utf8_lossy(&bytes).into_owned())
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

/// MSR `index` of this machine as libvirt's `virHostCPUGetMSR` reads it: from `/dev/cpu/0/msr`
/// (the `msr` module, root only; eight bytes at offset `index`; EIO there means the CPU lacks
/// the MSR, and nothing more is asked), else from KVM (`KVM_GET_MSRS` on `/dev/kvm`, a feature
/// MSR: the value KVM offers its guests). None when neither answers.
#[must_use]
pub fn read_msr(index: u32) -> Option<u64> {
    use std::os::unix::fs::FileExt;
    if let Ok(f) = std::fs::File::open("/dev/cpu/0/msr") {
        let mut buf = [0u8; 8];
        match f.read_exact_at(&mut buf, u64::from(index)) {
            Ok(()) => return Some(u64::from_le_bytes(buf)),
            // libvirt: "CPU does not support MSR 0x%lx", no fallback to KVM.
            Err(e) if e.raw_os_error() == Some(libc::EIO) => return None,
            Err(_) => {}
        }
    }
    kvm_feature_msr(index)
}

/// `struct kvm_msrs` with one `struct kvm_msr_entry` (Linux `include/uapi/linux/kvm.h` and
/// `arch/x86/include/uapi/asm/kvm.h`).
#[repr(C)]
#[derive(Default)]
struct KvmOneMsr {
    nmsrs: u32,
    pad: u32,
    index: u32,
    reserved: u32,
    data: u64,
}

/// `KVM_GET_MSRS` (`_IOWR(KVMIO = 0xAE, 0x88, struct kvm_msrs)`, the header of 8 bytes) on
/// `/dev/kvm`: the system ioctl answering feature MSRs, returning how many it read.
struct GetMsrs<'a>(&'a mut KvmOneMsr);

// SAFETY: the opcode is KVM_GET_MSRS's; the kernel reads `nmsrs` entries (1, set by the
// caller) after the 8-byte header and writes their `data`, all inside the `KvmOneMsr` borrowed
// mutably for the call (IS_MUTATING); the output is the ioctl's return value.
unsafe impl rustix::ioctl::Ioctl for GetMsrs<'_> {
    type Output = rustix::ioctl::IoctlOutput;

    const IS_MUTATING: bool = true;

    fn opcode(&self) -> rustix::ioctl::Opcode {
        rustix::ioctl::opcode::read_write::<[u32; 2]>(0xAE, 0x88)
    }

    fn as_ptr(&mut self) -> *mut std::ffi::c_void {
        std::ptr::from_mut(self.0).cast()
    }

    unsafe fn output_from_ptr(
        out: rustix::ioctl::IoctlOutput,
        _: *mut std::ffi::c_void,
    ) -> rustix::io::Result<Self::Output> {
        Ok(out)
    }
}

/// Feature MSR `index` from KVM (libvirt's `virHostCPUGetMSRFromKVM`): None when `/dev/kvm`
/// cannot be opened, the ioctl fails or reads no MSR (KVM does not offer that one).
fn kvm_feature_msr(index: u32) -> Option<u64> {
    let f = std::fs::File::open("/dev/kvm").ok()?;
    let mut msr = KvmOneMsr {
        nmsrs: 1,
        index,
        ..KvmOneMsr::default()
    };
    // SAFETY: see `GetMsrs`: one entry announced, one entry's room given; the descriptor is
    // /dev/kvm's, open for the call.
    let read = unsafe { rustix::ioctl::ioctl(&f, GetMsrs(&mut msr)) }.ok()?;
    (read == 1).then_some(msr.data)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CPU answering from a table, recording what it was asked.
    fn cpu(table: &[((u32, u32), Regs)]) -> impl FnMut(u32, u32) -> Regs + '_ {
        move |l, s| {
            table
                .iter()
                .find(|(k, _)| *k == (l, s))
                .map_or([0xdead; 4], |(_, r)| *r)
        }
    }

    #[test]
    fn asks_only_what_libvirt_asks() {
        // Max basic leaf 7 (7.0 says one more sub-leaf), max extended 0x80000001; leaf 0xd is
        // above the max: an Intel CPU would answer it with garbage (0xdead here).
        let table = [
            ((0, 0), [7, 0x756e_6547, 0x6c65_746e, 0x4965_6e69]),
            ((1, 0), [0x50654, 0, 0, 1]),
            ((7, 0), [1, 4, 0, 1 << 29]),
            ((7, 1), [0x10, 0, 0, 0]),
            ((0x8000_0000, 0), [0x8000_0001, 0, 0, 0]),
            ((0x8000_0001, 0), [0, 0, 1, 0]),
        ];
        let mut asked = Vec::new();
        let mut f = cpu(&table);
        let mut recording = |l, s| {
            asked.push((l, s));
            f(l, s)
        };
        let wanted = [
            (7, 1),
            (7, 2),
            (0xd, 1),
            (0x12, 0),
            (0x8000_0001, 0),
            (0x8000_0008, 0),
        ];
        let data = gather(&wanted, &mut recording);
        let got: Vec<(u32, u32)> = data.cpuid.iter().map(|c| (c.eax_in, c.ecx_in)).collect();
        // 0x12 is above the max basic leaf (though 7.0 says SGX); 7.2 is beyond 7.0's eax.
        assert_eq!(got, [(0, 0), (1, 0), (7, 0), (7, 1), (0x8000_0001, 0)]);
        assert!(!asked.contains(&(0x12, 0)));
        assert!(!asked.contains(&(0xd, 1)) && !asked.contains(&(0x8000_0008, 0)));
        assert!(!asked.contains(&(7, 2)));
        assert!(data.cpuid.iter().all(|c| c.eax != 0xdead));
    }

    #[test]
    fn sub_leaf_rules() {
        let table = [
            ((0, 0), [0x17, 0, 0, 0]),
            ((0x8000_0000, 0), [0, 0, 0, 0]),
            ((7, 0), [0, 0, 0, 0]),
            ((0xd, 0), [0b100, 0, 0, 0]),
            ((0xd, 1), [0, 0, 0, 0]),
            ((0xf, 0), [0, 0, 0, 0b10]),
            ((0x17, 0), [2, 0, 0, 0]),
        ];
        let mut f = cpu(&table);
        let wanted = [
            (0xd, 1),
            (0xd, 2),
            (0xd, 3),
            (0xf, 1),
            (0xf, 2),
            (0x17, 0),
            (0x12, 0),
        ];
        let data = gather(&wanted, &mut f);
        let got: Vec<(u32, u32)> = data.cpuid.iter().map(|c| (c.eax_in, c.ecx_in)).collect();
        // No extended range (its max is below 0x80000000), 0x17 needs eax >= 3, 0x12 SGX.
        assert_eq!(got, [(0, 0), (1, 0), (7, 0), (0xd, 1), (0xd, 2), (0xf, 1)]);
    }
}
