//! Parse + rewrite of an 8 KB, a 100 KB and a 1 MB domain: a realistic x86_64 kvm
//! domain (CloudStack's bare `<cpu>`, so the default policy writes the x86-64-v2 features out)
//! padded with `<disk>` and `<interface>` devices. Criterion reports time and throughput per size;
//! after it, a scaling check prints ns/byte per size and the 1 MB / 100 KB time ratio (linear: ≈ 10).
//!
//! A second group, `audit`, judges the 203 corpus documents as `virt-cpu-policy audit` does.
//!
//! `cargo bench --bench rewrite` (full), `cargo bench --bench rewrite -- --quick` (short),
//! `cargo test --benches` / `cargo bench --bench rewrite -- --test` (each once, as a test).

// Byte counts and nanoseconds become f64 for ratios printed to two places.
#![allow(clippy::cast_precision_loss)]

use criterion::{BenchmarkId, Criterion, Throughput};
use std::fmt::Write as _;
use std::hint::black_box;
use std::time::{Duration, Instant};
use virt_cpu_policy::host::{Host, HostOptions, Sourced};
use virt_cpu_policy::policy::Policy;
use virt_cpu_policy::rewrite::rewrite;

const HEAD: &str = "<domain type='kvm'>
  <name>i-2-14-VM</name>
  <uuid>6f3c2a5e-4b7d-4e0a-9c61-2d8f0b3e7a14</uuid>
  <description>Debian GNU/Linux 12 (64-bit)</description>
  <memory unit='KiB'>4194304</memory>
  <currentMemory unit='KiB'>4194304</currentMemory>
  <vcpu placement='static'>4</vcpu>
  <os>
    <type arch='x86_64' machine='pc-q35-7.2'>hvm</type>
    <boot dev='hd'/>
  </os>
  <features>
    <acpi/>
    <apic/>
  </features>
  <cpu>
    <topology sockets='1' cores='4' threads='1'/>
  </cpu>
  <clock offset='utc'>
    <timer name='kvmclock'/>
  </clock>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>restart</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
";

const TAIL: &str = "    <memballoon model='virtio'/>
  </devices>
</domain>
";

/// A domain of about `size` bytes: HEAD, then alternating disks and interfaces, then TAIL.
fn domain(size: usize) -> String {
    let mut s = String::from(HEAD);
    let mut i = 0u32;
    while s.len() + TAIL.len() < size {
        if i % 2 == 0 {
            let _ = write!(
                s,
                "    <disk type='file' device='disk'>\n      <driver name='qemu' type='qcow2' cache='none'/>\n      <source file='/var/lib/libvirt/images/vol-{i:06}.qcow2'/>\n      <target dev='vd{i:06}' bus='virtio'/>\n      <address type='pci' domain='0x0000' bus='0x{:02x}' slot='0x{:02x}' function='0x0'/>\n    </disk>\n",
                (i / 32) % 256,
                i % 32
            );
        } else {
            let _ = write!(
                s,
                "    <interface type='bridge'>\n      <mac address='52:54:00:{:02x}:{:02x}:{:02x}'/>\n      <source bridge='cloudbr0'/>\n      <model type='virtio'/>\n    </interface>\n",
                (i >> 16) & 0xff,
                (i >> 8) & 0xff,
                i & 0xff
            );
        }
        i += 1;
    }
    s.push_str(TAIL);
    s
}

fn host() -> Host {
    Host::discover(&HostOptions {
        qemu_cache: Some(std::path::PathBuf::new()),
        kvm_max_vcpus: Some(Sourced {
            value: 1024,
            source: "bench".into(),
        }),
        cpus: Some(Sourced {
            value: 64,
            source: "bench".into(),
        }),
        ..HostOptions::default()
    })
    .expect("host facts")
}

const SIZES: [(&str, usize); 3] = [
    ("8KB", 8 * 1024),
    ("100KB", 100 * 1024),
    ("1MB", 1024 * 1024),
];

fn bench(c: &mut Criterion) {
    let policy = Policy::builtin();
    let host = host();
    let mut g = c.benchmark_group("parse+rewrite");
    for (name, size) in SIZES {
        let doc = domain(size);
        let o = rewrite(&doc, "bench", &policy, &host).expect("rewrite");
        assert!(
            o.changed && !o.has_errors(),
            "the bench domain must need a rewrite"
        );
        g.throughput(Throughput::Bytes(doc.len() as u64));
        g.bench_with_input(BenchmarkId::from_parameter(name), &doc, |b, doc| {
            b.iter(|| rewrite(black_box(doc), "bench", &policy, &host).expect("rewrite"));
        });
    }
    g.finish();
}

/// `audit` of the 203 documents of `../shared/corpus/virt-manager/domains/`: every file read and
/// judged with one host (what the command does, minus writing the report). Skipped, with a
/// message, when the corpus is absent; under `CI=true` that is a failure.
fn bench_audit(c: &mut Criterion) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/corpus/virt-manager/domains");
    if !dir.is_dir() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "audit bench: {} not present (CI=true: a missing prerequisite is a failure)",
            dir.display()
        );
        eprintln!("audit bench skipped: {} not present", dir.display());
        return;
    }
    let files = virt_cpu_policy::audit::files(&[dir]).expect("list the corpus");
    let policy = Policy::builtin();
    let host = host();
    let mut g = c.benchmark_group("audit");
    g.throughput(Throughput::Elements(files.len() as u64));
    g.bench_function(BenchmarkId::new("corpus-files", files.len()), |b| {
        b.iter(|| virt_cpu_policy::audit::run(black_box(&files), &policy, &host, |_, _| {}));
    });
    g.finish();
}

/// Mean time of one parse + rewrite of `doc`, over at least `min` of wall time.
fn mean(doc: &str, policy: &Policy, host: &Host, min: Duration) -> Duration {
    let mut n = 0u32;
    let t0 = Instant::now();
    while t0.elapsed() < min || n < 3 {
        black_box(rewrite(black_box(doc), "bench", policy, host).expect("rewrite"));
        n += 1;
    }
    t0.elapsed() / n
}

/// Linear scaling: ns/byte per size and the 1 MB / 100 KB ratio.
fn scaling(min: Duration) {
    let policy = Policy::builtin();
    let host = host();
    println!("\nscaling (mean of parse + rewrite, each size run for at least {min:?}):");
    println!(
        "  {:>6}  {:>9}  {:>12}  {:>8}  {:>8}",
        "size", "bytes", "time", "ns/byte", "MB/s"
    );
    let mut times = Vec::new();
    // Past 1 MB as well: a step between sizes that fit the CPU caches and sizes that do not is
    // not growth; the ratios from 1 MB on show the trend.
    let more = [("2MB", 2 * 1024 * 1024), ("4MB", 4 * 1024 * 1024)];
    for (name, size) in SIZES.into_iter().chain(more) {
        let doc = domain(size);
        let t = mean(&doc, &policy, &host, min);
        let ns_per_byte = t.as_nanos() as f64 / doc.len() as f64;
        println!(
            "  {name:>6}  {:>9}  {:>12?}  {ns_per_byte:>8.2}  {:>8.1}",
            doc.len(),
            t,
            doc.len() as f64 / t.as_secs_f64() / 1e6
        );
        times.push((doc.len(), t));
    }
    let (b100, t100) = times[1];
    let (b1m, t1m) = times[2];
    println!(
        "  1MB / 100KB: time ratio {:.2} for a size ratio {:.2} (linear: the two are equal)",
        t1m.as_secs_f64() / t100.as_secs_f64(),
        b1m as f64 / b100 as f64
    );
    let (b4m, t4m) = times[4];
    println!(
        "  4MB / 1MB:   time ratio {:.2} for a size ratio {:.2}",
        t4m.as_secs_f64() / t1m.as_secs_f64(),
        b4m as f64 / b1m as f64
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    bench_audit(&mut c);
    c.final_summary();
    // Only under `cargo bench` (criterion's --bench), not as a test: --quick gets a short check.
    if args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--test") {
        let quick = args.iter().any(|a| a == "--quick");
        scaling(Duration::from_millis(if quick { 300 } else { 2000 }));
    }
}
