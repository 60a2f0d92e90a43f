//! The fleet in the library: reading 100 hosts' facts and 1,000 guests' facts (`Fleet::read`:
//! one `Host` per host class, one shape per distinct guest) and judging every pair
//! (`cannot_count`, 100,000 pairs), each timed by criterion; then a fleet of 200 hosts and
//! 2,000 guests a quarter of which are running host-passthrough guests (each pair of those asks
//! whether the destination is in the guest's migration group, which depends on its source
//! host), read and answered as `fleet --format prometheus` and `fleet` (text) answer it, and
//! answered again with every verdict known (the work per pair alone).
//! Whole-process figures (1,000 × 10,000 and 2×, 4×, 10× of it) are `benches/process/fleet`'s.
//!
//! The hosts are the four generations' captured facts (`tests/data/generations`, libvirt 7.0,
//! 9.0, 11.3, 12.8) round robin under distinct names and capabilities `<uuid>`s, each with its own generation's cpu_map;
//! the guests are small TCG and KVM domains of 25 shapes (named and versioned models,
//! host-model, maximum, machine types old and new), 10 on each host. In the 200 × 2,000 fleet
//! every guest has one of 8 vCPU counts (200 shapes), every fourth is a running
//! host-passthrough KVM guest and every eighth another running one (judged by live migration),
//! 10 more guests name a host whose facts are not given and 10 are status files of no known
//! host.
//!
//! `cargo bench --bench fleet`, or `cargo bench --bench fleet -- --test` (each once).
//! `VCP_BENCH_FLEET_OUT=DIR cargo bench --bench fleet` writes the 200 × 2,000 fleet into DIR
//! (and its `--cpu-map` arguments, one a line, into DIR/cpu-maps) and measures nothing: the
//! whole-process run of `virt-cpu-policy fleet` on it.

use criterion::Criterion;
use std::fmt::Write as _;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use virt_cpu_policy::fleet::format::{matrix_text_to, prometheus, summary_text};
use virt_cpu_policy::fleet::views::{cannot_count, tally, tally_by_pairs};
use virt_cpu_policy::fleet::{CpuMaps, Fleet};
use virt_cpu_policy::policy::Policy;

const GENERATIONS: [&str; 4] = ["bullseye", "bookworm", "trixie", "forky"];

/// One generation's `<hostFacts>` named `name`, with host number `n`'s own capabilities
/// `<uuid>`, as every real host has (hosts alike in everything the judge reads are one class
/// whatever their `<uuid>`).
fn host_facts(root: &Path, g: &str, name: &str, n: usize) -> String {
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
        let mut text = std::fs::read_to_string(d.join(f)).expect("facts");
        if let Some(start) = text.find("<uuid>") {
            let end = start + text[start..].find("</uuid>").expect("</uuid>");
            text.replace_range(start + 6..end, &format!("00000000-0000-4000-8000-{n:012x}"));
        }
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

/// The host-passthrough CPU of a running guest's live XML (libvirt 9.0's words).
const PASSTHROUGH: &str = "<cpu mode='host-passthrough' check='none' migratable='on'/>";

/// Writes a fleet of `hosts` hosts and `per_host` guests on each into `dir`: `hN.xml` (host
/// facts) and `hN.guests.xml`; with `mixed`, the guests of the 200 × 2,000 fleet (see the module
/// docs) and the guests of no known host. Returns each host's cpu_map, by name.
fn write_fleet(
    root: &Path,
    dir: &Path,
    hosts: usize,
    per_host: usize,
    mixed: bool,
) -> Vec<(String, PathBuf)> {
    std::fs::create_dir_all(dir).expect("scratch");
    let shapes = shapes();
    let mut maps = Vec::new();
    let guest = |i: usize| {
        let name = format!("g{i}");
        let shape = shapes[i % shapes.len()].replace("NAME", &name);
        if !mixed {
            return ("shutoff", shape);
        }
        let vcpus = format!("<vcpu>{}</vcpu>", 1 + i % 8);
        let shape =
            shape
                .replacen("<vcpu>2</vcpu>", &vcpus, 1)
                .replacen("<vcpu>1</vcpu>", &vcpus, 1);
        if i % 4 == 0 {
            let pt = format!(
                "<domain type='kvm'><name>{name}</name>{vcpus}<os><type arch='x86_64' machine='pc-q35-{}'>hvm</type></os>{PASSTHROUGH}</domain>",
                ["5.2", "7.2"][i / 4 % 2]
            );
            ("running", pt)
        } else if i % 8 == 1 {
            ("running", shape)
        } else {
            ("shutoff", shape)
        }
    };
    for h in 0..hosts {
        let g = GENERATIONS[h % 4];
        let name = format!("h{h}");
        std::fs::write(
            dir.join(format!("{name}.xml")),
            host_facts(root, g, &name, h),
        )
        .expect("write");
        maps.push((
            name.clone(),
            root.join("tests/data/generations").join(g).join("cpu_map"),
        ));
        let mut doc = format!("<guestFacts host='{name}'>\n");
        for k in 0..per_host {
            let i = h * per_host + k;
            let (state, domain) = guest(i);
            let _ = writeln!(doc, "<guest name='g{i}' state='{state}'>{domain}</guest>");
        }
        doc.push_str("</guestFacts>\n");
        std::fs::write(dir.join(format!("{name}.guests.xml")), doc).expect("write");
    }
    if mixed {
        // Running host-passthrough guests whose source host has no facts here, and status files
        // of running guests of no known host: each pair says so.
        let mut doc = "<guestFacts host='gone'>\n".to_string();
        for i in 0..10 {
            let (_, domain) = guest(4 * i);
            let domain = domain.replacen(&format!(">g{}<", 4 * i), &format!(">gone-g{i}<"), 1);
            let _ = writeln!(
                doc,
                "<guest name='gone-g{i}' state='running'>{domain}</guest>"
            );
            let lone = domain.replacen("<name>gone-g", "<name>lone-g", 1);
            std::fs::write(
                dir.join(format!("lone-{i}.xml")),
                format!("<domstatus state='running' pid='1'>{lone}</domstatus>\n"),
            )
            .expect("write");
        }
        doc.push_str("</guestFacts>\n");
        std::fs::write(dir.join("gone.guests.xml"), doc).expect("write");
    }
    maps
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    if let Some(out) = std::env::var_os("VCP_BENCH_FLEET_OUT") {
        let out = PathBuf::from(out);
        let maps = write_fleet(root, &out, 200, 10, true);
        let mut args = String::new();
        for (name, dir) in &maps {
            let _ = writeln!(args, "--cpu-map\n{name}={}", dir.display());
        }
        std::fs::write(out.join("cpu-maps"), args).expect("write");
        eprintln!("bench fleet: the 200 x 2,000 fleet is in {}", out.display());
        return;
    }
    let scratch = std::env::temp_dir().join(format!("vcp-bench-fleet-{}", std::process::id()));
    let dir = scratch.join("small");
    let mut maps = CpuMaps::default();
    maps.by_host = write_fleet(root, &dir, 100, 10, false);
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
    let dir = scratch.join("mixed");
    let mut maps = CpuMaps::default();
    maps.by_host = write_fleet(root, &dir, 200, 10, true);
    let paths: Vec<PathBuf> = vec![dir.clone()];
    c.bench_function(
        "200 x 2,000 with host-passthrough guests: read and the prometheus view",
        |b| {
            b.iter(|| {
                let fleet = Fleet::read(&paths, Policy::builtin(), &maps).expect("fleet");
                black_box(prometheus(&fleet, &tally(&fleet)))
            });
        },
    );
    c.bench_function(
        "200 x 2,000 with host-passthrough guests: read and the text summary",
        |b| {
            b.iter(|| {
                let fleet = Fleet::read(&paths, Policy::builtin(), &maps).expect("fleet");
                let t = tally(&fleet);
                summary_text(&fleet, &t, &mut std::io::sink()).expect("sink");
                black_box(t)
            });
        },
    );
    // The pairs' own work: the same views with every verdict known.
    let fleet = Fleet::read(&paths, Policy::builtin(), &maps).expect("fleet");
    let _ = cannot_count(&fleet);
    // The counts by kind of host against the same counted pair by pair, side by side.
    let t = tally(&fleet);
    assert_eq!(
        (t.cannot, t.untakeable.clone(), t.undrainable.clone()),
        tally_by_pairs(&fleet),
        "the counts by kind differ from the counts by pair"
    );
    c.bench_function(
        "200 x 2,000 again, every verdict known: the counts by kind of host",
        |b| b.iter(|| black_box(tally(&fleet))),
    );
    c.bench_function(
        "200 x 2,000 again, every verdict known: the counts pair by pair",
        |b| b.iter(|| black_box(tally_by_pairs(&fleet))),
    );
    c.bench_function(
        "200 x 2,000 again, every verdict known: the text of every pair (--pairs)",
        |b| {
            b.iter(|| {
                let t = tally(&fleet);
                matrix_text_to(&fleet, &t, &mut std::io::sink()).expect("sink");
            });
        },
    );
    c.final_summary();
    let _ = std::fs::remove_dir_all(&scratch);
}
