//! The built-in machine-type table checked against every capabilities and QEMU capability cache
//! file in `../shared/corpus`: wherever the table has an answer for a machine type a real host
//! listed, it must be the `maxCpus` that host's QEMU gave.

use crate::harness::shared_corpus;
use virt_cpu_policy::host::{Host, HostOptions};
use virt_cpu_policy::vcpu_limits::builtin_limit;

#[test]
#[cfg_attr(
    not(vcp_shared_corpus),
    ignore = "needs ../shared/corpus beside the checkout"
)]
fn builtin_table_matches_real_capabilities() {
    let root = shared_corpus();
    let mut files = Vec::new();
    for dir in ["host-libvirt-9.0-qemu-7.2", "virt-manager/capabilities"] {
        for e in std::fs::read_dir(root.join(dir)).unwrap().flatten() {
            let p = e.path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if name.ends_with(".xml")
                && !name.contains("domcaps")
                && !name.starts_with("domcapabilities")
            {
                files.push(p);
            }
        }
    }
    files.sort();
    let (mut checked, mut agreed, mut uncovered) = (0, 0, 0);
    let mut wrong = Vec::new();
    for f in &files {
        let mut host = Host::discover(&HostOptions {
            qemu_cache: Some(std::path::PathBuf::new()),
            ..HostOptions::default()
        })
        .unwrap();
        if host.read_caps_file(f).is_err() {
            continue;
        }
        for m in host.machines.iter().filter(|m| m.canonical.is_none()) {
            let Some(real) = m.max_cpus else { continue };
            checked += 1;
            match builtin_limit(&m.arch, &m.name) {
                Some(b) if b.max_cpus == real => agreed += 1,
                Some(b) => wrong.push(format!(
                    "{} {} {}: built-in {} ({}), real {real}",
                    f.display(),
                    m.arch,
                    m.name,
                    b.max_cpus,
                    b.rule
                )),
                None => uncovered += 1,
            }
        }
    }
    eprintln!(
        "machines: {} files, {checked} machine types with maxCpus: {agreed} match the built-in table, {} differ, {uncovered} not covered by it (board types, microvm, isapc...)",
        files.len(),
        wrong.len()
    );
    assert!(agreed > 100, "too few machine types compared: {agreed}");
    assert!(
        wrong.is_empty(),
        "built-in table differs:\n{}",
        wrong.join("\n")
    );
}
