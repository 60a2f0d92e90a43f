//! Guest facts: what the tool needs to know of a guest to judge it on any host, and nothing
//! else.
//!
//! A guest's facts are a reduced copy of its `<domain>`: `<name>`, `<uuid>`, the virt type,
//! `<memory>`/`<maxMemory>` (the memory-hotplug rules), `<vcpu>`, `<vcpus>`, `<os><type>`
//! (arch and machine type), `<features>`, every top-level `<cpu>`, and of `<devices>` the
//! `<emulator>`, `<iommu>` and the `<memballoon model>` only; and the guest's OS when a floor
//! names it ([`crate::guest_os`]: libosinfo's OS id, as a `<metadata>` of that one element, or
//! CloudStack's guest OS name as `<description>`). Each element is copied as libvirt wrote it;
//! nothing else is: no graphics password, no disk source, no interface, no firmware or kernel
//! path, no other `<metadata>` or `<description>`, no `<seclabel>`. For a running guest the copy is of its live
//! XML (libvirt's status file `/run/libvirt/qemu/NAME.xml`, `<domstatus><domain>`): its CPU is
//! the one QEMU gave, which is what a live migration carries (under TCG it can differ from the
//! definition: features QEMU could not give are listed `policy='disable'`).
//!
//! The published document, one per host (`virt-cpu-policy facts --guests`, and
//! `virt-cpu-policyd --publish` beside the host's `<hostFacts>`), is
//!
//! ```xml
//! <guestFacts host='HOST'>
//! <guest name='NAME' state='running|shutoff' persistent='yes|no'>
//! <domain type='kvm'>...the reduced domain (running: the live XML)...</domain>
//! <definition><domain>...a running guest's reduced definition...</domain></definition>
//! </guest>
//! </guestFacts>
//! ```

use crate::domain::Domain;
use crate::xml::{child, is_libvirt_element, text_of};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The root element of the guest-facts document.
pub const ROOT: &str = "guestFacts";

/// libvirt's directory of stored definitions.
pub const CONFIG_DIR: &str = "/etc/libvirt/qemu";

/// libvirt's directory of running guests' status files (`<domstatus>`).
pub const STATE_DIR: &str = "/run/libvirt/qemu";

/// The file name of a host's published guest facts in a facts directory: `HOST.guests.xml`,
/// beside its `HOST.xml` host facts.
#[must_use]
pub fn published_name(host: &str) -> String {
    format!(
        "{}{}",
        crate::writefile::safe_file_name(host),
        crate::cluster::hosts::GUEST_FACTS_SUFFIX
    )
}

/// This machine's host name (`uname(2)`'s node name, which `gethostname(2)` returns), when it
/// has one.
#[must_use]
pub fn this_host_name() -> Option<String> {
    let uname = rustix::system::uname();
    let name = uname.nodename().to_string_lossy().trim().to_string();
    (!name.is_empty()).then_some(name)
}

/// Whether a guest runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuestState {
    /// Running (or paused): its facts are its live XML; another host takes it by live
    /// migration.
    Running,
    /// Defined, not running: another host takes it by define and start.
    Shutoff,
}

impl GuestState {
    /// `running` or `shutoff` (libvirt's `virsh domstate` words).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            GuestState::Running => "running",
            GuestState::Shutoff => "shutoff",
        }
    }
}

/// One guest's facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestFacts {
    /// The domain's `<name>`.
    pub name: String,
    /// The host it is on, when known (`<guestFacts host>`).
    pub host: Option<String>,
    /// Running or not.
    pub state: GuestState,
    /// Whether libvirt stores a definition of it.
    pub persistent: bool,
    /// The reduced `<domain>` document (see the module docs), name and UUID included: the live
    /// XML of a running guest, else its definition.
    pub domain: String,
    /// A running persistent guest's reduced definition (what it restarts from, e.g.
    /// `mode='host-model'` where the live CPU names the model it got); None otherwise.
    pub definition: Option<String>,
    /// Where the facts came from: a file, or a file and the guest's name in it.
    pub source: String,
}

/// The reduced copy of `dom` (see the module docs).
#[must_use]
pub fn reduce(dom: &Domain<'_>) -> String {
    reduce_element(dom.root())
}

/// [`reduce`] of a libvirt `<domain>` element read as part of a larger document (a
/// `<guestFacts>`' guests): the element itself, not parsed again on its own (that second parse
/// was a tenth of a 100,000-guest fleet's time).
fn reduce_element(root: roxmltree::Node<'_, '_>) -> String {
    let text = root.document().input_text();
    let copy = |n: roxmltree::Node<'_, '_>| &text[n.range()];
    let mut s = String::from("<domain");
    if let Some(t) = root.attribute("type") {
        let _ = write!(s, " type='{}'", quick_xml::escape::escape(t));
    }
    s.push_str(">\n");
    // The OS, when it has a floor the judge reads ([`crate::guest_os`]): libosinfo's id alone,
    // or CloudStack's guest OS name; no other metadata, no other description.
    if let Some(os) = crate::guest_os::GuestOs::of(root).filter(|os| os.floor().is_some()) {
        let id = quick_xml::escape::escape(&os.id);
        match os.source {
            crate::guest_os::OsSource::Libosinfo => {
                let ns = crate::guest_os::LIBOSINFO_NS;
                let _ = writeln!(
                    s,
                    "  <metadata><libosinfo:libosinfo xmlns:libosinfo='{ns}'><libosinfo:os id='{id}'/></libosinfo:libosinfo></metadata>"
                );
            }
            crate::guest_os::OsSource::Description => {
                let _ = writeln!(s, "  <description>{id}</description>");
            }
        }
    }
    for name in ["name", "uuid", "maxMemory", "memory", "vcpu", "vcpus"] {
        if let Some(n) = child(root, name) {
            let _ = writeln!(s, "  {}", copy(n));
        }
    }
    if let Some(t) = child(root, "os").and_then(|os| child(os, "type")) {
        let _ = writeln!(s, "  <os>{}</os>", copy(t));
    }
    if let Some(n) = child(root, "features") {
        let _ = writeln!(s, "  {}", copy(n));
    }
    // Every <cpu> child, as Domain::cpus.
    for cpu in root.children().filter(|c| is_libvirt_element(*c, "cpu")) {
        let _ = writeln!(s, "  {}", copy(cpu));
    }
    if let Some(devices) = child(root, "devices") {
        s.push_str("  <devices>\n");
        for name in ["emulator", "iommu"] {
            if let Some(n) = child(devices, name) {
                let _ = writeln!(s, "    {}", copy(n));
            }
        }
        if let Some(b) = child(devices, "memballoon") {
            let model = b.attribute("model").unwrap_or("virtio");
            let _ = writeln!(
                s,
                "    <memballoon model='{}'/>",
                quick_xml::escape::escape(model)
            );
        }
        s.push_str("  </devices>\n");
    }
    s.push_str("</domain>\n");
    s
}

/// The `<guestFacts>` document of `host`'s `guests`, newline-terminated.
#[must_use]
pub fn document(host: &str, guests: &[GuestFacts]) -> String {
    let esc = |v: &str| quick_xml::escape::escape(v).into_owned();
    let mut s = format!("<{ROOT} host='{}'>\n", esc(host));
    for g in guests {
        let _ = writeln!(
            s,
            "<guest name='{}' state='{}' persistent='{}'>",
            esc(&g.name),
            g.state.as_str(),
            if g.persistent { "yes" } else { "no" }
        );
        s.push_str(&g.domain);
        if let Some(d) = &g.definition {
            s.push_str("<definition>\n");
            s.push_str(d);
            s.push_str("</definition>\n");
        }
        s.push_str("</guest>\n");
    }
    let _ = writeln!(s, "</{ROOT}>");
    s
}

/// The host a `<guestFacts>` document (root `root`) names (`host`, trimmed), when it names one.
#[must_use]
pub fn document_host(root: roxmltree::Node<'_, '_>) -> Option<String> {
    root.attribute("host")
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(str::to_string)
}

/// Reads a `<guestFacts>` document `text` (root `root`); `source` names the file.
///
/// # Errors
/// A sentence: a `<guest>` without `<domain>`, an unknown `state`, or a `<domain>` that is not
/// libvirt's.
pub fn read(root: roxmltree::Node<'_, '_>, source: &str) -> Result<Vec<GuestFacts>, String> {
    let host = document_host(root);
    let mut out = Vec::new();
    for g in root.children().filter(|n| is_libvirt_element(*n, "guest")) {
        let Some(d) = child(g, "domain") else {
            return Err("a <guest> without <domain>".into());
        };
        let state = match g.attribute("state") {
            // A paused guest is active: it migrates live with the CPU it has.
            Some("running" | "paused") => GuestState::Running,
            Some("shutoff") | None => GuestState::Shutoff,
            Some(other) => {
                return Err(format!(
                    "<guest state='{other}'>: not running, paused or shutoff"
                ));
            }
        };
        let name = g.attribute("name").map_or_else(
            || child(d, "name").and_then(text_of).unwrap_or_default(),
            str::to_string,
        );
        let definition = match child(g, "definition").map(|d| child(d, "domain")) {
            None => None,
            Some(None) => return Err("a <definition> without <domain>".into()),
            Some(Some(d)) => Some(reduce_element(d)),
        };
        out.push(GuestFacts {
            source: format!("{source} (guest '{name}')"),
            name,
            host: host.clone(),
            state,
            persistent: g.attribute("persistent") != Some("no"),
            domain: reduce_element(d),
            definition,
        });
    }
    Ok(out)
}

/// The facts of one `<domain>` document (a stored definition, `virsh dumpxml`) or libvirt
/// status file (`<domstatus>`: the guest runs, its `<domain>` is the live XML) read from
/// `source`; the host is unknown.
///
/// # Errors
/// A sentence: a `<domstatus>` without `<domain>`, or a root that is neither.
pub fn from_domain_document(
    root: roxmltree::Node<'_, '_>,
    source: &str,
) -> Result<GuestFacts, String> {
    let text = root.document().input_text();
    let (domain, state) = match crate::domain::status_domain(root) {
        Some(d) => (&text[d?.range()], GuestState::Running),
        // `virsh dumpxml` of a running guest: libvirt writes `<domain id='N'>` only for an
        // active domain ([`Domain::is_live`]), so its CPU is the live one a migration carries.
        None if crate::domain::is_live_element(root) => (&text[root.range()], GuestState::Running),
        None => (&text[root.range()], GuestState::Shutoff),
    };
    let dom = Domain::parse(domain, source).map_err(|e| e.to_string())?;
    Ok(GuestFacts {
        name: dom.name(),
        host: None,
        state,
        persistent: true,
        domain: reduce(&dom),
        definition: None,
        source: source.to_string(),
    })
}

/// What [`gather`] could not read: the file and why, one sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unread {
    /// The file.
    pub path: PathBuf,
    /// Why.
    pub message: String,
}

/// This host's guests, from libvirt's files (never from libvirt): every stored definition in
/// `config_dir` (`*.xml`, libvirt's `/etc/libvirt/qemu`), and every status file in
/// `state_dir` (libvirt's `/run/libvirt/qemu`, one per running guest), which wins for the guest
/// it describes (its live CPU). Sorted by name; `host` names the host in each. Files that
/// cannot be read are returned beside, never silently left out.
#[must_use]
pub fn gather(config_dir: &Path, state_dir: &Path, host: &str) -> (Vec<GuestFacts>, Vec<Unread>) {
    let mut guests: std::collections::BTreeMap<String, GuestFacts> =
        std::collections::BTreeMap::new();
    let mut unread = Vec::new();
    let read_dir = |dir: &Path, running: bool, unread: &mut Vec<Unread>| {
        let mut found = Vec::new();
        for path in crate::readfile::xml_files(dir) {
            match read_file(&path) {
                Ok(g) if (g.state == GuestState::Running) == running => found.push(g),
                // A stored definition that is a status file, or the reverse: not libvirt's.
                Ok(_) => unread.push(Unread {
                    message: format!(
                        "not a {} here",
                        if running { "<domstatus>" } else { "<domain>" }
                    ),
                    path,
                }),
                Err(message) => unread.push(Unread { path, message }),
            }
        }
        found
    };
    for mut g in read_dir(config_dir, false, &mut unread) {
        g.host = Some(host.to_string());
        guests.insert(g.name.clone(), g);
    }
    for mut g in read_dir(state_dir, true, &mut unread) {
        g.host = Some(host.to_string());
        let stored = guests.remove(&g.name);
        g.persistent = stored.is_some();
        g.definition = stored.map(|s| s.domain);
        guests.insert(g.name.clone(), g);
    }
    (guests.into_values().collect(), unread)
}

/// One file of [`gather`].
fn read_file(path: &Path) -> Result<GuestFacts, String> {
    let bytes = crate::readfile::read_regular(path, crate::readfile::MAX_FACT_BYTES)
        .map_err(|e| e.to_string())?;
    let what = path.display().to_string();
    let text = crate::xml::decode(&bytes, &what).map_err(|e| e.to_string())?;
    let doc = crate::xml::parse_xml(text, &what).map_err(|e| e.to_string())?;
    from_domain_document(doc.root_element(), &what)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET_DOMAIN: &str = "<domain type='kvm' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>\
        <name>web&amp;1</name><uuid>0b0c2c6e-5f35-4a4b-9a55-3a9f3c0a0b01</uuid>\
        <metadata><x:secret xmlns:x='urn:x'>token-in-metadata</x:secret></metadata>\
        <memory unit='KiB'>65536</memory><vcpu placement='static' current='2'>4</vcpu>\
        <os><type arch='x86_64' machine='pc-q35-7.2'>hvm</type><loader readonly='yes'>/usr/share/OVMF/secret-path.fd</loader></os>\
        <features><acpi/><apic/><ioapic driver='qemu'/></features>\
        <cpu mode='custom' match='exact' check='partial'><model fallback='forbid'>Nehalem</model><feature policy='require' name='x2apic'/></cpu>\
        <devices><emulator>/usr/bin/qemu-system-x86_64</emulator>\
        <disk type='file' device='disk'><source file='/var/lib/libvirt/images/secret-disk.qcow2'/><target dev='vda'/></disk>\
        <graphics type='vnc' passwd='hunter2'/><iommu model='intel'><driver intremap='on' eim='on'/></iommu>\
        <memballoon model='virtio'><address type='pci' bus='0x05'/></memballoon></devices>\
        <seclabel type='dynamic' model='apparmor'><label>libvirt-secret-label</label></seclabel>\
        <qemu:commandline><qemu:arg value='-secret-arg'/></qemu:commandline></domain>";

    #[test]
    fn facts_keep_what_the_judge_needs_and_no_secret_or_path() {
        let dom = Domain::parse(SECRET_DOMAIN, "t").unwrap();
        let r = reduce(&dom);
        for secret in [
            "hunter2",
            "secret-disk",
            "secret-path",
            "token-in-metadata",
            "secret-label",
            "secret-arg",
            "0x05",
        ] {
            assert!(!r.contains(secret), "{secret} leaked into\n{r}");
        }
        let again = Domain::parse(&r, "reduced").unwrap();
        assert_eq!(
            (again.name().as_str(), again.virt_type(), again.machine()),
            ("web&1", "kvm", "pc-q35-7.2")
        );
        assert_eq!(
            again.emulator().as_deref(),
            Some("/usr/bin/qemu-system-x86_64")
        );
        for kept in [
            "<vcpu placement='static' current='2'>4</vcpu>",
            "<ioapic driver='qemu'/>",
            "<feature policy='require' name='x2apic'/>",
            "<driver intremap='on' eim='on'/>",
            "<memballoon model='virtio'/>",
            "<uuid>0b0c2c6e-5f35-4a4b-9a55-3a9f3c0a0b01</uuid>",
        ] {
            assert!(r.contains(kept), "{kept} missing from\n{r}");
        }
        // Reducing the reduced copy changes nothing.
        assert_eq!(reduce(&again), r);
    }

    #[test]
    fn a_running_guests_dumpxml_is_read_as_running() {
        let read = |xml: &str| {
            let doc = crate::xml::parse_xml(xml, "t").unwrap();
            from_domain_document(doc.root_element(), "t").unwrap()
        };
        let body = "<name>g</name><os><type arch='x86_64'>hvm</type></os></domain>";
        let live = read(&format!("<domain type='kvm' id='7'>{body}"));
        assert_eq!(live.state, GuestState::Running);
        let stored = read(&format!("<domain type='kvm'>{body}"));
        assert_eq!(stored.state, GuestState::Shutoff);
        // Not an id libvirt writes for an active domain: not taken as one.
        for id in ["-1", "", "abc", "0"] {
            let other = read(&format!("<domain type='kvm' id='{id}'>{body}"));
            assert_eq!(other.state, GuestState::Shutoff, "id='{id}'");
        }
    }

    #[test]
    fn gather_prefers_the_live_xml_and_says_what_it_cannot_read() {
        let dir = std::env::temp_dir().join(format!("vcp-guest-facts-{}", std::process::id()));
        let (etc, run) = (dir.join("etc"), dir.join("run"));
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::create_dir_all(&run).unwrap();
        let def = |name: &str, model: &str| {
            format!(
                "<domain type='qemu'><name>{name}</name><os><type arch='x86_64' machine='pc-q35-7.2'>hvm</type></os><cpu mode='custom'><model>{model}</model></cpu></domain>"
            )
        };
        std::fs::write(etc.join("a.xml"), def("a", "Nehalem")).unwrap();
        std::fs::write(etc.join("b.xml"), def("b", "Penryn")).unwrap();
        std::fs::write(
            run.join("a.xml"),
            format!(
                "<domstatus state='running' reason='booted' pid='1'><monitor path='/x'/>{}</domstatus>",
                def("a", "Westmere")
            ),
        )
        .unwrap();
        std::fs::write(
            run.join("t.xml"),
            format!(
                "<domstatus state='running'>{}</domstatus>",
                def("t", "qemu64")
            ),
        )
        .unwrap();
        std::fs::write(etc.join("broken.xml"), "<domain").unwrap();
        let (guests, unread) = gather(&etc, &run, "node-1");
        let seen: Vec<(&str, GuestState, bool, bool)> = guests
            .iter()
            .map(|g| {
                (
                    g.name.as_str(),
                    g.state,
                    g.persistent,
                    g.domain.contains("Westmere"),
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("a", GuestState::Running, true, true),
                ("b", GuestState::Shutoff, true, false),
                ("t", GuestState::Running, false, false)
            ]
        );
        assert_eq!(unread.len(), 1, "{unread:?}");
        assert!(unread[0].path.ends_with("broken.xml"));
        // The published document reads back as the same facts.
        let doc = document("node-1", &guests);
        let parsed = crate::xml::parse_xml(&doc, "doc").unwrap();
        let back = read(parsed.root_element(), "doc").unwrap();
        let names: Vec<(&str, GuestState, bool)> = back
            .iter()
            .map(|g| (g.name.as_str(), g.state, g.persistent))
            .collect();
        assert_eq!(
            names,
            [
                ("a", GuestState::Running, true),
                ("b", GuestState::Shutoff, true),
                ("t", GuestState::Running, false)
            ]
        );
        assert!(back.iter().all(|g| g.host.as_deref() == Some("node-1")));
        assert_eq!(back[0].domain, guests[0].domain);
        // The running persistent guest keeps its definition (Nehalem) beside its live CPU.
        assert!(
            back[0]
                .definition
                .as_deref()
                .is_some_and(|d| d.contains("Nehalem"))
        );
        assert!(back[1].definition.is_none() && back[2].definition.is_none());
        std::fs::remove_dir_all(&dir).ok();
    }
}
