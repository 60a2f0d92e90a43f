//! The guest's operating system, as its domain says it, and the CPU floor that OS needs.
//!
//! Two producers write the OS into the domain:
//!
//! * virt-install and virt-manager write libosinfo's OS id into the domain's metadata:
//!   `<metadata><libosinfo:libosinfo xmlns:libosinfo="http://libosinfo.org/xmlns/libvirt/domain/1.0">
//!   <libosinfo:os id="http://redhat.com/rhel/10.0"/>` (osinfo-db's `<os id>`);
//! * CloudStack's KVM agent writes the guest OS type's name into `<description>`
//!   (`LibvirtComputingResource.createVmFromSpec`: `vm.setDomDescription(vmTo.getOs())`), e.g.
//!   `Rocky Linux 9`. Any `<description>` is read as such a name; it names an OS only where a
//!   floor's `cloudstack` glob matches it.
//!
//! The floors are data, `src/cpu/os_floors.toml`: per OS family the psABI level and the features
//! it needs, matched by libosinfo id and CloudStack name, each row citing the vendor's document.
//! An OS no row matches has no floor known, and nothing is guessed.

use crate::cpu::Level;
use crate::xml::{is_libvirt_element, text_of};
use roxmltree::Node;
use serde::Deserialize;
use std::sync::OnceLock;

/// libosinfo's namespace for its domain metadata (virt-install's `osinfo` XML).
pub const LIBOSINFO_NS: &str = "http://libosinfo.org/xmlns/libvirt/domain/1.0";

/// Where the domain says its OS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OsSource {
    /// `<libosinfo:os id=...>` in `<metadata>`.
    Libosinfo,
    /// `<description>`, CloudStack's guest OS name.
    Description,
}

/// A guest's operating system as its domain names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestOs {
    /// libosinfo's OS id (`http://redhat.com/rhel/10.0`) or the `<description>` text.
    pub id: String,
    /// Which of the two it is.
    pub source: OsSource,
}

impl GuestOs {
    /// The OS of the domain whose root element is `root`: libosinfo's id when the metadata
    /// carries one, else the `<description>` text (trimmed, when not empty); None otherwise.
    #[must_use]
    pub fn of(root: Node<'_, '_>) -> Option<GuestOs> {
        let libosinfo = root
            .children()
            .filter(|n| is_libvirt_element(*n, "metadata"))
            .flat_map(|m| m.children())
            .filter(|n| n.tag_name().namespace() == Some(LIBOSINFO_NS))
            .flat_map(|n| n.children())
            .find(|n| {
                n.tag_name().namespace() == Some(LIBOSINFO_NS)
                    && n.has_tag_name((LIBOSINFO_NS, "os"))
            })
            .and_then(|os| os.attribute("id"))
            .filter(|id| !id.trim().is_empty());
        if let Some(id) = libosinfo {
            return Some(GuestOs {
                id: id.trim().to_string(),
                source: OsSource::Libosinfo,
            });
        }
        root.children()
            .find(|n| is_libvirt_element(*n, "description"))
            .and_then(text_of)
            .map(|t| one_line(&t))
            .filter(|t| !t.is_empty())
            .map(|id| GuestOs {
                id,
                source: OsSource::Description,
            })
    }

    /// The OS for messages: libosinfo's short form (`http://redhat.com/rhel/10.0` → `rhel10.0`,
    /// osinfo-db's `<short-id>` for most), the description as written.
    #[must_use]
    pub fn short(&self) -> String {
        match self.source {
            OsSource::Libosinfo => {
                let parts: Vec<&str> = self.id.trim_end_matches('/').rsplit('/').take(2).collect();
                match parts.as_slice() {
                    [version, family] if self.id.contains("://") => format!("{family}{version}"),
                    _ => self.id.clone(),
                }
            }
            OsSource::Description => self.id.clone(),
        }
    }

    /// The floor of this OS ([`floors`]), when a row names it.
    #[must_use]
    pub fn floor(&self) -> Option<&'static Floor> {
        let opts = glob::MatchOptions {
            case_sensitive: false,
            ..glob::MatchOptions::new()
        };
        floors().iter().find(|f| match self.source {
            OsSource::Libosinfo => f.libosinfo.iter().any(|g| g.matches(&self.id)),
            OsSource::Description => f
                .cloudstack
                .iter()
                .any(|g| g.matches_with(&self.id, opts) && minor_only(g.as_str(), &self.id)),
        })
    }
}

/// `text` as one line: runs of white space (line breaks included) made one space, control
/// characters dropped, trimmed; so a description never starts a line of its own in a message
/// or a log.
fn one_line(text: &str) -> String {
    text.split_whitespace()
        .map(|w| w.chars().filter(|c| !c.is_control()).collect::<String>())
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// For a CloudStack glob `NAME 9.*` (a minor version), whether what `*` took of `name` is one:
/// digits, then nothing or CloudStack's suffix (` (64-bit)`), never free text (`Rocky Linux
/// 9.4 web server`). Any other glob: true.
fn minor_only(glob: &str, name: &str) -> bool {
    let Some(prefix) = glob.strip_suffix('*').filter(|p| p.ends_with('.')) else {
        return true;
    };
    let Some(rest) = name.get(prefix.len()..) else {
        return false;
    };
    let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let after = &rest[digits..];
    digits > 0 && (after.is_empty() || (after.starts_with(" (") && after.ends_with(')')))
}

/// One row of `src/cpu/os_floors.toml`: an OS family's CPU floor and its source.
#[derive(Debug)]
pub struct Floor {
    /// The family and versions, for messages.
    pub os: String,
    /// Globs over libosinfo's OS id.
    pub libosinfo: Vec<glob::Pattern>,
    /// Globs over CloudStack's guest OS name (matched case-insensitively).
    pub cloudstack: Vec<glob::Pattern>,
    /// The psABI level it needs.
    pub level: Option<Level>,
    /// libvirt feature names it needs beyond the level.
    pub require: Vec<String>,
    /// What happens below it.
    pub what: String,
    /// The vendor document stating it.
    pub source: String,
}

impl Floor {
    /// The features of the floor a CPU lacks (`has` says whether it has one, by libvirt's
    /// name): its level's first, then the ones it requires beyond.
    #[must_use]
    pub fn missing(&self, has: impl Fn(&str) -> bool) -> Vec<String> {
        let level = self.level.map(Level::features).unwrap_or_default();
        level
            .into_iter()
            .chain(self.require.iter().map(String::as_str))
            .filter(|f| !has(f))
            .map(str::to_string)
            .collect()
    }

    /// What the floor asks, for messages: `x86-64-v3`, `sse4.2, popcnt`, or both.
    #[must_use]
    pub fn needs(&self) -> String {
        let mut parts: Vec<String> = self.level.iter().map(|l| l.as_str().to_string()).collect();
        parts.extend(self.require.iter().cloned());
        parts.join(" + ")
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    floor: Vec<Row>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Row {
    os: String,
    #[serde(default)]
    libosinfo: Vec<String>,
    #[serde(default)]
    cloudstack: Vec<String>,
    level: Option<String>,
    #[serde(default)]
    require: Vec<String>,
    what: String,
    source: String,
}

/// The table, as shipped.
const FLOORS: &str = include_str!("cpu/os_floors.toml");

/// The floors of `src/cpu/os_floors.toml`, read once.
///
/// # Panics
/// When the table does not read: it ships inside the binary and a unit test reads it, so that
/// is a build's defect.
#[must_use]
pub fn floors() -> &'static [Floor] {
    static TABLE: OnceLock<Vec<Floor>> = OnceLock::new();
    TABLE.get_or_init(|| read(FLOORS).unwrap_or_else(|e| panic!("src/cpu/os_floors.toml: {e}")))
}

/// Reads a floors table.
fn read(text: &str) -> Result<Vec<Floor>, String> {
    let table: Table = toml::from_str(text).map_err(|e| e.to_string())?;
    let globs = |list: Vec<String>| -> Result<Vec<glob::Pattern>, String> {
        list.iter()
            .map(|g| glob::Pattern::new(g).map_err(|e| format!("{g}: {e}")))
            .collect()
    };
    table
        .floor
        .into_iter()
        .map(|r| {
            let level = r
                .level
                .as_deref()
                .map(str::parse::<Level>)
                .transpose()
                .map_err(|e| format!("{}: {e}", r.os))?;
            if level.is_none() && r.require.is_empty() {
                return Err(format!("{}: neither level nor require", r.os));
            }
            Ok(Floor {
                libosinfo: globs(r.libosinfo)?,
                cloudstack: globs(r.cloudstack)?,
                level,
                require: r.require,
                what: r.what,
                source: r.source,
                os: r.os,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os_of(xml: &str) -> Option<GuestOs> {
        let doc = roxmltree::Document::parse(xml).unwrap();
        GuestOs::of(doc.root_element())
    }

    #[test]
    fn the_shipped_table_reads_and_every_feature_is_libvirts() {
        assert!(floors().len() >= 3);
        for f in floors() {
            assert!(!f.source.is_empty() && !f.what.is_empty(), "{}", f.os);
            for r in &f.require {
                assert!(crate::cpu::is_known_x86_feature(r), "{}: {r}", f.os);
            }
        }
    }

    #[test]
    fn libosinfo_metadata_names_the_os_and_its_floor() {
        let os = os_of(
            "<domain><description>ignored</description><metadata><libosinfo:libosinfo xmlns:libosinfo='http://libosinfo.org/xmlns/libvirt/domain/1.0'><libosinfo:os id='http://redhat.com/rhel/10.0'/></libosinfo:libosinfo></metadata></domain>",
        )
        .unwrap();
        assert_eq!(os.source, OsSource::Libosinfo);
        assert_eq!(os.short(), "rhel10.0");
        assert_eq!(os.floor().unwrap().level, Some(Level::V3));
        let rhel9 = GuestOs {
            id: "http://redhat.com/rhel/9.4".into(),
            source: OsSource::Libosinfo,
        };
        assert_eq!(rhel9.floor().unwrap().level, Some(Level::V2));
        let win = GuestOs {
            id: "http://microsoft.com/win/11".into(),
            source: OsSource::Libosinfo,
        };
        assert_eq!(win.floor().unwrap().require, ["sse4.2", "popcnt"]);
        // RHEL 1 is no RHEL 10; Fedora has no floor.
        for id in [
            "http://redhat.com/rhel/1.0",
            "http://fedoraproject.org/fedora/40",
        ] {
            let os = GuestOs {
                id: id.into(),
                source: OsSource::Libosinfo,
            };
            assert!(os.floor().is_none(), "{id}");
        }
    }

    #[test]
    fn cloudstacks_description_names_the_os_case_insensitively() {
        let os =
            os_of("<domain><description> rocky linux 9 (64-bit) </description></domain>").unwrap();
        assert_eq!(os.source, OsSource::Description);
        assert_eq!(os.short(), "rocky linux 9 (64-bit)");
        assert_eq!(os.floor().unwrap().level, Some(Level::V2));
        let debian =
            os_of("<domain><description>Debian GNU/Linux 12 (64-bit)</description></domain>");
        assert!(debian.unwrap().floor().is_none());
        assert!(os_of("<domain><description>  </description></domain>").is_none());
        assert!(os_of("<domain><name>x</name></domain>").is_none());
    }

    /// A minor version and CloudStack's suffix are an OS name; free text after it, or a longer
    /// version, are not. A description is read as one line.
    #[test]
    fn a_cloudstack_name_is_the_name_alone_read_as_one_line() {
        let floor = |d: &str| {
            os_of(&format!("<domain><description>{d}</description></domain>"))
                .and_then(|os| os.floor().map(|f| f.level))
        };
        assert_eq!(floor("Rocky Linux 10.4"), Some(Some(Level::V3)));
        assert_eq!(floor("Rocky Linux 10.4 (64-bit)"), Some(Some(Level::V3)));
        assert_eq!(floor("Rocky Linux 10 (64-bit)"), Some(Some(Level::V3)));
        assert_eq!(floor("Rocky Linux 10.4 web server"), None);
        assert_eq!(floor("Rocky Linux 10. (64-bit)"), None);
        assert_eq!(floor("Rocky Linux 100"), None);
        assert_eq!(floor("Rocky Linux 10 web server"), None);
        let os = os_of(
            "<domain><description>Rocky Linux\n  10.4\t(64-bit)&#x9b;</description></domain>",
        )
        .unwrap();
        assert_eq!(os.id, "Rocky Linux 10.4 (64-bit)");
        assert_eq!(os.floor().and_then(|f| f.level), Some(Level::V3));
    }

    /// What a CloudStack name should get, from its family and major version alone, as the
    /// vendors document it (independent of the table's globs): `needs()` of the expected floor.
    fn expected_for_cloudstack(name: &str) -> Option<&'static str> {
        const FAMILIES: [(&str, &str); 8] = [
            ("Red Hat Enterprise Linux ", "el"),
            ("CentOS Stream ", "el"),
            // CloudStack's "CentOS 9" is CentOS Stream 9 (there is no other CentOS 9).
            ("CentOS ", "el"),
            ("AlmaLinux ", "el"),
            ("Rocky Linux ", "el"),
            ("Oracle Linux ", "el"),
            ("SUSE Linux Enterprise Server ", "sles"),
            ("Windows ", "windows"),
        ];
        const FLOORS: [(&str, &str, &str); 5] = [
            ("el", "9", "x86-64-v2"),
            ("el", "10", "x86-64-v3"),
            ("sles", "16", "x86-64-v2"),
            ("windows", "11", "sse4.2 + popcnt"),
            ("windows", "Server 2025", "sse4.2 + popcnt"),
        ];
        let (rest, family) = FAMILIES
            .iter()
            .find_map(|(prefix, family)| name.strip_prefix(prefix).map(|r| (r, *family)))?;
        FLOORS.iter().find_map(|(f, version, needs)| {
            let after = rest.strip_prefix(version)?;
            let ends = after.is_empty()
                || after.starts_with(" (")
                || after.starts_with('.') && after[1..].starts_with(|c: char| c.is_ascii_digit());
            (*f == family && ends).then_some(*needs)
        })
    }

    /// Every guest OS name CloudStack's own database defines (tests/data/cloudstack/guest-os.txt)
    /// as its KVM agent writes it into `<description>`: those of an OS whose vendor documents a
    /// floor get exactly that floor, every other none.
    #[test]
    fn every_cloudstack_guest_os_name_gets_its_vendors_floor_and_no_other() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/cloudstack/guest-os.txt"
        );
        let text = std::fs::read_to_string(path).unwrap();
        let names: Vec<&str> = text
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .collect();
        assert!(names.len() > 200, "{path}: {} names", names.len());
        let mut wrong = Vec::new();
        let mut rows_hit = std::collections::BTreeSet::new();
        for name in &names {
            let xml = format!(
                "<domain><description>{}</description></domain>",
                name.replace('&', "&amp;").replace('<', "&lt;")
            );
            let os = os_of(&xml).unwrap();
            assert_eq!((os.source, os.id.as_str()), (OsSource::Description, *name));
            let got = os.floor().map(|f| {
                rows_hit.insert(f.os.clone());
                f.needs()
            });
            let want = expected_for_cloudstack(name);
            if got.as_deref() != want {
                wrong.push(format!("{name:?}: got {got:?}, expected {want:?}"));
            }
        }
        assert!(
            wrong.is_empty(),
            "CloudStack names judged wrongly:\n{}",
            wrong.join("\n")
        );
        // Every row with CloudStack globs is reached by a name CloudStack really has.
        for f in floors().iter().filter(|f| !f.cloudstack.is_empty()) {
            assert!(
                rows_hit.contains(&f.os),
                "no CloudStack name reaches {:?}",
                f.os
            );
        }
    }

    /// The expectation itself: family and major version decide, not a prefix of the number.
    #[test]
    fn the_cloudstack_expectation_reads_family_and_major_version() {
        for (name, want) in [
            ("Red Hat Enterprise Linux 9.0", Some("x86-64-v2")),
            ("CentOS 9", Some("x86-64-v2")),
            ("CentOS Stream 10 (preview)", Some("x86-64-v3")),
            ("Windows Server 2025 (64-bit)", Some("sse4.2 + popcnt")),
            ("Red Hat Enterprise Linux 8.0", None),
            ("CentOS 7", None),
            ("Rocky Linux 90", None),
            ("Windows 12 (64-bit)", None),
            ("Windows Server 2022 (64-bit)", None),
            ("Ubuntu 22.04 LTS", None),
            ("Rocky Linux (64-bit)", None),
        ] {
            assert_eq!(expected_for_cloudstack(name), want, "{name}");
        }
    }

    #[test]
    fn a_broken_table_is_refused() {
        assert!(read("[[floor]]\nos='x'\nwhat='w'\nsource='s'\n").is_err());
        assert!(read("[[floor]]\nos='x'\nlevel='v9'\nwhat='w'\nsource='s'\n").is_err());
        assert!(
            read("[[floor]]\nos='x'\nlevel='x86-64-v2'\nwhat='w'\nsource='s'\nextra=1\n").is_err()
        );
    }
}
