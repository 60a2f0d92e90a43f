//! This host's facts, from libvirt: its `<hostFacts>` ([`crate::libvirt::host_facts`]) in the
//! snapshot the hook reads (`/var/lib/virt-cpu-policy/`) with the domcapabilities its guests use,
//! and, with `--publish DIR` or `[host] publish`, as `DIR/<hostname>.xml` for the cluster; each
//! written atomically and only when it changed ([`crate::writefile`]).

use super::apply::safe_file_name;
use super::cli::Cli;
use super::session::inactive_xml;
use crate::libvirt::version::LibvirtVersion;
use crate::policy::Policy;
use crate::writefile::write_if_changed;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use virt::connect::Connect;

/// The snapshot's `<hostFacts>` file: this host's capabilities, domcapabilities and libvirt
/// version ([`host_facts`]), which the hook reads with the rest of the snapshot.
pub const SNAPSHOT_FACTS: &str = "host-facts.xml";

/// What the snapshot held before `<hostFacts>`: `virsh capabilities` alone. Removed when
/// [`SNAPSHOT_FACTS`] is written, so the hook does not read the same facts twice.
const LEGACY_SNAPSHOT_CAPS: &str = "capabilities.xml";

/// This host's facts from the connection: its name, its `<hostFacts>` document
/// ([`crate::libvirt::host_facts::document`]) and the domcapabilities in it.
#[derive(Debug, Clone)]
pub struct Published {
    /// The host's name: libvirt's (`virConnectGetHostname`), else `gethostname(2)`'s.
    pub name: String,
    /// The `<hostFacts>` document.
    pub xml: String,
    /// The domcapabilities it holds (`virsh domcapabilities` of the host's arch for kvm, or for
    /// qemu when KVM is absent, at the default machine type); None when libvirt gave none.
    pub domcaps: Option<String>,
}

/// This host's `<hostFacts>` from libvirt: `virsh capabilities`, the domcapabilities of the
/// host's own arch (from the capabilities' `<host><cpu><arch>`) for kvm, or qemu when KVM is
/// absent, at the default machine type, and the libvirt version (`virConnectGetLibVersion`).
///
/// # Errors
/// libvirt's error when it gives no capabilities or no version, or capabilities that do not
/// parse.
pub fn host_facts(conn: &Connect) -> Result<Published, String> {
    let caps = conn
        .capabilities()
        .map_err(|e| format!("virConnectGetCapabilities: {e}"))?;
    let version = conn
        .lib_version()
        .map_err(|e| format!("virConnectGetLibVersion: {e}"))?;
    let what = "libvirt's capabilities";
    let doc = crate::xml::parse_xml(&caps, what).map_err(|e| e.to_string())?;
    let caps_read = crate::libvirt::capabilities::Capabilities::read(doc.root_element(), what)
        .map_err(|e| format!("{what}: {e}"))?;
    let arch = caps_read.host_arch().map(str::to_string);
    // KVM's host-model CPU is what guests get; without KVM, TCG's.
    let domcaps = ["kvm", "qemu"].into_iter().find_map(|vt| {
        conn.domain_capabilities(None, arch.as_deref(), None, Some(vt), 0)
            .map_err(|e| tracing::debug!(virt_type = vt, error = %e, "no domcapabilities"))
            .ok()
    });
    let name = conn
        .hostname()
        .ok()
        .filter(|n| !n.trim().is_empty())
        .or_else(gethostname)
        .unwrap_or_else(|| "localhost".into());
    let version = LibvirtVersion::from_number(u64::from(version));
    let xml = crate::libvirt::host_facts::document(&name, version, &caps, domcaps.as_deref());
    Ok(Published { name, xml, domcaps })
}

/// The kernel's host name (`uname(2)`'s node name, which `gethostname(2)` returns), when it has
/// one.
fn gethostname() -> Option<String> {
    let uname = rustix::system::uname();
    let name = uname.nodename().to_string_lossy().trim().to_string();
    (!name.is_empty()).then_some(name)
}

/// `DIR/<hostname>.xml` for this host's published facts.
#[must_use]
pub fn published_path(dir: &Path, host_name: &str) -> PathBuf {
    dir.join(format!("{}.xml", safe_file_name(host_name)))
}

/// Write `facts` as the snapshot's [`SNAPSHOT_FACTS`] (removing the older `capabilities.xml`)
/// and, with `publish`, as `publish/<hostname>.xml` (only that one when `publish` is the
/// snapshot directory); each only when it changed. Returns the snapshot's file when it holds the
/// facts now. Failures are logged.
pub(super) fn store_host_facts(
    facts: &Published,
    snapshot: &Path,
    publish: Option<&Path>,
) -> Option<PathBuf> {
    let stored = |path: &Path, what: &str| match write_if_changed(path, facts.xml.as_bytes()) {
        Ok(true) => {
            tracing::info!(path = %path.display(), host = %facts.name, "{what}: this host's facts written");
            true
        }
        Ok(false) => true,
        Err(e) => {
            tracing::error!(path = %path.display(), error = %e, "{what}: cannot write this host's facts");
            false
        }
    };
    // Published into the snapshot directory itself: the published file is the snapshot's (the
    // hook would read the same facts twice).
    let same_dir = publish.is_some_and(|p| {
        let canon = |d: &Path| std::fs::canonicalize(d).ok();
        canon(p).is_some() && canon(p) == canon(snapshot)
    });
    let snap = if same_dir {
        let _ = std::fs::remove_file(snapshot.join(SNAPSHOT_FACTS));
        published_path(snapshot, &facts.name)
    } else {
        snapshot.join(SNAPSHOT_FACTS)
    };
    let in_snapshot = stored(&snap, "snapshot");
    if in_snapshot {
        let legacy = snapshot.join(LEGACY_SNAPSHOT_CAPS);
        if legacy.is_file() && std::fs::remove_file(&legacy).is_ok() {
            tracing::info!(path = %legacy.display(), "removed: {SNAPSHOT_FACTS} holds the capabilities now");
        }
    }
    if let Some(dir) = publish.filter(|_| !same_dir) {
        stored(&published_path(dir, &facts.name), "publish");
    }
    in_snapshot.then_some(snap)
}

/// Write the host-fact snapshot: this host's `<hostFacts>` ([`SNAPSHOT_FACTS`]) and one
/// `domcapabilities-ARCH-MACHINE-TYPE.xml` per (emulator, arch, machine, virt type) the
/// persistent guests use, unless it is the one `<hostFacts>` already holds; with `publish`,
/// the facts are published too. Returns the snapshot's files.
pub fn write_snapshot(conn: &Connect, dir: &Path, publish: Option<&Path>) -> Vec<PathBuf> {
    let mut written = Vec::new();
    let facts = match host_facts(conn) {
        Ok(f) => Some(f),
        Err(e) => {
            tracing::error!(error = %e, "no host facts for the snapshot");
            None
        }
    };
    if let Some(f) = &facts {
        written.extend(store_host_facts(f, dir, publish));
    }
    let mut seen = BTreeSet::new();
    for d in conn.list_all_domains(0).unwrap_or_default() {
        let Ok(xml) = inactive_xml(&d) else {
            continue;
        };
        let Ok(dom) = crate::domain::Domain::parse(&xml, "definition") else {
            continue;
        };
        if !dom.in_scope() {
            continue;
        }
        let key = (
            dom.emulator(),
            dom.arch().to_string(),
            dom.machine().to_string(),
            dom.virt_type().to_string(),
        );
        if !seen.insert(key.clone()) {
            continue;
        }
        let (emu, arch, machine, vt) = key;
        match conn.domain_capabilities(
            emu.as_deref(),
            Some(&arch).filter(|a| !a.is_empty()).map(String::as_str),
            Some(&machine).filter(|m| !m.is_empty()).map(String::as_str),
            Some(vt.as_str()),
            0,
        ) {
            Ok(dc) => {
                let p = dir.join(format!(
                    "domcapabilities-{}-{}-{}.xml",
                    safe_file_name(&arch),
                    safe_file_name(&machine),
                    safe_file_name(&vt)
                ));
                if facts.as_ref().and_then(|f| f.domcaps.as_deref()) == Some(dc.as_str()) {
                    // The hook would read the same document twice.
                    let _ = std::fs::remove_file(&p);
                    continue;
                }
                match write_if_changed(&p, dc.as_bytes()) {
                    Ok(_) => written.push(p),
                    Err(e) => {
                        tracing::error!(path = %p.display(), error = %e, "cannot write the snapshot");
                    }
                }
            }
            Err(e) => {
                tracing::warn!(arch, machine, virt_type = vt, error = %e, "virConnectGetDomainCapabilities failed");
            }
        }
    }
    written
}

/// Where this host's facts are published: `--publish`, else the policy's `[host] publish`.
pub(super) fn publish_dir<'a>(cli: &'a Cli, policy: &'a Policy) -> Option<&'a Path> {
    cli.publish.as_deref().or(policy.host.publish.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_become_safe_file_names() {
        for (name, file) in [
            ("kvm-07.example.org", "kvm-07.example.org.xml"),
            ("../../etc/passwd", "_._.._etc_passwd.xml"),
            (".hidden", "_hidden.xml"),
            ("", "_.xml"),
            ("a b/c\u{e9}", "a_b_c_.xml"),
        ] {
            assert_eq!(
                published_path(Path::new("/srv/facts"), name),
                Path::new("/srv/facts").join(file),
                "{name:?}"
            );
        }
    }

    #[test]
    fn host_facts_are_stored_and_published_only_when_they_change() {
        use std::os::unix::fs::MetadataExt;
        let dir = std::env::temp_dir().join(format!("vcp-dmn-facts-{}", std::process::id()));
        let (snap, publish) = (dir.join("snap"), dir.join("shared"));
        std::fs::create_dir_all(&snap).unwrap();
        std::fs::write(snap.join(LEGACY_SNAPSHOT_CAPS), "<capabilities/>").unwrap();
        let caps = "<capabilities><host><cpu><arch>x86_64</arch></cpu></host></capabilities>";
        let doc = |v: &str| Published {
            name: "node 1".into(),
            xml: crate::libvirt::host_facts::document("node 1", v.parse().unwrap(), caps, None),
            domcaps: None,
        };
        let stored = store_host_facts(&doc("9.0.0"), &snap, Some(&publish));
        assert_eq!(stored, Some(snap.join(SNAPSHOT_FACTS)));
        assert!(
            !snap.join(LEGACY_SNAPSHOT_CAPS).exists(),
            "the old capabilities.xml goes"
        );
        let published = publish.join("node_1.xml");
        let text = std::fs::read_to_string(&published).unwrap();
        assert!(
            text.starts_with("<hostFacts name='node 1' libvirt='9.0.0'>"),
            "{text}"
        );
        assert_eq!(
            std::fs::read_to_string(snap.join(SNAPSHOT_FACTS)).unwrap(),
            text
        );
        // The same facts again: nothing written (same inode: no rename happened).
        let ino = std::fs::metadata(&published).unwrap().ino();
        store_host_facts(&doc("9.0.0"), &snap, Some(&publish));
        assert_eq!(std::fs::metadata(&published).unwrap().ino(), ino);
        // New facts: replaced by a rename, no temporary file left behind.
        store_host_facts(&doc("11.3.0"), &snap, Some(&publish));
        assert_ne!(std::fs::metadata(&published).unwrap().ino(), ino);
        assert!(
            std::fs::read_to_string(&published)
                .unwrap()
                .contains("libvirt='11.3.0'")
        );
        let names: Vec<String> = std::fs::read_dir(&publish)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["node_1.xml".to_string()]);
        // Published into the snapshot directory: one file there, the published one.
        let stored = store_host_facts(&doc("11.3.0"), &snap, Some(&snap));
        assert_eq!(stored, Some(snap.join("node_1.xml")));
        assert!(!snap.join(SNAPSHOT_FACTS).exists());
        std::fs::remove_dir_all(&dir).ok();
    }
}
