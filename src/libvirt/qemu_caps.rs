//! libvirt's QEMU capability cache (`/var/cache/libvirt/qemu/capabilities/*.xml`, one
//! `<qemuCaps>` file per emulator binary: 202 KiB for QEMU 7.2's x86_64, 256 KiB for 10.0's,
//! 357 KiB for 11.1's): the emulator's machine types
//! and their vCPU limits, the libvirt release that wrote the file, the QEMU release it
//! describes, QEMU's own view of the host-model CPU under KVM, and what its TCG gives a guest
//! CPU (`<hostCPU type='tcg'>`, and per model `usable` and the `<blocker>`s).
//!
//! The hook may read the cache at a guest start, so the directory is listed once and each
//! file's head (its first 4 KiB, where libvirt writes `<emulator>`, `<qemuctime>` and
//! `<selfvers>`) read once per run ([`QemuCache`]); the rest of a file is read once per run
//! when first asked ([`CacheFile::bytes`]: `<version>`, 5.6 to 8.3 KiB into the files of QEMU
//! 5.2 to 11.1, the machine types, TCG's models, KVM's host CPU, all searched as bytes); a file
//! is parsed whole only when all its machine types are needed.

use super::capabilities::MachineType;
use super::positive_count;
use crate::xml::{child, is_libvirt_element, text_of};
use roxmltree::Node;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// libvirt's QEMU capability cache directory (root only).
pub const QEMU_CAPS_CACHE: &str = "/var/cache/libvirt/qemu/capabilities";

/// How much of a cache file's beginning holds its emulator, ctime and libvirt version.
const HEAD_BYTES: usize = 4096;

/// How much of a cache file's beginning holds `<version>` (after the probed flags).
const VERSION_BYTES: usize = 16 * 1024;

/// One `<qemuCaps>` document, parsed whole.
#[derive(Debug, Clone, Default)]
pub struct QemuCaps {
    /// `<emulator>`: the binary it describes.
    pub emulator: Option<String>,
    /// `<arch>`.
    pub arch: String,
    /// `<machine type='kvm|tcg' name=... alias=... maxCpus=...>`: each name, and each alias as
    /// a name standing for it (libvirt's `tcg` is the domain type `qemu`).
    pub machines: Vec<MachineType>,
    /// The boolean `<property>`s of `<hostCPU type='kvm'>` that are true, QEMU's spellings
    /// (`lahf-lm`, `sse4.1`): QEMU's own view of the host-model CPU under KVM; None without that
    /// element.
    pub kvm_host_cpu: Option<Vec<String>>,
}

impl QemuCaps {
    /// Reads the `<qemuCaps>` element `root`; `source` names the file in each fact.
    #[must_use]
    pub fn read(root: Node<'_, '_>, source: &str) -> QemuCaps {
        let arch = child(root, "arch").and_then(text_of).unwrap_or_default();
        let emulator = child(root, "emulator").and_then(text_of);
        let mut machines = Vec::new();
        for m in root
            .children()
            .filter(|n| is_libvirt_element(*n, "machine"))
        {
            let vt = match m.attribute("type") {
                Some("tcg") => "qemu",
                Some(t) => t,
                None => continue,
            };
            let Some(name) = m.attribute("name") else {
                continue;
            };
            let max = positive_count(m.attribute("maxCpus"));
            let machine = |name: &str, canonical: Option<&str>| MachineType {
                arch: arch.clone(),
                virt_type: Some(vt.to_string()),
                name: name.to_string(),
                canonical: canonical.map(str::to_string),
                max_cpus: max,
                deprecated: m.attribute("deprecated") == Some("yes"),
                emulator: emulator.clone(),
                source: source.to_string(),
                from_capabilities: false,
            };
            machines.push(machine(name, None));
            if let Some(alias) = m.attribute("alias") {
                machines.push(machine(alias, Some(name)));
            }
        }
        let kvm_host_cpu = root
            .children()
            .find(|n| is_libvirt_element(*n, "hostCPU") && n.attribute("type") == Some("kvm"))
            .map(|cpu| {
                cpu.children()
                    .filter(|p| {
                        is_libvirt_element(*p, "property")
                            && p.attribute("type") == Some("boolean")
                            && p.attribute("value") == Some("true")
                    })
                    .filter_map(|p| p.attribute("name").map(str::to_string))
                    .collect()
            });
        QemuCaps {
            emulator: child(root, "emulator").and_then(text_of),
            arch,
            machines,
            kvm_host_cpu,
        }
    }
}

/// What the head of a cache file says.
#[derive(Debug, Clone, Default)]
pub struct Head {
    /// `<emulator>`, trimmed.
    pub emulator: Option<String>,
    /// `<qemuctime>`: the emulator's ctime when libvirt wrote the file.
    pub ctime: Option<i64>,
    /// `<selfvers>`: the libvirt release that wrote it, in libvirt's number encoding.
    pub selfvers: Option<u64>,
}

/// The head of `path` (its first 4 KiB), when it is a regular file holding a
/// `<qemuCaps>`; None otherwise.
#[must_use]
pub fn head(path: &Path) -> Option<Head> {
    let text = prefix(path, HEAD_BYTES)?;
    if !text.contains("<qemuCaps>") {
        return None;
    }
    Some(Head {
        emulator: element_text(&text, "emulator").map(|e| e.trim().to_string()),
        ctime: element_text(&text, "qemuctime").and_then(|t| t.trim().parse().ok()),
        selfvers: element_text(&text, "selfvers").and_then(|t| t.trim().parse().ok()),
    })
}

/// The first `limit` bytes of the regular file `path`, as text.
fn prefix(path: &Path, limit: usize) -> Option<String> {
    let (f, _) = crate::readfile::open_regular(path).ok()?;
    let mut bytes = Vec::with_capacity(limit);
    std::io::Read::read_to_end(&mut std::io::Read::take(f, limit as u64), &mut bytes).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// The text of the first `<name>...</name>` in `text`, unparsed (for a file head).
fn element_text<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    let rest = text.split(&format!("<{name}>")).nth(1)?;
    rest.split(&format!("</{name}>")).next()
}

/// The end of the emulator's path a cache file must name for a guest of `arch`: the domain's
/// `<emulator>` itself when it names one, else `/qemu-system-ARCH`, the binary libvirt picks
/// ([`crate::libvirt::arch::qemu_arch`]).
#[must_use]
pub fn emulator_suffix(arch: &str, emulator: Option<&str>) -> String {
    emulator.map_or_else(
        || format!("/qemu-system-{}", crate::libvirt::arch::qemu_arch(arch)),
        str::to_string,
    )
}

/// Whether a cache file's `<machine type='TYPE' .../>` elements (libvirt writes one per line,
/// `type` then `name`, then `alias`) list machine types and none is `machine` by name or alias.
/// Searched with `memmem` (SIMD), not parsed: a file of a few hundred KiB costs a search, not a
/// parse.
#[must_use]
pub fn lacks_machine(text: &[u8], qemu_type: &str, machine: &str) -> bool {
    let typed = format!("<machine type='{qemu_type}' ");
    if memchr::memmem::find(text, typed.as_bytes()).is_none() {
        return false;
    }
    let by_name = format!("{typed}name='{machine}'");
    if memchr::memmem::find(text, by_name.as_bytes()).is_some() {
        return false;
    }
    let by_alias = format!(" alias='{machine}'");
    let aliased = memchr::memmem::find_iter(text, by_alias.as_bytes()).any(|at| {
        let line_start = memchr::memrchr(b'\n', &text[..at]).map_or(0, |i| i + 1);
        let line = &text[line_start..at];
        let indent = line.iter().take_while(|b| b.is_ascii_whitespace()).count();
        line[indent..].starts_with(typed.as_bytes())
    });
    !aliased
}

/// What a cache file says TCG makes of one CPU model: `<cpu type='tcg' name='MODEL'
/// typename=... usable='yes|no'>` with a `<blocker name=.../>` per feature TCG lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcgCpuModel {
    /// QEMU's `usable`: TCG gives every feature of QEMU's definition of the model.
    pub usable: bool,
    /// The blockers, QEMU's spellings (`sse4_2`, `tsc-deadline`), in file order.
    pub blockers: Vec<String>,
}

/// The TCG entry of `model` in a cache file's text ([`TcgCpuModel`]); None when the file does not
/// list the model for TCG. Searched as bytes with `memmem`, as [`lacks_machine`] is: libvirt
/// writes the start tag on one line, `type` then `name`, and each `<blocker>` inside.
#[must_use]
pub fn tcg_model(text: &[u8], model: &str) -> Option<TcgCpuModel> {
    if model.contains(['\'', '"', '&', '<']) {
        return None;
    }
    let tag = format!("<cpu type='tcg' name='{model}' ");
    let rest = &text[memchr::memmem::find(text, tag.as_bytes())?..];
    let start_end = memchr::memchr(b'>', rest)?;
    let start = &rest[..=start_end];
    let usable = memchr::memmem::find(start, b"usable='yes'").is_some();
    let mut blockers = Vec::new();
    if !start.ends_with(b"/>") {
        let body_end = memchr::memmem::find(rest, b"</cpu>")?;
        blockers = quoted_after(&rest[start_end..body_end], b"<blocker name='").collect();
    }
    Some(TcgCpuModel { usable, blockers })
}

/// The boolean `<property>`s of the file's `<hostCPU type='tcg'>` that are true, QEMU's
/// spellings: the CPU QEMU's TCG gives a guest (its `max` CPU, which libvirt's host-model and
/// `maximum` are made of under TCG); None without that element. Searched as bytes.
#[must_use]
pub fn tcg_host_cpu(text: &[u8]) -> Option<Vec<String>> {
    host_cpu_on(text, b"<hostCPU type='tcg'")
}

/// The boolean `<property>`s of the file's `<hostCPU type='kvm'>` that are true, QEMU's
/// spellings: QEMU's view of the host CPU under KVM (its `query-cpu-model-expansion` of `host`),
/// which libvirt decodes into domcapabilities' host-model CPU and whose features beyond the
/// CPUID it adds to the host CPU a KVM guest is compared with (`virQEMUCapsInitHostCPUModel`);
/// None without that element. Searched as bytes.
#[must_use]
pub fn kvm_host_cpu(text: &[u8]) -> Option<Vec<String>> {
    host_cpu_on(text, b"<hostCPU type='kvm'")
}

/// The CPU models the file lists for `virt_type` (`kvm`, or `tcg` for `type='qemu'`): the
/// `name` of each `<cpu type='VIRT' name='...'>`, what libvirt offers as domcapabilities'
/// custom models (`virQEMUCapsGetCPUModels`).
#[must_use]
pub fn cpu_models(text: &[u8], virt_type: &str) -> Vec<String> {
    let prefix = format!("<cpu type='{virt_type}' name='");
    quoted_after(text, prefix.as_bytes()).collect()
}

/// The true boolean properties of the `<hostCPU ...>` element that starts with `start`.
fn host_cpu_on(text: &[u8], start: &[u8]) -> Option<Vec<String>> {
    let rest = &text[memchr::memmem::find(text, start)?..];
    let block = &rest[..memchr::memmem::find(rest, b"</hostCPU>")?];
    let on = memchr::memmem::find_iter(block, b"<property name='").filter_map(|at| {
        let prop = &block[at..];
        let prop = &prop[..memchr::memchr(b'>', prop)?];
        memchr::memmem::find(prop, b"type='boolean' value='true'")?;
        quoted_after(prop, b"<property name='").next()
    });
    Some(on.collect())
}

/// Each value that follows `prefix` in `text`, up to its closing `'`.
fn quoted_after<'a>(text: &'a [u8], prefix: &'a [u8]) -> impl Iterator<Item = String> + 'a {
    memchr::memmem::find_iter(text, prefix).filter_map(move |at| {
        let value = &text[at + prefix.len()..];
        let end = memchr::memchr(b'\'', value)?;
        Some(String::from_utf8_lossy(&value[..end]).into_owned())
    })
}

/// One file of the cache: its path and its head.
#[derive(Debug, Clone)]
pub struct CacheFile {
    /// The file (libvirt names it by a hash of the emulator's path).
    pub path: PathBuf,
    /// Its head.
    pub head: Head,
    /// The root of the file system its `<emulator>` path is in ([`cache_root`]).
    pub root: PathBuf,
    /// The whole file, read on first need and kept ([`CacheFile::bytes`]).
    bytes: OnceLock<Option<Vec<u8>>>,
}

impl CacheFile {
    /// The file at `path` with its `head`, its emulator looked for under `root`.
    #[must_use]
    pub fn new(path: PathBuf, head: Head, root: PathBuf) -> CacheFile {
        CacheFile {
            path,
            head,
            root,
            bytes: OnceLock::new(),
        }
    }

    /// The whole file as bytes (at most [`crate::readfile::MAX_FACT_BYTES`]), read once per
    /// process however many questions are asked of it: a file is 200 KiB or more, and the hook
    /// asks it for the machine types, TCG's models and KVM's host CPU at every guest start.
    /// None when it cannot be read (the cache is libvirt's: a file gone is no fact, not an
    /// error). Bytes, not a String: UTF-8 validation would cost more than the searches.
    #[must_use]
    pub fn bytes(&self) -> Option<&[u8]> {
        self.bytes
            .get_or_init(|| {
                crate::readfile::read_regular(&self.path, crate::readfile::MAX_FACT_BYTES).ok()
            })
            .as_deref()
    }

    /// `<version>`: the QEMU release of its emulator, in libvirt's number encoding
    /// ([`super::version::QemuVersion::from_number`]), from the head of [`CacheFile::bytes`]
    /// (the hook asks the rest of the file anyway: one read, not two).
    #[must_use]
    pub fn version(&self) -> Option<u64> {
        let head = self.bytes()?;
        let head = String::from_utf8_lossy(&head[..head.len().min(VERSION_BYTES)]);
        element_text(&head, "version")?.trim().parse().ok()
    }

    /// Whether the file still describes its emulator: its `<qemuctime>` is the emulator's ctime
    /// (the emulator looked for under [`CacheFile::root`]), libvirt's own test before it reuses
    /// the file (`virQEMUCapsIsValid`); after a QEMU upgrade a stale file says nothing about the
    /// binary.
    #[must_use]
    pub fn is_fresh(&self) -> bool {
        let emulator = self
            .head
            .emulator
            .as_deref()
            .map(|e| std::fs::metadata(self.root.join(e.trim_start_matches('/'))));
        match (self.head.ctime, emulator) {
            (Some(t), Some(Ok(m))) => std::os::unix::fs::MetadataExt::ctime(&m) == t,
            _ => false,
        }
    }
}

/// The root of the file system a cache directory belongs to, where its files' `<emulator>` paths
/// are: `R` for `R/var/cache/libvirt/qemu/capabilities` (libvirt's system cache of another root
/// mounted here: a chroot, another machine's disk), else `/`.
#[must_use]
pub fn cache_root(dir: &Path) -> PathBuf {
    const SYSTEM_CACHE: &str = "var/cache/libvirt/qemu/capabilities";
    let text = dir.to_string_lossy();
    match text.trim_end_matches('/').strip_suffix(SYSTEM_CACHE) {
        Some(root) if !root.is_empty() => PathBuf::from(root),
        _ => PathBuf::from("/"),
    }
}

/// libvirt's QEMU capability cache directory, listed and its heads read on first use, once.
#[derive(Debug, Default)]
pub struct QemuCache {
    /// The directory; None when the cache is not read.
    dir: Option<PathBuf>,
    files: OnceLock<Vec<CacheFile>>,
}

impl QemuCache {
    /// The cache at `dir` (None: not read).
    #[must_use]
    pub fn new(dir: Option<PathBuf>) -> QemuCache {
        QemuCache {
            dir,
            files: OnceLock::new(),
        }
    }

    /// The directory, when the cache is read.
    #[must_use]
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// Every regular `*.xml` file of the directory holding a `<qemuCaps>`, sorted by path, with
    /// its head: listed and read once (a file that cannot be read is not a cache file).
    pub fn files(&self) -> &[CacheFile] {
        self.files.get_or_init(|| {
            let Some(dir) = &self.dir else {
                return Vec::new();
            };
            let root = cache_root(dir);
            crate::readfile::xml_files(dir)
                .into_iter()
                .filter_map(|path| {
                    let head = head(&path)?;
                    let root = root.clone();
                    Some(CacheFile::new(path, head, root))
                })
                .collect()
        })
    }

    /// The first file (by path) whose emulator ends with `suffix` ([`emulator_suffix`]).
    #[must_use]
    pub fn for_emulator(&self, suffix: &str) -> Option<&CacheFile> {
        self.files().iter().find(|f| {
            f.head
                .emulator
                .as_deref()
                .is_some_and(|e| e.ends_with(suffix))
        })
    }
}

/// Reads a cache file whole. None when it cannot be read, is not UTF-8 or not a `<qemuCaps>`
/// XML document: the cache is libvirt's, and a corrupt file must not stop a guest.
#[must_use]
pub fn read_file(path: &Path) -> Option<QemuCaps> {
    let what = path.display().to_string();
    let bytes = crate::readfile::read_regular(path, crate::readfile::MAX_FACT_BYTES).ok()?;
    let text = std::str::from_utf8(&bytes).ok()?;
    let doc = crate::xml::parse_xml(text, &what).ok()?;
    let root = doc.root_element();
    is_libvirt_element(root, "qemuCaps").then(|| QemuCaps::read(root, &what))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machines_aliases_and_the_kvm_host_cpu() {
        let doc = roxmltree::Document::parse(
            "<qemuCaps><emulator>/usr/bin/qemu-system-x86_64</emulator><arch>x86_64</arch>\
             <machine type='kvm' name='pc-q35-7.2' alias='q35' maxCpus='288'/>\
             <machine type='tcg' name='pc-i440fx-7.2' maxCpus='255'/>\
             <hostCPU type='kvm' model='base'><property name='lahf-lm' type='boolean' value='true'/>\
             <property name='pni' type='boolean' value='false'/><property name='family' type='number' value='6'/></hostCPU>\
             </qemuCaps>",
        )
        .unwrap();
        let q = QemuCaps::read(doc.root_element(), "f");
        let m: Vec<(&str, Option<&str>, Option<&str>)> = q
            .machines
            .iter()
            .map(|m| {
                (
                    m.name.as_str(),
                    m.virt_type.as_deref(),
                    m.canonical.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            m,
            [
                ("pc-q35-7.2", Some("kvm"), None),
                ("q35", Some("kvm"), Some("pc-q35-7.2")),
                ("pc-i440fx-7.2", Some("qemu"), None)
            ]
        );
        assert_eq!(q.kvm_host_cpu, Some(vec!["lahf-lm".to_string()]));
    }

    #[test]
    fn the_root_of_a_cache_is_where_its_emulators_are() {
        let root = |d: &str| cache_root(Path::new(d));
        assert_eq!(root("/var/cache/libvirt/qemu/capabilities"), Path::new("/"));
        assert_eq!(
            root("/var/tmp/vcp-forky/root/var/cache/libvirt/qemu/capabilities/"),
            Path::new("/var/tmp/vcp-forky/root/")
        );
        assert_eq!(
            root("/home/u/.cache/libvirt/qemu/capabilities"),
            Path::new("/")
        );
        assert_eq!(root("/srv/cache"), Path::new("/"));
    }

    #[test]
    fn tcg_models_and_the_tcg_host_cpu_are_found_as_bytes() {
        let text = b"  <cpu type='kvm' name='SandyBridge' typename='SandyBridge-x86_64-cpu' usable='no'>\n    <blocker name='avx'/>\n  </cpu>\n  <cpu type='tcg' name='SandyBridge' typename='SandyBridge-x86_64-cpu' usable='no'>\n    <blocker name='x2apic'/>\n    <blocker name='tsc-deadline'/>\n  </cpu>\n  <cpu type='tcg' name='Penryn' typename='Penryn-x86_64-cpu' usable='yes'/>\n  <cpu type='tcg' name='Westmere' typename='W' usable='no'>\n    <blocker name='sse4_2'/>\n  </cpu>\n";
        let sb = tcg_model(text, "SandyBridge").unwrap();
        assert!(!sb.usable);
        assert_eq!(
            sb.blockers,
            ["x2apic", "tsc-deadline"],
            "the TCG entry, not KVM's"
        );
        let penryn = tcg_model(text, "Penryn").unwrap();
        assert!(penryn.usable && penryn.blockers.is_empty());
        assert_eq!(tcg_model(text, "Westmere").unwrap().blockers, ["sse4_2"]);
        assert_eq!(tcg_model(text, "Nehalem"), None);
        assert_eq!(tcg_model(text, "x' usable='yes"), None);
        let host_cpu = b"<hostCPU type='kvm' model='base'>\n<property name='avx512f' type='boolean' value='true'/>\n</hostCPU>\n<hostCPU type='tcg' model='base' migratability='yes'>\n    <property name='vme' type='boolean' value='false'/>\n    <property name='sse4.2' type='boolean' value='true' migratable='yes'/>\n    <property name='lahf-lm' type='boolean' value='true' migratable='yes'/>\n    <property name='family' type='number' value='6'/>\n</hostCPU>";
        assert_eq!(tcg_host_cpu(host_cpu).unwrap(), ["sse4.2", "lahf-lm"]);
        assert_eq!(tcg_host_cpu(b"<qemuCaps/>"), None);
        let both = b"<hostCPU type='kvm' model='base'>\n<property name='x2apic' type='boolean' value='true'/>\n<property name='svm' type='boolean' value='false'/>\n</hostCPU>\n<hostCPU type='tcg' model='base'>\n<property name='sse4.2' type='boolean' value='true'/>\n</hostCPU>";
        assert_eq!(kvm_host_cpu(both).unwrap(), ["x2apic"]);
        assert_eq!(tcg_host_cpu(both).unwrap(), ["sse4.2"]);
    }

    #[test]
    fn the_head_gives_both_versions() {
        let dir = std::env::temp_dir().join(format!("vcp-qemu-caps-head-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("x.xml");
        // `<version>` comes after the flags, some 7 KiB in.
        let flags = "  <flag name='kvm'/>\n".repeat(400);
        std::fs::write(&f, format!("<qemuCaps>\n  <emulator>/usr/bin/qemu-system-x86_64</emulator>\n  <qemuctime>1</qemuctime>\n  <selfvers>11003000</selfvers>\n{flags}  <version>10000013</version>\n</qemuCaps>\n")).unwrap();
        let h = head(&f).unwrap();
        assert_eq!((h.selfvers, h.ctime), (Some(11_003_000), Some(1)));
        let file = CacheFile::new(f.clone(), h, dir.clone());
        assert_eq!(file.version(), Some(10_000_013));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_machine_type_is_found_by_name_or_alias_of_its_virt_type() {
        let text = b"<qemuCaps>\n  <machine type='kvm' name='pc-q35-7.2' alias='q35' maxCpus='288'/>\n  <machine type='tcg' name='virt-7.2' alias='virt'/>\n</qemuCaps>\n";
        assert!(!lacks_machine(text, "kvm", "pc-q35-7.2"));
        assert!(!lacks_machine(text, "kvm", "q35"));
        assert!(lacks_machine(text, "kvm", "virt"));
        assert!(lacks_machine(text, "kvm", "pc-q35-99.0"));
        assert!(
            !lacks_machine(b"<qemuCaps/>", "kvm", "x"),
            "no machine list: nothing said"
        );
        assert_eq!(emulator_suffix("i686", None), "/qemu-system-i386");
        assert_eq!(emulator_suffix("x86_64", Some("/opt/qemu")), "/opt/qemu");
    }
}
