//! Raw x86 CPU data: the registers CPUID gives for each leaf and sub-leaf, and model-specific
//! registers (MSRs), as libvirt holds them before decoding (`virCPUx86Data`), and the reader of
//! libvirt's dump of them, `<cpudata arch='x86'>` (`virCPUx86DataParse` in libvirt's
//! `src/cpu/cpu_x86.c`; the format of libvirt's `tests/cputestdata/x86_64-cpuid-*.xml`):
//!
//! ```xml
//! <cpudata arch='x86'>
//!   <cpuid eax_in='0x00000001' ecx_in='0x00' eax='0x00050654' ebx='0x29200800' ecx='0x7ffefbff' edx='0xbfebfbff'/>
//!   <msr index='0x10a' edx='0x00000000' eax='0x0000006b'/>
//! </cpudata>
//! ```
//!
//! The same value comes from this machine's CPU ([`crate::host::cpuid`]); either is decoded into
//! a host CPU by [`crate::libvirt::cpu_map::x86::X86Map::decode_host`].

use super::DocumentError;
use crate::xml::is_libvirt_element;
use roxmltree::Node;
use std::path::Path;

/// The registers one CPUID leaf and sub-leaf gave (libvirt's `virCPUx86CPUID`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cpuid {
    /// The leaf asked (eax in).
    pub eax_in: u32,
    /// The sub-leaf asked (ecx in; 0 for leaves without sub-leaves).
    pub ecx_in: u32,
    /// eax out.
    pub eax: u32,
    /// ebx out.
    pub ebx: u32,
    /// ecx out.
    pub ecx: u32,
    /// edx out.
    pub edx: u32,
}

/// One model-specific register (libvirt's `virCPUx86MSR`): a 64-bit value as two halves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Msr {
    /// The MSR's index (`0x10a`: `IA32_ARCH_CAPABILITIES`).
    pub index: u32,
    /// Bits 0..=31.
    pub eax: u32,
    /// Bits 32..=63.
    pub edx: u32,
}

/// A CPU's raw x86 data (libvirt's `virCPUx86Data`): CPUID leaves and MSRs, in the order given.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct X86CpuData {
    /// CPUID leaves and sub-leaves.
    pub cpuid: Vec<Cpuid>,
    /// MSRs.
    pub msrs: Vec<Msr>,
}

impl X86CpuData {
    /// The registers (eax, ebx, ecx, edx) of CPUID `leaf`/`sub`, the bits of every entry given
    /// for it together (libvirt ORs an entry given twice: `virCPUx86DataAdd`); None when none
    /// is given.
    #[must_use]
    pub fn cpuid(&self, leaf: u32, sub: u32) -> Option<[u32; 4]> {
        self.cpuid
            .iter()
            .filter(|c| c.eax_in == leaf && c.ecx_in == sub)
            .map(|c| [c.eax, c.ebx, c.ecx, c.edx])
            .reduce(|a, b| [a[0] | b[0], a[1] | b[1], a[2] | b[2], a[3] | b[3]])
    }

    /// The CPU's (family, model, stepping) from CPUID leaf 1's eax, as libvirt computes them
    /// (`x86DataToSignatureFull`: the extended family is always added to the family, the
    /// extended model always put above the model); None without leaf 1.
    #[must_use]
    pub fn signature(&self) -> Option<(u32, u32, u32)> {
        let [eax, ..] = self.cpuid(1, 0)?;
        Some((
            ((eax >> 20) & 0xff) + ((eax >> 8) & 0xf),
            ((eax >> 12) & 0xf0) + ((eax >> 4) & 0xf),
            eax & 0xf,
        ))
    }

    /// Reads a `<cpudata>` element (libvirt's `virCPUx86DataParse`): its `<cpuid>` and `<msr>`
    /// children in document order. Numbers are hexadecimal, with or without `0x`, as libvirt
    /// reads them (`virXPathULongHex`); a `<cpuid>` needs `eax_in`, its other attributes are 0
    /// when absent; an `<msr>` needs all three.
    ///
    /// # Errors
    /// libvirt's words: "XML does not contain expected 'cpudata' element" for another root,
    /// "CPU data for arch X is not x86" for `arch` other than `x86`, "no x86 CPU data found"
    /// without any entry, "failed to parse cpuid\[N\]" / "failed to parse msr\[N\]" (N counts both
    /// kinds from 0) for an entry with a missing or non-hexadecimal value.
    pub fn read(root: Node<'_, '_>) -> Result<X86CpuData, String> {
        if !is_libvirt_element(root, "cpudata") {
            return Err("XML does not contain expected 'cpudata' element".into());
        }
        match root.attribute("arch") {
            Some("x86" | "x86_64" | "i686") => {}
            Some(other) => return Err(format!("CPU data for arch {other} is not x86")),
            None => return Err("missing CPU data architecture".into()),
        }
        let mut data = X86CpuData::default();
        let items = root
            .children()
            .filter(|n| is_libvirt_element(*n, "cpuid") || is_libvirt_element(*n, "msr"));
        for (i, node) in items.enumerate() {
            let hex = |name: &str, required: bool| match node.attribute(name) {
                Some(v) => parse_hex(v),
                None if required => None,
                None => Some(0),
            };
            if node.has_tag_name("cpuid") {
                let item = (|| {
                    Some(Cpuid {
                        eax_in: hex("eax_in", true)?,
                        ecx_in: hex("ecx_in", false)?,
                        eax: hex("eax", false)?,
                        ebx: hex("ebx", false)?,
                        ecx: hex("ecx", false)?,
                        edx: hex("edx", false)?,
                    })
                })()
                .ok_or_else(|| format!("failed to parse cpuid[{i}]"))?;
                data.cpuid.push(item);
            } else {
                let item = (|| {
                    Some(Msr {
                        index: hex("index", true)?,
                        eax: hex("eax", true)?,
                        edx: hex("edx", true)?,
                    })
                })()
                .ok_or_else(|| format!("failed to parse msr[{i}]"))?;
                data.msrs.push(item);
            }
        }
        if data.cpuid.is_empty() && data.msrs.is_empty() {
            return Err("no x86 CPU data found".into());
        }
        Ok(data)
    }

    /// Reads the `<cpudata>` file `path`: a regular file of at most
    /// [`super::MAX_DOCUMENT_BYTES`], UTF-8 XML parsed with the project's hardened options.
    ///
    /// # Errors
    /// [`DocumentError::Input`] for a file that cannot be read or parsed,
    /// [`DocumentError::Invalid`] for what [`X86CpuData::read`] refuses.
    pub fn load(path: &Path) -> Result<X86CpuData, DocumentError> {
        let what = path.display().to_string();
        let bytes = crate::readfile::read_regular(path, super::MAX_DOCUMENT_BYTES)
            .map_err(crate::Error::from)?;
        let text = crate::xml::decode(&bytes, &what)?;
        let doc = crate::xml::parse_xml(text, &what)?;
        X86CpuData::read(doc.root_element()).map_err(|message| DocumentError::Invalid {
            path: path.to_owned(),
            message,
        })
    }
}

/// An unsigned 32-bit hexadecimal number, `0x` optional (C's `strtoul` with base 16, as
/// libvirt's `virStrToLong_ul`; a value above 32 bits is refused rather than cut).
fn parse_hex(text: &str) -> Option<u32> {
    let digits = text
        .strip_prefix("0x")
        .or_else(|| text.strip_prefix("0X"))
        .unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(digits, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<X86CpuData, String> {
        let doc = roxmltree::Document::parse(text).unwrap();
        X86CpuData::read(doc.root_element())
    }

    #[test]
    fn reads_cpuid_and_msr_entries() {
        let d = read(
            "<cpudata arch='x86'>\
             <cpuid eax_in='0x00000001' ecx_in='0x00' eax='0x00050654' ebx='0x29200800' ecx='0x7ffefbff' edx='0xbfebfbff'/>\
             <cpuid eax_in='7' ebx='1'/><cpuid eax_in='7' ebx='0x10'/>\
             <msr index='0x10a' edx='0x00000001' eax='0x0000006b'/></cpudata>",
        )
        .unwrap();
        assert_eq!(d.cpuid.len(), 3);
        assert_eq!(d.cpuid(7, 0), Some([0, 0x11, 0, 0]));
        assert_eq!(d.cpuid(7, 1), None);
        assert_eq!(
            d.msrs,
            [Msr {
                index: 0x10a,
                eax: 0x6b,
                edx: 1
            }]
        );
        // 0x00050654: family 6, model 0x55 = 85, stepping 4 (a Skylake-SP).
        assert_eq!(d.signature(), Some((6, 85, 4)));
    }

    #[test]
    fn refuses_what_libvirt_refuses() {
        for (text, message) in [
            ("<cpu/>", "expected 'cpudata'"),
            ("<cpudata arch='arm'/>", "arch arm is not x86"),
            ("<cpudata arch='x86'/>", "no x86 CPU data found"),
            (
                "<cpudata arch='x86'><cpuid eax='1'/></cpudata>",
                "failed to parse cpuid[0]",
            ),
            (
                "<cpudata arch='x86'><cpuid eax_in='1'/><msr index='0x10a' eax='zz' edx='0'/></cpudata>",
                "failed to parse msr[1]",
            ),
            (
                "<cpudata arch='x86'><cpuid eax_in='0x100000000'/></cpudata>",
                "failed to parse cpuid[0]",
            ),
        ] {
            let err = read(text).unwrap_err();
            assert!(err.contains(message), "{text}: {err}");
        }
    }
}
