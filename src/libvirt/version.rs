//! libvirt's release numbers: how libvirt writes them (`9.0.0`) and encodes them
//! (`virConnectGetLibVersion`, `<selfvers>` of its QEMU capability cache: `9000000`), and QEMU's,
//! which libvirt encodes the same way (`<version>` of the cache: `7002022` is QEMU 7.2.22).

/// A libvirt release, `MAJOR.MINOR.MICRO`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct LibvirtVersion {
    /// Major (`11` of 11.3.0).
    pub major: u32,
    /// Minor.
    pub minor: u32,
    /// Micro.
    pub micro: u32,
}

impl LibvirtVersion {
    /// A version from libvirt's number encoding, `major * 1,000,000 + minor * 1,000 + micro`
    /// (`virConnectGetLibVersion`, and `<selfvers>` in libvirt's QEMU capability cache:
    /// `9000000` is 9.0.0, `11003000` 11.3.0).
    #[must_use]
    pub fn from_number(n: u64) -> LibvirtVersion {
        let part = |x: u64| u32::try_from(x % 1000).unwrap_or(0);
        LibvirtVersion {
            major: u32::try_from(n / 1_000_000).unwrap_or(u32::MAX),
            minor: part(n / 1000),
            micro: part(n),
        }
    }
}

impl std::str::FromStr for LibvirtVersion {
    type Err = String;

    /// `MAJOR[.MINOR[.MICRO]]` (`9.0.0`, `11.3`, `11`; a missing part is 0): digits and dots
    /// only, so no surrounding whitespace and no sign.
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        let bad = || {
            format!(
                "'{s}' is not a libvirt version: MAJOR[.MINOR[.MICRO]], digits only (e.g. 11.3.0, 11.3 or 11)"
            )
        };
        let mut parts = s.split('.').map(|p| {
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            p.parse::<u32>().map_err(|_| bad())
        });
        let major = parts.next().ok_or_else(bad)??;
        let minor = parts.next().transpose()?.unwrap_or(0);
        let micro = parts.next().transpose()?.unwrap_or(0);
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(LibvirtVersion {
            major,
            minor,
            micro,
        })
    }
}

impl std::fmt::Display for LibvirtVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.micro)
    }
}

/// A QEMU release, `MAJOR.MINOR.MICRO`: numbered as libvirt's releases are, and encoded the same
/// way in `<version>` of libvirt's QEMU capability cache (`7002022` is QEMU 7.2.22, `10000013`
/// QEMU 10.0.13; `virQEMUCapsParseHelpStr`'s encoding). What depends on it is in
/// [`crate::tcg_facts`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct QemuVersion(pub LibvirtVersion);

impl QemuVersion {
    /// From libvirt's encoding in `<version>`: `major * 1,000,000 + minor * 1,000 + micro`.
    #[must_use]
    pub fn from_number(n: u64) -> QemuVersion {
        QemuVersion(LibvirtVersion::from_number(n))
    }
}

impl std::str::FromStr for QemuVersion {
    type Err = String;

    /// `MAJOR[.MINOR[.MICRO]]` (`10.0.13`, `7.2`, `9`; a missing part is 0): digits and dots only.
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        s.parse::<LibvirtVersion>().map(QemuVersion).map_err(|_| {
            format!(
                "'{s}' is not a QEMU version: MAJOR[.MINOR[.MICRO]], digits only (e.g. 10.0.13, 7.2 or 9)"
            )
        })
    }
}

impl std::fmt::Display for QemuVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qemu_versions_parse_decode_and_order() {
        let v = |s: &str| s.parse::<QemuVersion>().unwrap();
        assert_eq!(v("10.0.13").to_string(), "10.0.13");
        assert_eq!(QemuVersion::from_number(7_002_022), v("7.2.22"));
        assert_eq!(QemuVersion::from_number(10_000_013), v("10.0.13"));
        assert!(v("8.2.9") < v("9") && v("9") < v("10.0"));
        let e = "ten".parse::<QemuVersion>().unwrap_err();
        assert!(e.contains("is not a QEMU version"), "{e}");
    }

    #[test]
    fn libvirt_versions_are_major_minor_micro_with_parts_left_out() {
        let v = |s: &str| s.parse::<LibvirtVersion>();
        assert_eq!(v("11.3.0").unwrap().to_string(), "11.3.0");
        assert_eq!(v("11.3").unwrap().to_string(), "11.3.0");
        assert_eq!(v("11").unwrap().to_string(), "11.0.0");
        for bad in [
            "",
            " 11.3",
            "11.3 ",
            "11 .3",
            "+11",
            "11.+3",
            "11.",
            ".3",
            "11..3",
            "1.2.3.4",
            "11.x",
            "99999999999",
        ] {
            let e = v(bad).unwrap_err();
            assert!(e.contains("MAJOR[.MINOR[.MICRO]]"), "{bad:?}: {e}");
        }
    }
}
