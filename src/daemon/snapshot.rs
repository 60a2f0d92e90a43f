//! This host's facts, from libvirt: its `<hostFacts>` ([`crate::libvirt::host_facts`]) in the
//! snapshot the hook reads (`/var/lib/virt-cpu-policy/`) with the domcapabilities its guests use,
//! and, with `--publish DIR` or `[host] publish`, as `DIR/<hostname>.xml` for the cluster; each
//! written atomically and only when it changed ([`crate::writefile`]).

use super::cli::Cli;
use super::session::inactive_xml;
use crate::libvirt::version::LibvirtVersion;
use crate::policy::Policy;
use crate::writefile::safe_file_name;
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
    /// The domcapabilities it holds (`virsh domcapabilities` of the host's arch at the default
    /// machine type, for kvm then qemu, each that libvirt gives): KVM's CPU is what KVM guests
    /// get, TCG's what `type='qemu'` guests get, and each QEMU's TCG offers a different one.
    pub domcaps: Vec<String>,
}

/// This host's `<hostFacts>` from libvirt: `virsh capabilities`, the domcapabilities of the
/// host's own arch (from the capabilities' `<host><cpu><arch>`) for kvm and for qemu (those
/// libvirt gives) at the default machine type, the libvirt version (`virConnectGetLibVersion`)
/// and the QEMU one (`virConnectGetVersion`).
///
/// # Errors
/// libvirt's error when it gives no capabilities or no version, or capabilities that do not
/// parse.
pub fn host_facts(conn: &Connect, name: Option<&str>) -> Result<Published, String> {
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
    let domcaps: Vec<String> = ["kvm", "qemu"]
        .into_iter()
        .filter_map(|vt| {
            conn.domain_capabilities(None, arch.as_deref(), None, Some(vt), 0)
                .map_err(|e| tracing::debug!(virt_type = vt, error = %e, "no domcapabilities"))
                .ok()
        })
        .collect();
    let name = name
        .map(str::to_string)
        .or_else(|| conn.hostname().ok())
        .filter(|n| !n.trim().is_empty())
        .or_else(crate::fleet::guest::this_host_name)
        .unwrap_or_else(|| "localhost".into());
    let version = LibvirtVersion::from_number(u64::from(version));
    // The QEMU release libvirt drives (virConnectGetVersion, the hypervisor's version): a fact
    // of the host, for the hazards of a pair of releases (crate::hazards); only from libvirt's
    // QEMU driver (virConnectGetType "QEMU": the test driver answers its own 0.0.2), none when
    // libvirt does not say.
    let qemu = conn
        .driver_type()
        .ok()
        .filter(|t| t.eq_ignore_ascii_case("QEMU"))
        .and_then(|_| conn.hyp_version().ok())
        .filter(|v| *v > 0)
        .map(|v| crate::libvirt::version::QemuVersion::from_number(u64::from(v)));
    let refs: Vec<&str> = domcaps.iter().map(String::as_str).collect();
    let xml = crate::libvirt::host_facts::document(&name, version, qemu, &caps, &refs);
    Ok(Published { name, xml, domcaps })
}

/// `DIR/<hostname>.xml` for this host's published facts.
#[must_use]
pub fn published_path(dir: &Path, host_name: &str) -> PathBuf {
    dir.join(format!("{}.xml", safe_file_name(host_name)))
}

/// Where and what to publish: the directory, and where the guests' files are.
#[derive(Debug, Clone, Copy)]
pub struct PublishTo<'a> {
    /// `--publish` or `[host] publish`.
    pub dir: &'a Path,
    /// libvirt's stored definitions (`/etc/libvirt/qemu`).
    pub config_dir: &'a Path,
    /// libvirt's status files (`/run/libvirt/qemu`).
    pub state_dir: &'a Path,
}

/// Publish this host's guests' facts ([`crate::fleet::guest`]) as `DIR/<hostname>.guests.xml`,
/// when they changed; what cannot be read is logged. Returns whether the file holds them.
pub fn publish_guests(host: &str, to: PublishTo<'_>) -> bool {
    let (guests, unread) = crate::fleet::guest::gather(to.config_dir, to.state_dir, host);
    for u in &unread {
        tracing::warn!(path = %u.path.display(), error = %u.message, "guest facts: not read");
    }
    let path = to.dir.join(crate::fleet::guest::published_name(host));
    let doc = crate::fleet::guest::document(host, &guests);
    match write_if_changed(&path, doc.as_bytes()) {
        Ok(true) => {
            tracing::info!(path = %path.display(), guests = guests.len(), "publish: this host's guest facts written");
            true
        }
        Ok(false) => true,
        Err(e) => {
            tracing::error!(path = %path.display(), error = %e, "publish: cannot write this host's guest facts");
            false
        }
    }
}

/// Write `facts` as the snapshot's [`SNAPSHOT_FACTS`] (removing the older `capabilities.xml`)
/// and, with `publish`, as `publish/<hostname>.xml` (only that one when `publish` is the
/// snapshot directory) with the guests' facts beside ([`publish_guests`]); each only when it
/// changed. Returns the snapshot's file when it holds the facts now. Failures are logged.
pub(super) fn store_host_facts(
    facts: &Published,
    snapshot: &Path,
    publish: Option<PublishTo<'_>>,
) -> Option<PathBuf> {
    if let Some(to) = publish {
        publish_guests(&facts.name, to);
    }
    let publish = publish.map(|p| p.dir);
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
pub fn write_snapshot(
    conn: &Connect,
    dir: &Path,
    publish: Option<PublishTo<'_>>,
    name: Option<&str>,
) -> Vec<PathBuf> {
    let mut written = Vec::new();
    let facts = match host_facts(conn, name) {
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
                if facts.as_ref().is_some_and(|f| f.domcaps.contains(&dc)) {
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
pub(super) fn publish_dir<'a>(cli: &'a Cli, policy: &'a Policy) -> Option<PublishTo<'a>> {
    let dir = cli.publish.as_deref().or(policy.host.publish.as_deref())?;
    Some(PublishTo {
        dir,
        config_dir: &cli.guest_config_dir,
        state_dir: &cli.guest_state_dir,
    })
}

/// `virt-cpu-policyd publish`: this host's facts and its guests' facts into `--publish` once.
/// Exit 0 written; 2 no `--publish`, no connection, no facts, or a file not written.
pub(super) fn cmd_publish(cli: &Cli) -> i32 {
    let fail = |m: String| {
        crate::stdio::message_line(&format!("virt-cpu-policyd: {m}"));
        2
    };
    let Some(dir) = cli.publish.as_deref() else {
        return fail("publish needs --publish DIR".into());
    };
    let conn = match super::session::connect(&cli.uri) {
        Ok(c) => c,
        Err(e) => return fail(format!("cannot connect to {}: {e}", cli.uri)),
    };
    let facts = match host_facts(&conn, cli.host_name.as_deref()) {
        Ok(f) => f,
        Err(e) => return fail(e),
    };
    let host_file = published_path(dir, &facts.name);
    if let Err(e) = write_if_changed(&host_file, facts.xml.as_bytes()) {
        return fail(format!("cannot write {}: {e}", host_file.display()));
    }
    let to = PublishTo {
        dir,
        config_dir: &cli.guest_config_dir,
        state_dir: &cli.guest_state_dir,
    };
    if !publish_guests(&facts.name, to) {
        return fail(format!(
            "cannot write {}",
            dir.join(crate::fleet::guest::published_name(&facts.name))
                .display()
        ));
    }
    0
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
        let (etc, run) = (dir.join("etc"), dir.join("run"));
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::create_dir_all(&run).unwrap();
        std::fs::write(
            etc.join("g.xml"),
            "<domain type='kvm'><name>g</name><devices><graphics type='vnc' passwd='s3cret'/></devices></domain>",
        )
        .unwrap();
        let to = |d: &std::path::Path| -> PublishTo<'static> {
            PublishTo {
                dir: Box::leak(d.to_path_buf().into_boxed_path()),
                config_dir: Box::leak(etc.clone().into_boxed_path()),
                state_dir: Box::leak(run.clone().into_boxed_path()),
            }
        };
        std::fs::write(snap.join(LEGACY_SNAPSHOT_CAPS), "<capabilities/>").unwrap();
        let caps = "<capabilities><host><cpu><arch>x86_64</arch></cpu></host></capabilities>";
        let doc = |v: &str| Published {
            name: "node 1".into(),
            xml: crate::libvirt::host_facts::document(
                "node 1",
                v.parse().unwrap(),
                None,
                caps,
                &[],
            ),
            domcaps: Vec::new(),
        };
        let stored = store_host_facts(&doc("9.0.0"), &snap, Some(to(&publish)));
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
        store_host_facts(&doc("9.0.0"), &snap, Some(to(&publish)));
        assert_eq!(std::fs::metadata(&published).unwrap().ino(), ino);
        // New facts: replaced by a rename, no temporary file left behind.
        store_host_facts(&doc("11.3.0"), &snap, Some(to(&publish)));
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
        let mut names = names;
        names.sort();
        assert_eq!(
            names,
            vec!["node_1.guests.xml".to_string(), "node_1.xml".to_string()]
        );
        let guests = std::fs::read_to_string(publish.join("node_1.guests.xml")).unwrap();
        assert!(
            guests.starts_with(
                "<guestFacts host='node 1'>\n<guest name='g' state='shutoff' persistent='yes'>"
            ),
            "{guests}"
        );
        assert!(!guests.contains("s3cret"), "{guests}");
        // Published into the snapshot directory: one file there, the published one.
        let stored = store_host_facts(&doc("11.3.0"), &snap, Some(to(&snap)));
        assert_eq!(stored, Some(snap.join("node_1.xml")));
        assert!(!snap.join(SNAPSHOT_FACTS).exists());
        std::fs::remove_dir_all(&dir).ok();
    }
}
