//! The libvirt hook: `hook::run` with a fuzzed operation, guest name, policy and stdin, and the
//! command line's argument parser on fuzzed `hook` arguments. Property: never a panic (a panic in
//! the hook is a guest that does not start), and a refusal is exactly one line.
//!
//! Input layout: byte 0 picks the OPERATION SUB-OPERATION pair (or, for the top values, argv mode:
//! the rest split at NUL bytes is `virt-cpu-policy hook ARGS...` for clap only), byte 1 the policy
//! and the host-fact options; then `GUEST \0 STDIN` (with policy 7: `GUEST \0 POLICY \0 STDIN`).
#![no_main]

use clap::Parser;
use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;
use std::sync::OnceLock;
use virt_cpu_policy::hook::{Answer, HookOptions, Phase, run};

const OPS: [(&str, &str); 12] = [
    ("prepare", "begin"),
    ("started", "begin"),
    ("migrate", "begin"),
    ("restore", "begin"),
    ("stopped", "end"),
    ("release", "end"),
    ("start", "begin"),
    ("reconnect", "begin"),
    ("attach", "begin"),
    ("prepare", "end"),
    ("", ""),
    ("prepare", "begin\n"),
];

const POLICIES: [&str; 7] = [
    "version = 1\n[hook]\non_violation = \"deny\"\non_error = \"deny\"\n[[rule]]\nname = \"v2\"\nmatch = { arch = \"x86_64\" }\ncpu.min_level = \"x86-64-v2\"\ncpu.require = [\"aes\"]\n",
    "[hook]\non_violation = \"warn\"\non_error = \"allow\"\n[[rule]]\nname = \"hm\"\ncpu.mode = \"host-model\"\nvcpu.max = \"machine\"\n",
    "mode = \"audit\"\n[hook]\non_violation = \"deny\"\n[[rule]]\nname = \"m\"\ncpu.model = \"Nehalem\"\ncpu.min_level = \"x86-64-v3\"\n",
    "",
    "this is not toml = [\non_error = \"deny\" # \"allow\" | \"deny\"\n",
    "[[rule]]\nname = \"v\"\nmatch = { type = \"kvm\" }\nvcpu.max = \"host\"\nvcpu.topology = \"keep\"\nvcpu.iommu = \"never\"\n[hook]\non_violation = \"deny\"\n",
    "version = 2\n",
];

struct Dirs {
    policies: Vec<PathBuf>,
    fuzzed: PathBuf,
    missing: PathBuf,
    snapshot: PathBuf,
    bad_cache: PathBuf,
}

fn dirs() -> &'static Dirs {
    static D: OnceLock<Dirs> = OnceLock::new();
    D.get_or_init(|| {
        let base = std::env::temp_dir().join(format!("vcp-fuzz-hook.{}", std::process::id()));
        let snapshot = base.join("snap");
        let bad_cache = base.join("qemu-cache");
        std::fs::create_dir_all(&snapshot).unwrap();
        std::fs::create_dir_all(&bad_cache).unwrap();
        std::fs::write(
            bad_cache.join("qemu_x86_64.xml"),
            b"<qemuCaps><machine name='pc'",
        )
        .unwrap();
        let policies = POLICIES
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let path = base.join(format!("p{i}.toml"));
                std::fs::write(&path, p).unwrap();
                path
            })
            .collect();
        Dirs {
            policies,
            fuzzed: base.join("fuzzed.toml"),
            missing: base.join("missing.toml"),
            snapshot,
            bad_cache,
        }
    })
}

fn split0(b: &[u8]) -> (&[u8], &[u8]) {
    match b.iter().position(|&c| c == 0) {
        Some(i) => (&b[..i], &b[i + 1..]),
        None => (b, &[]),
    }
}

fuzz_target!(|data: &[u8]| {
    let [op, pol, rest @ ..] = data else {
        return;
    };
    if usize::from(*op) >= 240 {
        // argv mode: the parser alone (running it would read the fuzzer's stdin).
        let mut argv = vec!["virt-cpu-policy".to_string(), "hook".to_string()];
        argv.extend(
            rest.split(|&c| c == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned()),
        );
        let _ = virt_cpu_policy::cli::Cli::try_parse_from(argv);
        return;
    }
    let (operation, sub) = OPS[usize::from(*op) % OPS.len()];
    let (guest, rest) = split0(rest);
    let guest = String::from_utf8_lossy(guest);
    let d = dirs();
    let (policy, stdin) = match pol % 9 {
        7 => {
            let (p, s) = split0(rest);
            std::fs::write(&d.fuzzed, p).unwrap();
            (d.fuzzed.clone(), s)
        }
        8 => (d.missing.clone(), rest),
        i => (d.policies[usize::from(i) % d.policies.len()].clone(), rest),
    };
    let opts = HookOptions {
        policy: Some(policy),
        caps: Vec::new(),
        snapshot_dir: Some(d.snapshot.clone()),
        qemu_cache: Some(if pol & 0x10 != 0 {
            d.bad_cache.clone()
        } else {
            PathBuf::new()
        }),
        kvm_max_vcpus: (pol & 0x20 == 0).then(|| virt_cpu_policy::host::Sourced {
            value: 1024,
            source: "fuzz".into(),
        }),
        ..HookOptions::default()
    };
    let Some(check) = Phase::of(operation, sub) else {
        return;
    };
    if let Answer::Refuse(line) = run(&guest, check, stdin, &opts) {
        assert!(
            !line.contains('\n') && !line.is_empty(),
            "a refusal must be one line: {line:?}"
        );
    }
});
