//! The host's own CPU decoded from CPUID as libvirt decodes it (`virCPUx86GetHost`), against
//! libvirt's own answers:
//!
//! * every raw dump of `../shared/corpus/libvirt-cputestdata/cpuid/` (libvirt's test data)
//!   decoded with each of the four libvirt generations' cpu_maps of `tests/data/generations`,
//!   against the `-host.xml` libvirt's tests expect for it (made with one libvirt's map, not
//!   always one of these four): model, vendor and feature set must be those of at least one
//!   generation, but for the exceptions of [`EXCEPTIONS`];
//! * this machine's CPU decoded with its libvirt's cpu_map against `virsh capabilities`.

use crate::harness::{Cmd, Scratch, bin, is_root, root, s, shared_corpus, virsh};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use virt_cpu_policy::libvirt::cpu_def::CpuDef;
use virt_cpu_policy::libvirt::cpu_map::x86::X86Map;
use virt_cpu_policy::libvirt::cpudata::X86CpuData;
use virt_cpu_policy::libvirt::{Document, DocumentKind, read_document};

/// The libvirt generations whose cpu_maps the tests hold, oldest first.
const GENERATIONS: [&str; 4] = ["bullseye", "bookworm", "trixie", "forky"];

/// Dumps no generation's map decodes as libvirt's expected file says, each with the reason: the
/// expected file was made with a cpu_map none of the four here is.
const EXCEPTIONS: &[(&str, &str)] = &[
    (
        "x86-cpuid-Core-i7-2600.xml",
        "its -host.xml (no <signature>: an old libvirt's) lists neither arat nor xsaveopt, which the dump has (leaf 6 eax bit 2, leaf 0xd.1 eax bit 0) and every map here names: it predates them; the decoded model is the same",
    ),
    (
        "x86_64-cpuid-Ryzen-9-3900X-12-Core.xml",
        "forky's map decodes libvirt's EPYC-v5 and every feature, plus gmet, which the libvirt that made the -host.xml did not know yet",
    ),
    (
        "x86_64-cpuid-Ryzen-9-9950X-16-Core.xml",
        "made by a libvirt between trixie's and forky's: it knows fs-gs-base-ns, its-no and prefetchi (trixie's map does not) but not forky's EPYC-Rome-v5, cet-ss and gmet",
    ),
    (
        "x86_64-cpuid-Xeon-E7540.xml",
        "made with a map that names flush-l1d and no versioned models: bullseye's and bookworm's maps lack flush-l1d, trixie's and forky's name the model Nehalem-v2, not Nehalem-IBRS (same features)",
    ),
];

/// (model, vendor, features) of a host CPU, the parts compared.
type Shape = (Option<String>, Option<String>, BTreeSet<String>);

fn shape(cpu: &CpuDef) -> Shape {
    (
        cpu.model.clone(),
        cpu.vendor.clone(),
        cpu.features.iter().map(|(n, _)| n.clone()).collect(),
    )
}

/// The `-host.xml` libvirt expects for the dump `dump` (`cpuid/x86_64-cpuid-X.xml`): beside
/// `cpuid/`, `x86_64-cpuid-X-host.xml` (or the older `x86-` spelling).
fn expected_for(dump: &Path) -> Option<PathBuf> {
    let name = dump.file_stem()?.to_str()?;
    let cpu = name
        .strip_prefix("x86_64-cpuid-")
        .or_else(|| name.strip_prefix("x86-cpuid-"))?;
    let dir = dump.parent()?.parent()?;
    [
        format!("x86_64-cpuid-{cpu}-host.xml"),
        format!("x86-cpuid-{cpu}-host.xml"),
    ]
    .into_iter()
    .map(|f| dir.join(f))
    .find(|p| p.is_file())
}

fn read_cpu(path: &Path) -> CpuDef {
    match read_document(path, &[DocumentKind::Cpu]) {
        Ok(Document::Cpu(c)) => c,
        other => panic!("{}: {other:?}", path.display()),
    }
}

/// How `got` differs from `want`, one line.
fn difference(got: &Shape, want: &Shape) -> String {
    let mut out = Vec::new();
    if got.0 != want.0 {
        out.push(format!("model {:?} not {:?}", got.0, want.0));
    }
    if got.1 != want.1 {
        out.push(format!("vendor {:?} not {:?}", got.1, want.1));
    }
    let extra: Vec<_> = got.2.difference(&want.2).collect();
    let missing: Vec<_> = want.2.difference(&got.2).collect();
    if !extra.is_empty() {
        out.push(format!("extra {extra:?}"));
    }
    if !missing.is_empty() {
        out.push(format!("missing {missing:?}"));
    }
    out.join(", ")
}

#[test]
#[cfg_attr(
    not(vcp_shared_corpus),
    ignore = "needs ../shared/corpus beside the checkout"
)]
fn corpus_dumps_decode_as_libvirt_decodes_them() {
    let dir = shared_corpus().join("libvirt-cputestdata/cpuid");
    let mut dumps: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("read libvirt-cputestdata/cpuid")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "xml"))
        .collect();
    dumps.sort();
    assert!(dumps.len() >= 50, "{} dumps only", dumps.len());
    let maps: Vec<(&str, X86Map)> = GENERATIONS
        .iter()
        .map(|g| {
            let d = root()
                .join("tests/data/generations")
                .join(g)
                .join("cpu_map");
            (*g, X86Map::load(&d).expect("load a generation's cpu_map"))
        })
        .collect();
    let mut table = String::new();
    let mut failures = Vec::new();
    let mut by_generation = std::collections::BTreeMap::<&str, usize>::new();
    for dump in &dumps {
        let name = dump.file_name().unwrap().to_string_lossy().into_owned();
        let expected = expected_for(dump).unwrap_or_else(|| panic!("{name}: no -host.xml"));
        let want = shape(&read_cpu(&expected));
        let raw = X86CpuData::load(dump).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut reproduced = Vec::new();
        let mut misses = Vec::new();
        for (g, map) in &maps {
            match map.decode_host(&raw) {
                Ok(cpu) if shape(&cpu) == want => reproduced.push(*g),
                Ok(cpu) => misses.push(format!("{g}: {}", difference(&shape(&cpu), &want))),
                Err(e) => misses.push(format!("{g}: {e}")),
            }
        }
        for g in &reproduced {
            *by_generation.entry(g).or_default() += 1;
        }
        let exception = EXCEPTIONS.iter().find(|(n, _)| *n == name);
        let line = if reproduced.is_empty() {
            format!("{name}: NONE ({})", misses.join("; "))
        } else {
            format!("{name}: {}", reproduced.join(" "))
        };
        table.push_str(&line);
        table.push('\n');
        match (reproduced.is_empty(), exception) {
            (true, None) => failures.push(line),
            (false, Some((_, why))) => {
                failures.push(format!(
                    "{name}: listed as an exception ({why}) but reproduced"
                ));
            }
            _ => {}
        }
    }
    eprintln!("{table}reproduced per generation: {by_generation:?}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// This machine's CPU, decoded with its libvirt's cpu_map, is `virsh capabilities`' host CPU.
#[test]
#[cfg(target_arch = "x86_64")]
#[ignore = "needs the host's libvirtd (virsh capabilities) and its cpu_map: .ci/run starts it"]
fn this_machine_decodes_as_virsh_capabilities_says() {
    let map_dir = Path::new("/usr/share/libvirt/cpu_map");
    let ci = std::env::var("CI").as_deref() == Ok("true");
    let have_virsh = std::process::Command::new("virsh")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_virsh || !map_dir.join("index.xml").is_file() {
        assert!(!ci, "CI=true but virsh or {} is absent", map_dir.display());
        eprintln!("this machine's host CPU: SKIP: virsh or /usr/share/libvirt/cpu_map is absent");
        return;
    }
    let caps = virsh(&["capabilities"]);
    if !caps.ok {
        assert!(!ci, "CI=true but virsh capabilities fails: {}", caps.stderr);
        eprintln!(
            "this machine's host CPU: SKIP: virsh capabilities fails: {}",
            caps.stderr
        );
        return;
    }
    let doc = roxmltree::Document::parse(&caps.stdout).expect("capabilities are XML");
    let node = doc
        .descendants()
        .find(|n| n.has_tag_name("cpu") && n.parent().is_some_and(|p| p.has_tag_name("host")))
        .expect("<host><cpu>");
    let want = shape(&CpuDef::read(node).expect("libvirt's host CPU"));
    let map = X86Map::load(map_dir).expect("load this machine's cpu_map");
    let raw = virt_cpu_policy::host::cpuid::this_machine(&map).expect("x86_64");
    let got = shape(&map.decode_host(&raw).expect("decode this machine's CPU"));
    assert_eq!(got, want, "{}", difference(&got, &want));
}

/// libvirt 9.0's recorded cpu_map with its x86 data taken out: its `index.xml` without the
/// `<arch name='x86'>` element and none of the `x86_*.xml` files (the arm and ppc64 data kept),
/// as a cpu_map of a libvirt built for another arch, or one cut short, is.
fn cpu_map_without_x86(scratch: &Scratch) -> PathBuf {
    let recorded = root().join("tests/data/generations/bookworm/cpu_map");
    let dir = scratch.path("cpu_map");
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(&recorded).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name != "index.xml" && !name.starts_with("x86_") {
            std::fs::copy(recorded.join(&name), dir.join(&name)).unwrap();
        }
    }
    let index = std::fs::read_to_string(recorded.join("index.xml")).unwrap();
    let start = index
        .find("<arch name='x86'>")
        .expect("the recorded index's x86 arch");
    let end = start + index[start..].find("</arch>").unwrap() + "</arch>".len();
    let cut = format!("{}{}", &index[..start], &index[end..]);
    assert!(cut.contains("<arch name='arm'>"), "{cut}");
    std::fs::write(dir.join("index.xml"), cut).unwrap();
    dir
}

/// A KVM guest with a custom CPU libvirt compares with the host's at start.
const KVM_NEHALEM: &str = "<domain type='kvm'><name>g</name><memory>1048576</memory><vcpu>2</vcpu><os><type arch='x86_64' machine='pc-q35-7.2'>hvm</type></os><cpu mode='custom' match='exact' check='partial'><model fallback='forbid'>Nehalem</model></cpu></domain>";

/// libvirt's words for a cpu_map without x86 data (`cpuMapLoad`).
const NO_X86_DATA: &str = "cannot find CPU map for x86 architecture";

/// A cpu_map named with `--cpu-map` that has no x86 data is bad input, said in libvirt's words
/// (exit 2, nothing on stdout), not a guest whose model is unknown (exit 1, which it was).
#[test]
fn a_named_cpu_map_without_x86_data_is_named_so() {
    let scratch = Scratch::new("no-x86-map");
    let map = cpu_map_without_x86(&scratch);
    let guest = scratch.write("g.xml", KVM_NEHALEM);
    for command in ["check", "rewrite"] {
        let out = Cmd::new(&[command, "--cpu-map", &s(&map), &s(&guest)]).run();
        out.status(2);
        assert!(out.stdout.is_empty(), "{}", out.stdout);
        assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
        assert!(out.stderr.contains(NO_X86_DATA), "{}", out.stderr);
        assert!(
            out.stderr.contains(&s(&map.join("index.xml"))),
            "{}",
            out.stderr
        );
        assert!(!out.stderr.contains("unknown"), "{}", out.stderr);
    }
}

/// This machine's libvirt cpu_map without x86 data (put over /usr/share/libvirt/cpu_map in a
/// private mount namespace), nothing given but the guest: the comparison libvirt makes at the
/// KVM guest's start needs the host's CPU, which cannot be decoded: `not-compared` (exit 4)
/// naming the fact, the model answered from the built-in table with `cpu-map-unreadable`, never
/// "conforms" nor "unknown model".
#[test]
#[ignore = "needs root and util-linux's unshare to mount over /usr/share/libvirt/cpu_map in a private namespace: .ci/run runs it as root"]
fn this_machines_cpu_map_without_x86_data_is_not_compared() {
    assert!(is_root(), "needs root to mount in a private namespace");
    let scratch = Scratch::new("no-x86-own-map");
    let map = cpu_map_without_x86(&scratch);
    let guest = scratch.write("g.xml", KVM_NEHALEM);
    // A machine without libvirt has no /usr/share/libvirt to mount over: /usr/share is covered.
    let script = format!(
        "d=/usr/share/libvirt; [ -d $d ] || d=/usr/share; mount -t tmpfs tmpfs $d \
         && mkdir -p /usr/share/libvirt/cpu_map && cp '{}'/* /usr/share/libvirt/cpu_map/ \
         && exec '{}' check '{}'",
        s(&map),
        bin(),
        s(&guest)
    );
    let out = Cmd::new(&["-m", "--propagation", "private", "sh", "-c", &script])
        .program("unshare")
        .run();
    out.status(4);
    let not_compared = out
        .stdout
        .lines()
        .find(|l| l.contains("warning[not-compared]"))
        .unwrap_or_else(|| panic!("no not-compared finding:\n{}", out.stdout));
    assert!(not_compared.contains(NO_X86_DATA), "{not_compared}");
    assert!(
        out.stdout
            .lines()
            .any(|l| l.contains("warning[cpu-map-unreadable]")
                && l.contains("the built-in table answered for model 'Nehalem'")),
        "{}",
        out.stdout
    );
    assert!(!out.stdout.contains("cpu-model-unknown"), "{}", out.stdout);
}
