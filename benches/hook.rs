//! What counting a decision costs the qemu hook at `prepare begin`: the hook's decision
//! ([`hook::decide`]: the policy read, the host facts of the Debian 12 root from the snapshot
//! directory, libvirt 9.0's cpu_map, the checks and the rewrite of CloudStack's guest,
//! `examples/cloudstack-default-cpu.xml` under TCG, as the policy's rewrite leaves it: it
//! conforms; under KVM the recorded host's KVM gives no x86-64-v2, `cpu-level`),
//! the same followed by counting it ([`hook_decisions::count`]: the lock, the read, the write in
//! place, in a state directory on the same file system as the temporary directory), and the
//! count alone, side by side in one run, beside the writes it was chosen over (a replace by
//! rename, unsynced and synced). After criterion, an interleaved run of
//! both prints their medians and the ratio.
//!
//! `cargo bench --features daemon --bench hook` (full), `-- --quick` (short), `cargo test
//! --features daemon --bench hook` (each once, as a test).

// Nanoseconds become f64 for ratios printed to two places.
#![allow(clippy::cast_precision_loss)]

use criterion::Criterion;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use virt_cpu_policy::hook::{self, HookOptions, Phase};
use virt_cpu_policy::hook_decisions;
use virt_cpu_policy::host::{Host, HostOptions};
use virt_cpu_policy::log::Decision;
use virt_cpu_policy::policy::Policy;
use virt_cpu_policy::rewrite::rewrite;

/// A scratch directory with the policy and a snapshot directory holding the Debian 12 root's
/// facts; the hook's options for it.
fn setup(root: &Path) -> HookOptions {
    let dir = std::env::temp_dir().join(format!("vcp-bench-hook-{}", std::process::id()));
    let snap = dir.join("snap");
    std::fs::create_dir_all(&snap).expect("scratch directory");
    std::fs::copy(
        root.join("tests/data/facts/bookworm.xml"),
        snap.join("bookworm.xml"),
    )
    .expect("the Debian 12 root's facts");
    let policy = dir.join("policy.toml");
    std::fs::write(
        &policy,
        format!(
            "version = 1\n\n[hook]\non_violation = \"deny\"\n\n[host]\ncpu_map = \"{}\"\n\n[[rule]]\nname = \"x86-64-v2 baseline\"\nmatch = {{ arch = \"x86_64\" }}\ncpu.min_level = \"x86-64-v2\"\n",
            root.join("tests/data/generations/bookworm/cpu_map").display()
        ),
    )
    .expect("policy");
    HookOptions {
        policy: Some(policy),
        snapshot_dir: Some(snap),
        qemu_cache: Some(PathBuf::new()),
        ..HookOptions::default()
    }
}

/// CloudStack's guest under TCG (`type='qemu'`: QEMU 7.2 emulates x86-64-v2, which the recorded
/// host's KVM does not give) as the policy's rewrite leaves it, with the host facts the hook
/// finds.
fn conforming_guest(root: &Path, opts: &HookOptions) -> String {
    let policy = Policy::load(opts.policy.as_deref()).expect("policy");
    let caps = virt_cpu_policy::readfile::xml_files(opts.snapshot_dir.as_deref().expect("snap"));
    let host = Host::discover(&HostOptions {
        qemu_cache: Some(PathBuf::new()),
        skip_machine_support: true,
        ..HostOptions::from_policy(&policy, &caps, None, None)
    })
    .expect("host facts");
    let xml = std::fs::read_to_string(root.join("examples/cloudstack-default-cpu.xml"))
        .expect("the CloudStack example")
        .replacen("<domain type='kvm'>", "<domain type='qemu'>", 1);
    let o = rewrite(&xml, "bench", &policy, &host).expect("rewrite");
    assert!(o.changed && !o.has_errors(), "the policy rewrites it");
    o.output
}

fn decide(opts: &HookOptions, guest: &str) -> Decision {
    let decided = hook::decide("i-2-14-VM", Phase::Prepare, guest.as_bytes(), opts);
    decided.kind.expect("a decision")
}

fn count(state: &Path, kind: Decision) {
    hook_decisions::count(state, kind).expect("counted");
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let opts = setup(root);
    let guest = conforming_guest(root, &opts);
    let state = opts.snapshot_dir.clone().expect("snapshot directory");
    assert_eq!(
        decide(&opts, &guest),
        Decision::HookAllowed,
        "the guest conforms"
    );
    let mut crit = Criterion::default().configure_from_args();
    let mut group = crit.benchmark_group("hook prepare");
    group.bench_function("decide", |b| b.iter(|| black_box(decide(&opts, &guest))));
    group.bench_function("decide + count", |b| {
        b.iter(|| count(&state, black_box(decide(&opts, &guest))));
    });
    group.bench_function("count alone", |b| {
        b.iter(|| count(&state, black_box(Decision::HookAllowed)));
    });
    // What the count's write would cost as a replace by rename (write_atomic_unsynced, the
    // counts' write before) and synced (write_atomic), for the choice of overwrite_unsynced.
    let renamed = state.join("hook-decisions.renamed");
    group.bench_function("a replace by rename of the counts", |b| {
        let text = hook_decisions::read(&state).expect("counts").render();
        b.iter(|| virt_cpu_policy::writefile::write_atomic_unsynced(&renamed, text.as_bytes()));
    });
    let in_place = state.join("hook-decisions.in-place");
    group.bench_function("a write in place of the counts", |b| {
        let text = hook_decisions::read(&state).expect("counts").render();
        b.iter(|| virt_cpu_policy::writefile::overwrite_unsynced(&in_place, text.as_bytes()));
    });
    let synced = state.join("hook-decisions.synced");
    group.bench_function("a synced write of the counts", |b| {
        let text = hook_decisions::read(&state).expect("counts").render();
        b.iter(|| virt_cpu_policy::writefile::write_atomic(&synced, text.as_bytes()));
    });
    group.finish();
    crit.final_summary();
    // Interleaved, so both see the same machine: the ratio of the medians.
    // `cargo bench` passes --bench; `cargo test --bench` runs each benchmark once.
    let rounds = if std::env::args().any(|a| a == "--bench") {
        300
    } else {
        3
    };
    let (mut plain, mut counted, mut alone) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let start = Instant::now();
        black_box(decide(&opts, &guest));
        plain.push(start.elapsed());
        let start = Instant::now();
        let kind = black_box(decide(&opts, &guest));
        let counting = Instant::now();
        count(&state, kind);
        alone.push(counting.elapsed());
        counted.push(start.elapsed());
    }
    let (plain, counted, alone) = (median(plain), median(counted), median(alone));
    println!(
        "hook prepare, {rounds} interleaved rounds (medians): decide {plain:?}, decide + count {counted:?} (of which the count {alone:?}); ratio {:.3}",
        counted.as_nanos() as f64 / plain.as_nanos() as f64
    );
    let _ = std::fs::remove_dir_all(state.parent().expect("scratch directory"));
}
