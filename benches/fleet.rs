//! The fleet in the library: reading 100 hosts' facts and 1,000 guests' facts (`Fleet::read`:
//! one `Host` per host class, one shape per distinct guest) and judging every pair
//! (`cannot_count`, 100,000 pairs), each timed by criterion. Whole-process figures for 100 ×
//! 1,000 and 1,000 × 10,000 are `benches/process/fleet`'s.
//!
//! The hosts are the four generations' captured facts (`tests/data/generations`, libvirt 7.0,
//! 9.0, 11.3, 12.8) under 25 names each, each with its own generation's cpu_map; the guests are
//! small TCG and KVM domains of 25 shapes (named and versioned models, host-model, maximum,
//! machine types old and new) under 40 names each, 10 on each host.
//!
//! `cargo bench --bench fleet`, or `cargo bench --bench fleet -- --test` (each once).

use criterion::Criterion;
use std::fmt::Write as _;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use virt_cpu_policy::fleet::views::cannot_count;
use virt_cpu_policy::fleet::{CpuMaps, Fleet};
use virt_cpu_policy::policy::Policy;

const GENERATIONS: [&str; 4] = ["bullseye", "bookworm", "trixie", "forky"];

/// One generation's `<hostFacts>` named `name`.
fn host_facts(root: &Path, g: &str, name: &str) -> String {
    let d = root.join("tests/data/generations").join(g);
    let version = std::fs::read_to_string(d.join("version")).expect("version");
    let libvirt = version
        .lines()
        .find_map(|l| l.strip_prefix("libvirt "))
        .expect("libvirt line");
    let mut doc = format!("<hostFacts name='{name}' libvirt='{libvirt}'>\n");
    for f in [
        "capabilities.xml",
        "domcapabilities-x86_64-q35-kvm.xml",
        "domcapabilities-x86_64-q35-qemu.xml",
    ] {
        let text = std::fs::read_to_string(d.join(f)).expect("facts");
        doc.push_str(
            text.split_once("?>")
                .map_or(text.as_str(), |(_, b)| b)
                .trim(),
        );
        doc.push('\n');
    }
    doc.push_str("</hostFacts>\n");
    doc
}

/// The 25 guest shapes.
fn shapes() -> Vec<String> {
    let models = [
        "qemu64",
        "Nehalem",
        "Westmere",
        "Penryn",
        "Opteron_G2",
        "Haswell-noTSX",
        "Haswell-v2",
        "EPYC-Genoa",
        "EPYC-Turin",
        "Skylake-Server",
        "Cascadelake-Server",
    ];
    let machines = ["pc-q35-5.2", "pc-i440fx-2.11", "pc-q35-10.0"];
    let mut v = Vec::new();
    for (i, m) in models.iter().enumerate() {
        for t in ["qemu", "kvm"] {
            v.push(format!(
                "<domain type='{t}'><name>NAME</name><vcpu>2</vcpu><os><type arch='x86_64' machine='{}'>hvm</type></os><cpu mode='custom' match='exact'><model fallback='forbid'>{m}</model></cpu><devices><memballoon model='none'/></devices></domain>",
                machines[i % machines.len()]
            ));
        }
    }
    for mode in ["host-model", "maximum", "host-passthrough"] {
        v.push(format!("<domain type='qemu'><name>NAME</name><vcpu>1</vcpu><os><type arch='x86_64' machine='pc-q35-5.2'>hvm</type></os><cpu mode='{mode}'/></domain>"));
    }
    v
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::temp_dir().join(format!("vcp-bench-fleet-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch");
    let shapes = shapes();
    let mut maps = CpuMaps::default();
    for h in 0..100 {
        let g = GENERATIONS[h % 4];
        let name = format!("h{h}");
        std::fs::write(dir.join(format!("{name}.xml")), host_facts(root, g, &name)).expect("write");
        maps.by_host.push((
            name.clone(),
            root.join("tests/data/generations").join(g).join("cpu_map"),
        ));
        let mut doc = format!("<guestFacts host='{name}'>\n");
        for k in 0..10 {
            let i = h * 10 + k;
            let _ = writeln!(
                doc,
                "<guest name='g{i}' state='shutoff'>{}</guest>",
                shapes[i % shapes.len()].replace("NAME", &format!("g{i}"))
            );
        }
        doc.push_str("</guestFacts>\n");
        std::fs::write(dir.join(format!("{name}.guests.xml")), doc).expect("write");
    }
    let paths: Vec<PathBuf> = vec![dir.clone()];
    let mut c = Criterion::default().configure_from_args();
    c.bench_function("read 100 hosts and 1,000 guests (Fleet::read)", |b| {
        b.iter(|| black_box(Fleet::read(&paths, Policy::builtin(), &maps).expect("fleet")));
    });
    c.bench_function("read and judge 100 x 1,000 pairs", |b| {
        b.iter(|| {
            let fleet = Fleet::read(&paths, Policy::builtin(), &maps).expect("fleet");
            black_box(cannot_count(&fleet))
        });
    });
    let fleet = Fleet::read(&paths, Policy::builtin(), &maps).expect("fleet");
    let _ = cannot_count(&fleet);
    c.bench_function(
        "100 x 1,000 pairs again, every verdict known (lookups only)",
        |b| {
            b.iter(|| black_box(cannot_count(&fleet)));
        },
    );
    c.final_summary();
    let _ = std::fs::remove_dir_all(&dir);
}
