//! Differential test against real libvirt: libvirt is the oracle.
//!
//! 1. The host's `virsh capabilities` is written to a temp file and passed with `--caps`, so the
//!    tool knows the machine-type limits exactly as libvirt does. A handful of x86_64 machine types
//!    (`pc-i440fx-*`, `pc-q35-*` spread across versions, the aliases `pc` and `q35`) are taken
//!    from it.
//! 2. Domains are generated deterministically (fixed seed, xorshift): TCG, x86_64, vCPU maximum
//!    1…320 biased to the edges, `current` ≤, > or absent, random topologies (matching or not,
//!    with dies), an Intel IOMMU with random driver attributes, a split I/O APIC, `<vcpus>` lists
//!    (valid or broken), NUMA cells (covering, partial, exceeding, overlapping) and `<maxMemory>`.
//! 3. For each: `check` with an empty policy (exit 1 = the tool predicts libvirt refuses it) is
//!    compared with `virsh define`. A disagreement fails the test unless the tool's error codes
//!    are all on [`NOT_CHECKED_AT_DEFINE`] (rules libvirt 9.0 does not check at define time).
//! 4. Each domain is rewritten with `vcpu.max = "host"` and a per-case `--host-cpus`; every output
//!    of a `rewrite` that exits 0 must be accepted by `virsh define` (strict).
//!
//! Domains are named `vcp-diff-<pid>-<i>`; a guard undefines every domain with that prefix, also
//! when the test fails.

use crate::harness::{Oracle, Output, Scratch, bin, every_generation, in_parallel, virsh_at};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

const CASES: usize = 400;
const SEED: u64 = 0x5eed_d1ff_2024_0003;
const HOST_CPUS: [u32; 6] = [2, 8, 64, 256, 300, 384];

/// Tool error codes for rules that libvirt 9.0 does not check at define time: when the tool
/// refuses a domain only for these, `virsh define` accepting it is not a disagreement. Each entry
/// says why (the check belongs to a later stage).
const NOT_CHECKED_AT_DEFINE: &[(&str, &str)] = &[
    (
        "topology-clusters",
        "QEMU refuses more than one cluster on x86 when the guest starts (\"clusters > 1 not supported by this machine's CPU topology\", QEMU 10.0 under libvirt 11.3: tests/integration/oracles.rs), libvirt does not at define",
    ),
    (
        "tcg-vcpu-limit",
        "QEMU before 9.0 (or an unknown QEMU, judged as one) refuses TCG vCPUs with APIC IDs of 255 and more when the guest starts (\"current -smp configuration requires kernel irqchip and X2APIC API support\"), libvirt does not at define: tests/integration/tcg.rs starts them",
    ),
    (
        "tcg-x2apic",
        "QEMU 9.0 and later refuse a TCG vCPU with an APIC ID of 255 or more without x2APIC when it is created (\"APIC ID 255 requires x2APIC feature in CPU\"), at start, not at define: tests/integration/tcg.rs starts them",
    ),
    (
        "tcg-cpu-missing",
        "libvirt compares a check='partial' guest CPU with what TCG emulates when the guest starts (\"the CPU is incompatible with host CPU\"), not at define: tests/integration/tcg.rs starts them",
    ),
    (
        "cpu-incompatible",
        "libvirt compares a KVM custom CPU under check='partial' with the host's own CPU when the guest starts (\"the CPU is incompatible with host CPU\"), not at define: tests/integration/kvm.rs starts them",
    ),
    (
        "kvm-check-full",
        "libvirt compares a KVM check='full' guest CPU with what QEMU built once it runs (\"guest CPU doesn't match specification\"), not at define: tests/integration/kvm.rs starts them",
    ),
    (
        "tcg-check-full",
        "libvirt compares a check='full' guest CPU with what QEMU built once it runs (\"guest CPU doesn't match specification\"), not at define: tests/integration/tcg.rs starts them",
    ),
    (
        "tcg-eim",
        "QEMU before 9.0 (or an unknown QEMU, judged as one) refuses an Intel IOMMU with eim='on' under TCG when the guest starts (\"eim=on requires accel=kvm,kernel-irqchip=split\"), libvirt does not at define: the golden tcg-iommu-eim-* cases start them",
    ),
    (
        "gic-vcpu-limit",
        "QEMU refuses more than 8 vCPUs on an aarch64 virt machine with GICv2 under TCG when the guest starts (\"exceeds max CPUs supported by machine 'mach-virt' (8)\"), libvirt does not at define: the golden aarch64-tcg-gicv2-* cases start them",
    ),
];

/// Substrings of libvirt define errors for rules the tool deliberately leaves to libvirt (none:
/// every refusal at define time must be predicted).
const NOT_PREDICTED: &[(&str, &str)] = &[];

/// The name prefix of this run's domains.
fn prefix() -> String {
    format!("vcp-diff-{}-", std::process::id())
}

/// Undefines every domain whose name starts with this run's prefix on the libvirt at `uri` when
/// dropped (also on panic).
struct Cleanup(String);

impl Cleanup {
    fn sweep(&self) -> usize {
        let list = virsh_at(&self.0, &["list", "--all", "--name"]);
        let p = prefix();
        let mut n = 0;
        for name in list
            .stdout
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with(&p))
        {
            let _ = virsh_at(&self.0, &["destroy", name]);
            if virsh_at(&self.0, &["undefine", name]).ok {
                n += 1;
            }
        }
        n
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let n = self.sweep();
        if n > 0 {
            eprintln!("differential: cleanup undefined {n} leftover domain(s)");
        }
    }
}

/// xorshift64*: deterministic and dependency-free.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in 0..n (n > 0).
    pub(crate) fn below(&mut self, n: u32) -> u32 {
        u32::try_from(self.next() % u64::from(n)).unwrap()
    }
    /// Uniform in a..=b.
    pub(crate) fn range(&mut self, a: u32, b: u32) -> u32 {
        a + self.below(b - a + 1)
    }
    /// True with probability pct/100.
    fn chance(&mut self, pct: u32) -> bool {
        self.below(100) < pct
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(u32::try_from(xs.len()).unwrap()) as usize]
    }
}

/// `major.minor` of a versioned machine type, for sorting.
fn version(name: &str) -> Option<(u32, u32)> {
    let v = name.rsplit('-').next()?;
    let (a, b) = v.split_once('.')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// x86_64 machine types from `virsh capabilities`: each family's oldest, newest and two between,
/// q35's last 255-vCPU and first 288-vCPU versions, and the aliases `pc` and `q35`.
fn machines(caps: &str) -> Vec<(String, u32)> {
    let doc = roxmltree::Document::parse(caps).expect("virsh capabilities parses");
    let mut all: Vec<(String, u32)> = Vec::new();
    for arch in doc
        .descendants()
        .filter(|n| n.has_tag_name("arch") && n.attribute("name") == Some("x86_64"))
        .filter(|n| n.parent().is_some_and(|p| p.has_tag_name("guest")))
    {
        for m in arch.children().filter(|n| n.has_tag_name("machine")) {
            let name = m.text().unwrap_or("").trim().to_string();
            let max = m
                .attribute("maxCpus")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            if !all.iter().any(|(n, _)| *n == name) {
                all.push((name, max));
            }
        }
    }
    let mut out = Vec::new();
    for fam in ["pc-i440fx-", "pc-q35-"] {
        let mut v: Vec<&(String, u32)> = all
            .iter()
            .filter(|(n, _)| n.starts_with(fam) && version(n).is_some())
            .collect();
        v.sort_by_key(|(n, _)| version(n));
        if v.is_empty() {
            continue;
        }
        let last = v.len() - 1;
        let mut idx: Vec<usize> = (0..4).map(|k| k * last / 3).collect();
        if fam == "pc-q35-" {
            // The step from 255 to 288 vCPUs.
            if let Some(i) = v.iter().position(|(_, m)| *m > 255) {
                idx.extend([i.saturating_sub(1), i]);
            }
        }
        idx.sort_unstable();
        idx.dedup();
        out.extend(idx.into_iter().map(|i| v[i].clone()));
    }
    for alias in ["pc", "q35"] {
        if let Some(m) = all.iter().find(|(n, _)| n == alias) {
            out.push(m.clone());
        }
    }
    out
}

fn divisors(n: u32) -> Vec<u32> {
    (1..=n).filter(|d| n % d == 0).collect()
}

/// One generated domain.
struct Case {
    name: String,
    xml: String,
    /// Key features, one line.
    desc: String,
    host_cpus: u32,
}

#[allow(clippy::too_many_lines)]
fn generate(rng: &mut Rng, i: usize, machines: &[(String, u32)]) -> Case {
    const EDGES: [u32; 16] = [
        1, 2, 254, 255, 256, 257, 286, 287, 288, 289, 290, 300, 320, 4, 6, 8,
    ];
    let name = format!("{}{i}", prefix());
    let mut desc = Vec::new();
    let (machine, mlimit) =
        machines[rng.below(u32::try_from(machines.len()).unwrap()) as usize].clone();
    desc.push(format!("machine={machine}({mlimit})"));
    let max = if rng.chance(55) {
        rng.pick(&EDGES)
    } else {
        rng.range(1, 320)
    };
    // current: mostly ≤ max, sometimes absent, above max or 0.
    let current: Option<u32> = match rng.below(100) {
        0..=54 => Some(rng.range(1, max)),
        55..=64 => Some(max),
        65..=81 => None,
        82..=95 => Some(max + rng.range(1, 4)),
        _ => Some(0),
    };
    desc.push(match current {
        Some(c) => format!("vcpu={c}/{max}"),
        None => format!("vcpu={max}"),
    });
    let online = current.unwrap_or(max).clamp(1, max);

    // <topology>
    let topology = match rng.below(100) {
        0..=24 => None,
        t => {
            let (s, d, c, th) = if t < 70 {
                // Matching the maximum, sometimes with dies.
                let threads = rng.pick(
                    &divisors(max)
                        .into_iter()
                        .filter(|d| *d <= 2)
                        .collect::<Vec<_>>(),
                );
                let dies = if rng.chance(30) {
                    rng.pick(
                        &divisors(max / threads)
                            .into_iter()
                            .filter(|d| *d <= 3)
                            .collect::<Vec<_>>(),
                    )
                } else {
                    1
                };
                let rest = max / threads / dies;
                let cores = rng.pick(&divisors(rest));
                (rest / cores, dies, cores, threads)
            } else {
                let (mut s, d, c, th) = (
                    rng.range(1, 16),
                    if rng.chance(25) { rng.range(1, 2) } else { 1 },
                    rng.range(1, 8),
                    rng.range(1, 2),
                );
                if s * d * c * th == max {
                    s += 1;
                }
                (s, d, c, th)
            };
            let dies = if d > 1 || rng.chance(10) {
                format!(" dies='{d}'")
            } else {
                String::new()
            };
            // `clusters` (libvirt 10.1 and later read it; 9.0 ignores it), drawn from a generator
            // of its own so the rest of each case stays what it was before clusters were tried.
            let mut side =
                Rng(SEED ^ (u64::try_from(i).unwrap_or(0) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let clusters = match side.below(100) {
                0..=7 => " clusters='1'",
                8..=13 => " clusters='2'",
                _ => "",
            };
            if !clusters.is_empty() {
                desc.push(format!(
                    "clusters={}",
                    clusters.trim_start_matches(" clusters=")
                ));
            }
            let dies = format!("{dies}{clusters}");
            desc.push(format!(
                "topology={s}x{d}x{c}x{th}{}",
                if s * d * c * th == max {
                    ""
                } else {
                    "(mismatch)"
                }
            ));
            Some(format!(
                "<topology sockets='{s}'{dies} cores='{c}' threads='{th}'/>"
            ))
        }
    };

    // <iommu> and <ioapic>
    let onoff = |rng: &mut Rng| rng.pick(&[Some("on"), Some("off"), None]);
    let iommu = if rng.chance(35) {
        let (ir, eim) = if rng.chance(50) {
            (Some("on"), Some("on"))
        } else {
            (onoff(rng), onoff(rng))
        };
        let mut attrs = String::new();
        if let Some(v) = ir {
            write!(attrs, " intremap='{v}'").unwrap();
        }
        if let Some(v) = eim {
            write!(attrs, " eim='{v}'").unwrap();
        }
        desc.push(format!("iommu=intel[{}]", attrs.trim()));
        Some(if attrs.is_empty() {
            "<iommu model='intel'/>".to_string()
        } else {
            format!("<iommu model='intel'>\n      <driver{attrs}/>\n    </iommu>")
        })
    } else {
        None
    };
    let ioapic = match rng.below(100) {
        0..=34 => Some("qemu"),
        35..=42 => Some("kvm"),
        _ => None,
    };
    if let Some(d) = ioapic {
        desc.push(format!("ioapic={d}"));
    }

    // <vcpus>
    let vcpus = if rng.chance(30) {
        // libvirt 9.0: vCPU 0 enabled and not hotpluggable, online non-hotpluggable vCPUs before
        // hotpluggable ones, disabled ones hotpluggable.
        let fixed = rng.range(1, online);
        let mut entries: Vec<String> = (0..max)
            .map(|id| {
                if id < fixed {
                    format!("<vcpu id='{id}' enabled='yes' hotpluggable='no'/>")
                } else if id < online {
                    format!("<vcpu id='{id}' enabled='yes' hotpluggable='yes'/>")
                } else {
                    format!("<vcpu id='{id}' enabled='no' hotpluggable='yes'/>")
                }
            })
            .collect();
        let kind = if rng.chance(55) {
            "valid"
        } else {
            match rng.below(8) {
                0 => {
                    entries.push(format!(
                        "<vcpu id='{max}' enabled='no' hotpluggable='yes'/>"
                    ));
                    "id-out-of-range"
                }
                1 => {
                    entries[0] = "<vcpu id='0' enabled='no' hotpluggable='yes'/>".to_string();
                    "vcpu0-offline"
                }
                2 => {
                    entries[0] = "<vcpu id='0' enabled='yes' hotpluggable='yes'/>".to_string();
                    "vcpu0-hotpluggable"
                }
                3 if max >= 2 => {
                    let l = entries.len() - 1;
                    entries[l] = format!("<vcpu id='{l}' enabled='no' hotpluggable='no'/>");
                    "offline-not-hotpluggable"
                }
                4 if max >= 2 => {
                    entries[1] = "<vcpu id='0' enabled='yes' hotpluggable='no'/>".to_string();
                    "duplicate-id"
                }
                5 => {
                    let l = entries.len() - 1;
                    entries[l] = "<vcpu enabled='no' hotpluggable='yes'/>".to_string();
                    "missing-id"
                }
                6 if online >= 3 => {
                    entries[1] = "<vcpu id='1' enabled='yes' hotpluggable='yes'/>".to_string();
                    entries[2] = "<vcpu id='2' enabled='yes' hotpluggable='no'/>".to_string();
                    "hotpluggable-before-fixed"
                }
                _ => {
                    entries.truncate(entries.len().div_ceil(2));
                    "partial"
                }
            }
        };
        desc.push(format!("vcpus={kind}"));
        Some(format!(
            "<vcpus>\n{}  </vcpus>",
            entries
                .iter()
                .map(|e| format!("    {e}\n"))
                .collect::<String>()
        ))
    } else {
        None
    };

    // NUMA cells
    let numa = if rng.chance(30) {
        let k = rng.range(1, 3).min(max);
        let (kind, end) = match rng.below(100) {
            0..=54 => ("cover", max),
            55..=74 if max > k => ("partial", rng.range(k, max - 1)),
            75..=94 => ("exceed", max + rng.range(1, 4)),
            _ => ("overlap", max),
        };
        let end = end.max(k);
        let mut cells = String::new();
        let step = end / k;
        for c in 0..k {
            let a = c * step;
            let b = if c == k - 1 {
                end - 1
            } else {
                (c + 1) * step - 1
            };
            let a = if kind == "overlap" && c == k - 1 && k > 1 {
                0
            } else {
                a
            };
            let cpus = if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            };
            write!(
                cells,
                "\n      <cell id='{c}' cpus='{cpus}' memory='64' unit='MiB'/>"
            )
            .unwrap();
        }
        let kind = if kind == "overlap" && k == 1 {
            "cover"
        } else {
            kind
        };
        desc.push(format!("numa={kind}({k} cells, cpus 0-{})", end - 1));
        Some(format!("<numa>{cells}\n    </numa>"))
    } else {
        None
    };

    let max_memory = rng.chance(20);
    if max_memory {
        desc.push("maxMemory".to_string());
    }

    let mut x = String::from("<domain type='qemu'>\n");
    writeln!(x, "  <name>{name}</name>").unwrap();
    if max_memory {
        x.push_str("  <maxMemory slots='4' unit='MiB'>1024</maxMemory>\n");
    }
    x.push_str("  <memory unit='MiB'>128</memory>\n");
    match current {
        Some(c) => writeln!(x, "  <vcpu current='{c}'>{max}</vcpu>").unwrap(),
        None => writeln!(x, "  <vcpu>{max}</vcpu>").unwrap(),
    }
    if let Some(v) = &vcpus {
        writeln!(x, "  {v}").unwrap();
    }
    writeln!(
        x,
        "  <os>\n    <type arch='x86_64' machine='{machine}'>hvm</type>\n  </os>"
    )
    .unwrap();
    if let Some(d) = ioapic {
        writeln!(x, "  <features>\n    <ioapic driver='{d}'/>\n  </features>").unwrap();
    }
    if topology.is_some() || numa.is_some() {
        x.push_str("  <cpu>\n");
        if let Some(t) = &topology {
            writeln!(x, "    {t}").unwrap();
        }
        if let Some(n) = &numa {
            writeln!(x, "    {n}").unwrap();
        }
        x.push_str("  </cpu>\n");
    }
    x.push_str("  <devices>\n    <emulator>/usr/bin/qemu-system-x86_64</emulator>\n");
    if let Some(i) = &iommu {
        writeln!(x, "    {i}").unwrap();
    }
    x.push_str("  </devices>\n</domain>\n");
    Case {
        name,
        xml: x,
        desc: desc.join(" "),
        host_cpus: rng.pick(&HOST_CPUS),
    }
}

/// What `check --format json` said.
struct Verdict {
    code: i32,
    /// (severity, code, message)
    findings: Vec<(String, String, String)>,
    raw: String,
}

impl Verdict {
    fn errors(&self) -> Vec<&str> {
        self.findings
            .iter()
            .filter(|(s, _, _)| s == "error")
            .map(|(_, c, _)| c.as_str())
            .collect()
    }
    fn summary(&self) -> String {
        if self.findings.is_empty() {
            return format!("exit {}, no findings {}", self.code, self.raw.trim());
        }
        let mut s = format!("exit {}", self.code);
        for (sev, code, msg) in &self.findings {
            write!(s, "\n      {sev}[{code}]: {msg}").unwrap();
        }
        s
    }
}

fn check(exe: &Path, file: &Path, policy: &Path, caps: &Path, oracle: &Oracle) -> Verdict {
    let mut args = vec![
        "check".to_string(),
        "--format".into(),
        "json".into(),
        "--no-qemu-caps-cache".into(),
        "--policy".into(),
        s(policy),
        "--caps".into(),
        s(caps),
    ];
    args.extend(oracle.tool_args());
    args.push(s(file));
    let out = tool(exe, &args);
    let mut findings = Vec::new();
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(out.stdout.trim()) {
        for f in v["findings"].as_array().into_iter().flatten() {
            let s = |k: &str| f[k].as_str().unwrap_or("").to_string();
            findings.push((s("severity"), s("code"), s("message")));
        }
    }
    Verdict {
        code: out.code,
        findings,
        raw: format!("{}{}", out.stdout, out.stderr),
    }
}

/// `error[code]` codes on a text report.
fn error_codes(stderr: &str) -> Vec<String> {
    stderr
        .match_indices("error[")
        .filter_map(|(i, _)| {
            let rest = &stderr[i + 6..];
            rest.find(']').map(|e| rest[..e].to_string())
        })
        .collect()
}

/// Run the copy of the binary under test (copied at the start, so that a concurrent `cargo build`
/// replacing `target/debug/virt-cpu-policy` does not pull it away mid-run).
fn tool(exe: &Path, args: &[String]) -> Output {
    let out = Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run virt-cpu-policy");
    Output {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// The `<vcpu>` maximum of a document (0 when unreadable).
fn max_of(xml: &str) -> u32 {
    roxmltree::Document::parse(xml)
        .ok()
        .and_then(|d| {
            d.root_element()
                .children()
                .find(|n| n.has_tag_name("vcpu"))
                .and_then(|v| v.text())
                .and_then(|t| t.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Define `file` on `oracle`; on success undefine `name` again. Returns Err(libvirt's message)
/// on refusal.
fn define(oracle: &Oracle, file: &Path, name: &str) -> Result<(), String> {
    let r = oracle.virsh(&["define", &file.display().to_string()]);
    if !r.ok {
        let msg = r
            .stderr
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.contains("Failed to define domain"))
            .collect::<Vec<_>>()
            .join(" / ");
        return Err(msg);
    }
    let u = oracle.virsh(&["undefine", name]);
    assert!(u.ok, "virsh undefine {name}: {}{}", u.stdout, u.stderr);
    Ok(())
}

/// The files one oracle's run uses.
struct Files<'a> {
    exe: &'a Path,
    caps: PathBuf,
    empty: PathBuf,
    host_policy: PathBuf,
    domain: PathBuf,
    rewritten: PathBuf,
}

/// Part 1: `check` with an empty policy against `virsh define` of each input. Returns the
/// disagreements that no allow-list entry explains.
fn part1(oracle: &Oracle, f: &Files<'_>, cases: &[Case]) -> Vec<String> {
    let started = Instant::now();
    let mut agree = 0;
    let mut agree_refused = 0;
    let mut allowed: Vec<String> = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    let mut by_reason: BTreeMap<String, usize> = BTreeMap::new();
    let mut by_kind: BTreeMap<String, usize> = BTreeMap::new();
    for case in cases {
        std::fs::write(&f.domain, &case.xml).unwrap();
        let verdict = check(f.exe, &f.domain, &f.empty, &f.caps, oracle);
        let libvirt = define(oracle, &f.domain, &case.name);
        let report = |what: &str, lv: &str| {
            format!(
                "  case {} [{}]: {what}\n    tool: {}\n    libvirt: {lv}",
                case.name,
                case.desc,
                verdict.summary()
            )
        };
        match (verdict.code, &libvirt) {
            (0, Ok(())) => agree += 1,
            (1, Err(_)) => {
                agree += 1;
                agree_refused += 1;
            }
            (1, Ok(())) => {
                let errs = verdict.errors();
                let why: Vec<&str> = errs
                    .iter()
                    .filter_map(|c| {
                        NOT_CHECKED_AT_DEFINE
                            .iter()
                            .find(|(a, _)| a == c)
                            .map(|(_, w)| *w)
                    })
                    .collect();
                let text = report("the tool refuses, libvirt accepts", "accepted");
                if !errs.is_empty() && why.len() == errs.len() {
                    *by_reason.entry(errs.join("+")).or_default() += 1;
                    allowed.push(text);
                } else {
                    *by_kind
                        .entry(format!(
                            "tool refuses ({}), libvirt accepts",
                            errs.join("+")
                        ))
                        .or_default() += 1;
                    failures.push(text);
                }
            }
            (0, Err(msg)) => {
                let text = report("the tool accepts, libvirt refuses", msg);
                if let Some((s, _)) = NOT_PREDICTED.iter().find(|(s, _)| msg.contains(s)) {
                    *by_reason.entry(format!("libvirt: {s}")).or_default() += 1;
                    allowed.push(text);
                } else {
                    *by_kind
                        .entry(format!("tool accepts, libvirt refuses: {msg}"))
                        .or_default() += 1;
                    failures.push(text);
                }
            }
            (code, lv) => failures.push(report(
                &format!("unexpected exit {code} from check with an empty policy (test bug?)"),
                &match lv {
                    Ok(()) => "accepted".to_string(),
                    Err(m) => m.clone(),
                },
            )),
        }
    }
    eprintln!(
        "differential: {}: {} cases, {agree} agreements ({} accepted by both, {agree_refused} refused by both), {} disagreements ({} allowed, {} not) [{:.1?}]",
        oracle.label,
        cases.len(),
        agree - agree_refused,
        allowed.len() + failures.len(),
        allowed.len(),
        failures.len(),
        started.elapsed()
    );
    for (r, n) in &by_reason {
        eprintln!("  allowed: {n} × {r}");
    }
    for a in &allowed {
        eprintln!("allowed disagreement:\n{a}");
    }
    for f in &failures {
        eprintln!("DISAGREEMENT:\n{f}");
    }
    for (k, n) in &by_kind {
        eprintln!("  disagreement: {n} × {k}");
    }
    failures
}

/// Part 2: each input rewritten with `vcpu.max = "host"`; every output of a `rewrite` that exits
/// 0 must be accepted by `virsh define`. Returns the failures.
fn part2(oracle: &Oracle, f: &Files<'_>, cases: &[Case]) -> Vec<String> {
    let started = Instant::now();
    let mut exit0 = 0;
    let mut exit1 = 0;
    let mut exit1_codes: BTreeMap<String, usize> = BTreeMap::new();
    let mut defined = 0;
    let mut defined_above_255 = 0;
    let mut refused_by_msg: BTreeMap<String, usize> = BTreeMap::new();
    let mut rewrite_failures: Vec<String> = Vec::new();
    for case in cases {
        std::fs::write(&f.domain, &case.xml).unwrap();
        let mut args = vec![
            "rewrite".to_string(),
            "--no-qemu-caps-cache".into(),
            "--policy".into(),
            s(&f.host_policy),
            "--caps".into(),
            s(&f.caps),
            "--host-cpus".into(),
            case.host_cpus.to_string(),
        ];
        args.extend(oracle.tool_args());
        args.push(s(&f.domain));
        let out = tool(f.exe, &args);
        match out.code {
            0 => {
                exit0 += 1;
                std::fs::write(&f.rewritten, &out.stdout).unwrap();
                match define(oracle, &f.rewritten, &case.name) {
                    Ok(()) => {
                        defined += 1;
                        if max_of(&out.stdout) > 255 {
                            defined_above_255 += 1;
                        }
                    }
                    Err(msg) => rewrite_failures.push({
                        *refused_by_msg.entry(msg.clone()).or_default() += 1;
                        format!(
                        "  case {} [{}] host-cpus {}: rewrite exit 0, libvirt refuses: {msg}\n--- input:\n{}--- output:\n{}",
                        case.name, case.desc, case.host_cpus, case.xml, out.stdout
                    )
                    }),
                }
            }
            1 => {
                exit1 += 1;
                let mut codes = error_codes(&out.stderr);
                codes.sort();
                codes.dedup();
                *exit1_codes.entry(codes.join("+")).or_default() += 1;
            }
            c => rewrite_failures.push(format!(
                "  case {} [{}] host-cpus {}: rewrite exit {c}\n{}",
                case.name, case.desc, case.host_cpus, out.stderr
            )),
        }
    }
    eprintln!(
        "differential: {}: rewrite vcpu.max=\"host\": {exit0} exit 0 ({defined} accepted by virsh define, {defined_above_255} of them with more than 255 vCPUs), {exit1} exit 1, {} failures [{:.1?}]",
        oracle.label,
        rewrite_failures.len(),
        started.elapsed()
    );
    for (c, n) in &exit1_codes {
        eprintln!("  exit 1: {n} × {c}");
    }
    for f in &rewrite_failures {
        eprintln!("REWRITE FAILURE:\n{f}");
    }
    for (m, n) in &refused_by_msg {
        eprintln!("  rewrite exit 0 but refused: {n} × {m}");
    }
    rewrite_failures
}

#[test]
#[ignore = "needs a running libvirtd: .ci/run starts one"]
fn check_agrees_with_virsh_define_and_rewrites_are_accepted() {
    let tmp = Scratch::new("diff");
    let exe = tmp.0.join("virt-cpu-policy");
    std::fs::copy(bin(), &exe).expect("copy the binary under test");
    let empty = tmp.0.join("empty.toml");
    std::fs::write(&empty, "version = 1\n").unwrap();
    let host_policy = tmp.0.join("max-host.toml");
    std::fs::write(
        &host_policy,
        "version = 1\n\n[[rule]]\nname = \"max host\"\nvcpu.max = \"host\"\n",
    )
    .unwrap();
    // One thread per generation: each has its own daemon, files and domain names, and the run
    // waits on libvirt far more than on the CPU, so the four overlap.
    let oracles = every_generation();
    let failures: Vec<String> = in_parallel(&oracles, |oracle| {
        differential_on(oracle, &exe, &tmp, &empty, &host_policy)
    })
    .into_iter()
    .flatten()
    .collect();
    assert!(
        failures.is_empty(),
        "{} disagreement(s) with virsh define on the input, or rewrite(s) with exit 0 refused by virsh define (see above)",
        failures.len()
    );
}

/// The differential on one generation: its own capabilities, machine types, domains and files.
fn differential_on(
    oracle: &Oracle,
    exe: &Path,
    tmp: &Scratch,
    empty: &Path,
    host_policy: &Path,
) -> Vec<String> {
    let _cleanup = Cleanup(oracle.uri.clone());
    let caps_text = oracle.virsh(&["capabilities"]);
    assert!(caps_text.ok, "virsh capabilities: {}", caps_text.stderr);
    let f = Files {
        exe,
        caps: tmp.write(
            &format!("capabilities-{}.xml", oracle.version),
            &caps_text.stdout,
        ),
        empty: empty.to_path_buf(),
        host_policy: host_policy.to_path_buf(),
        domain: tmp.0.join(format!("domain-{}.xml", oracle.version)),
        rewritten: tmp.0.join(format!("rewritten-{}.xml", oracle.version)),
    };
    let machines = machines(&caps_text.stdout);
    assert!(
        machines.len() >= 4,
        "too few x86_64 machine types in virsh capabilities: {machines:?}"
    );
    eprintln!(
        "differential: {}: seed {SEED:#x}, {CASES} cases, machine types {}",
        oracle.label,
        machines
            .iter()
            .map(|(n, m)| format!("{n}({m})"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut rng = Rng(SEED);
    let cases: Vec<Case> = (0..CASES)
        .map(|i| generate(&mut rng, i, &machines))
        .collect();
    // VCP_DIFF_DUMP=DIR keeps every generated domain as DIR/<version>/<i>-host<N>.xml.
    if let Some(dir) = std::env::var_os("VCP_DIFF_DUMP") {
        let dir = PathBuf::from(dir).join(&oracle.version);
        std::fs::create_dir_all(&dir).unwrap();
        for (i, c) in cases.iter().enumerate() {
            std::fs::write(dir.join(format!("{i}-host{}.xml", c.host_cpus)), &c.xml).unwrap();
        }
        std::fs::copy(&f.caps, dir.join("capabilities.xml")).unwrap();
    }
    let mut failures = part1(oracle, &f, &cases);
    failures.extend(part2(oracle, &f, &cases));
    failures
}
