//! The cluster baseline over 100 host facts files, in the library: reading the facts, loading
//! libvirt's cpu_map and the baseline, each timed by criterion, then the three together as
//! `baseline_from_files` does them. Whole-process figures beside `virsh cpu-baseline` are
//! `benches/process/baseline`'s.
//!
//! The hosts are the Intel CPUs of `../shared/corpus/libvirt-cputestdata` that the cpu_map knows,
//! repeated under 100 names in a scratch directory. The cpu_map is `VCP_ORACLE_CPU_MAP` (default
//! libvirt 9.0.0's, `tests/data/generations/bookworm/cpu_map`). Without the corpus or the cpu_map the
//! bench says so and stops; under `CI=true` that is a failure.
//!
//! `cargo bench --bench baseline`, or `cargo bench --bench baseline -- --test` (each once).

use criterion::Criterion;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use virt_cpu_policy::cluster::{ClusterOptions, analyze, baseline_from_files, hosts};
use virt_cpu_policy::libvirt::cpu_map::x86::X86Map;

/// Says on stderr that nothing is measured, and why; under `CI=true` a missing prerequisite
/// fails the run instead.
fn nothing_measured(why: &str) {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "bench baseline: {why} (CI=true: a missing prerequisite is a failure)"
    );
    eprintln!("bench baseline: {why}; nothing measured");
}

/// Writes the 100 hosts into a scratch directory; None (said on stderr) when something is missing.
fn hosts(map: &Path) -> Option<PathBuf> {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus/libvirt-cputestdata");
    let Ok(entries) = std::fs::read_dir(&corpus) else {
        nothing_measured(&format!("{} not found", corpus.display()));
        return None;
    };
    let Ok(x86) = X86Map::load(map) else {
        nothing_measured(&format!("no cpu_map at {}", map.display()));
        return None;
    };
    let mut usable: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with("-host.xml"))
        .filter(|p| {
            hosts::read_hosts(std::slice::from_ref(p)).is_ok_and(|h| {
                let cpu = h[0].cpu.as_ref();
                cpu.and_then(|c| c.vendor.as_deref()) == Some("Intel")
                    && analyze(&h, Some(&x86), &ClusterOptions::default()).is_ok()
            })
        })
        .collect();
    usable.sort();
    if usable.is_empty() {
        nothing_measured(&format!("no corpus CPU readable with {}", map.display()));
        return None;
    }
    let dir = std::env::temp_dir().join(format!("vcp-bench-baseline-{}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    for i in 0..100 {
        std::fs::copy(
            &usable[i % usable.len()],
            dir.join(format!("host-{i:03}.xml")),
        )
        .ok()?;
    }
    Some(dir)
}

fn main() {
    let map = std::env::var_os("VCP_ORACLE_CPU_MAP").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/generations/bookworm/cpu_map"),
        PathBuf::from,
    );
    let Some(dir) = hosts(&map) else { return };
    let paths = vec![dir.clone()];
    let opts = ClusterOptions::default();
    let mut c = Criterion::default().configure_from_args();
    c.bench_function("read 100 facts files", |b| {
        b.iter(|| black_box(hosts::read_hosts(&paths).expect("facts")));
    });
    c.bench_function("load the x86 cpu_map", |b| {
        b.iter(|| black_box(X86Map::load(&map).expect("cpu_map")));
    });
    let x86 = X86Map::load(&map).expect("cpu_map");
    let read = hosts::read_hosts(&paths).expect("facts");
    c.bench_function("analyze 100 hosts (baseline, levels, groups)", |b| {
        b.iter(|| black_box(analyze(&read, Some(&x86), &opts).expect("baseline")));
    });
    c.bench_function("baseline_from_files, 100 files", |b| {
        b.iter(|| black_box(baseline_from_files(&paths, &map, &opts).expect("baseline")));
    });
    c.final_summary();
    let _ = std::fs::remove_dir_all(&dir);
}
